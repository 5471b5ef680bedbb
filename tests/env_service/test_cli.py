"""`python -m env_service`'s command line is made from ServiceConfig: a flag for every
setting (but the one left out on purpose), which sets that setting, under the flag names
the README and the starters use, with the setting's docstring as its help."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from env_service import __main__ as service_main
from env_service.service_config import ServiceConfig

FIELDS = ServiceConfig.model_fields


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    service_main.add_config_flags(p)
    return p


def other_value(name: str) -> tuple[list[str], object]:
    """A valid value for setting `name` unlike its default, as command-line words and as
    parsed (a bool setting: `--x` or `--no-x`)."""
    default = FIELDS[name].default
    flag = service_main.flag_of(name)
    if isinstance(default, bool):
        return ["--no-" + flag.removeprefix("--") if default else flag], not default
    highest = min((m.le for m in FIELDS[name].metadata if hasattr(m, "le")), default=None)
    if isinstance(default, int):  # one more, or one less at the setting's upper bound
        value = default - 1 if default == highest else default + 1
        return [flag, str(value)], value
    if isinstance(default, float):  # more, within the setting's upper bound
        value = default + 1.5 if highest is None else (default + highest) / 2
        return [flag, str(value)], value
    if name == "token":
        return [flag, "t0k3n"], "t0k3n"
    return [flag, "/tmp/some/where"], Path("/tmp/some/where")


def test_every_setting_has_a_flag_that_sets_it():
    argv, expected = [], {}
    for name in FIELDS:
        if name in service_main.NO_FLAG:
            continue
        words, value = other_value(name)
        argv += words
        expected[name] = value
    config = ServiceConfig(**vars(parser().parse_args(argv)))
    for name, value in expected.items():
        assert getattr(config, name) == value, name
    assert set(expected) | set(service_main.NO_FLAG) == set(FIELDS)


def test_flags_not_given_leave_the_config_defaults():
    assert ServiceConfig(**vars(parser().parse_args([]))) == ServiceConfig()


@pytest.mark.parametrize(
    "flag, name",
    [
        ("--max-live-episodes", "max_live_episodes"),
        ("--episode-ttl", "episode_ttl_s"),
        ("--worker-stall-seconds", "worker_stall_seconds"),
        ("--header-timeout", "header_timeout_s"),
        ("--body-timeout", "body_timeout_s"),
        ("--web-search-interval", "web_search_interval_s"),
        ("--capability-state", "capability_state_path"),
        ("--memory-snapshot-dir", "memory_snapshot_dir"),
        ("--embedding-model", "embedding_model_dir"),
        ("--token", "token"),
        ("--release-protocol", "release_protocol"),
    ],
)
def test_the_documented_flag_names_are_kept(flag, name):
    assert service_main.flag_of(name) == flag


def test_the_help_is_each_settings_docstring(capsys):
    with pytest.raises(SystemExit):
        service_main.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for name, field in FIELDS.items():
        if name in service_main.NO_FLAG:
            assert service_main.flag_of(name) not in out
            continue
        assert field.description, f"{name} has no docstring"
        # argparse wraps at hyphens too: compare without the spaces it may add there.
        text = " ".join(field.description.split())
        assert text.replace("- ", "-") in out.replace("- ", "-"), name
    assert "(default: 1024)" in out and "(default: $SEAL_ENV_TOKEN)" in out


def test_a_flag_with_a_bad_value_is_refused_with_the_setting_named(capsys):
    with pytest.raises(SystemExit) as stopped:
        service_main.main(["--worker-niceness", "40"])
    assert stopped.value.code == 2
    assert "worker_niceness" in capsys.readouterr().err
