"""A resume keeps the experiment: the command line may change only what cannot change it.

A resumed run continues the config its last attempt recorded (`recorded_config`). The
config a resume composes is compared with it key by key: the keys of `RESUME_SAFE` may
differ; any other difference is refused (`ResumeConfigChanged`) unless the launcher is
told `--accept-config-change`, and then the attempt's record lists it. The settings the
run's service reports are checked the same way (all but `SERVICE_SETTINGS_SAFE`), and
every change of them is recorded. Each safe key and why: docs/runs.md, "A resume keeps
the experiment".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from seal import commands
from seal.runs.redact import names_secret
from seal.runs.run_record import (
    ATTEMPTS_DIR,
    CONFIG_FILENAME,
    RECORD_FILENAME,
    latest_attempt,
    read_record,
)

RESUME_SAFE: dict[str, str] = {
    "name": "the run's directory, which the resume names",
    "output_dir": "the same (a run directory moved elsewhere resumes there)",
    "trainer.total_steps": "how long the run goes on, not what a step does",
    "trainer.total_epochs": "the same",
    "trainer.checkpoint.resume": "the resume itself",
    "trainer.checkpoint.allow_data_order_change": "the data order's own check "
    "(data_order.json) answers for it",
    "trainer.checkpoint.save_freq": "when checkpoints are written",
    "trainer.checkpoint.keep_only_best": "which checkpoints are kept",
    "trainer.logging": "where the metrics also go (wandb)",
    "trainer.model.device": "which device of the machine runs the model (cuda:0, cuda:1)",
    "service": "where the environment service runs and how the client waits for it; the "
    "episodes it serves are set by `trainer`",
    "verl.env_url": "the address Ray's workers reach the service at",
    "verl.preflight": "the checks before the start",
    "verl.dump_advantages": "a debugging dump of what verl trained on",
    "verl.param_offload": "where FSDP keeps parameters between uses (memory, not values)",
    "verl.optimizer_offload": "where FSDP keeps the optimizer state (the same)",
}
"""Keys (or sections: every key under them) a resume may change without
`--accept-config-change`, each with why it cannot change the experiment."""

SERVICE_SETTINGS_SAFE: dict[str, str] = {
    "max_live_episodes": "how many episodes the service holds at once ('busy' beyond, and "
    "the client waits), not what one may do",
    "workers": "how many processes run the episodes' calls, not what the calls do",
    "worker_niceness": "the workers' CPU priority",
    "worker_stall_seconds": "when a frozen worker is replaced (its episodes rebuilt and "
    "their calls sent again)",
    "episode_cpu_share": "how fast a costly episode's calls run, not what they do or "
    "answer (time waited for it is outside every time budget)",
    "episode_cpu_burst_s": "the same",
    "header_timeout_s": "the connections' limits, which the run's own client keeps inside",
    "body_timeout_s": "the same",
    "keep_alive_s": "the same",
    "max_unauthenticated_connections": "the same",
    "max_profile_bytes": "the largest profile push; the trainer's are far smaller",
    "release_protocol": "the original release's routes; the run uses the native API",
    "memory_snapshot_dir": "BFCL V4 memory tasks, which training does not run",
    "memory_lease_s": "the same",
    "embedding_model_dir": "the same",
    "web_search_interval_s": "BFCL V4 web-search tasks, which training does not run",
    "web_search_attempts": "the same",
    "web_search_backoff_s": "the same",
    "web_search_timeout_s": "the same",
    "web_fetch_timeout_s": "the same",
    "web_fetch_max_bytes": "the same",
    "web_search_processes": "the same",
}
"""Settings of the environment service (env_service/service_config.py, as `GET /v1/whoami`
reports them) a resume may find changed without `--accept-config-change`, each with why
it cannot change what a training episode may do. Any other (the limits of a step and
an episode, the idle time an episode survives, the profile's source, a setting added
later) is refused unless accepted: a service adopted with `--max-calls-per-step 1` trains
on other episodes."""

SERVICE_KEY_PREFIX = "env_service."
"""How a change of the service's own settings is named (the config's keys are
`service.*`)."""

ACCEPT_FLAG = "--accept-config-change"
DATA_ORDER_KEYS = (
    "trainer.data.train_file",
    "trainer.data.max_train_tasks",
    "trainer.data.train_batch_size",
    "trainer.data.seed",
    "trainer.data.order",
)
"""What fixes the data order: `trainer.checkpoint.allow_data_order_change` lets a resume
change them (seal/runs/data_order.py checks and records the change)."""


@dataclass(frozen=True)
class Change:
    key: str
    recorded: object
    now: object

    def __str__(self) -> str:
        return f"{self.key}: {self.recorded!r} (recorded) -> {self.now!r} (now)"


class ResumeConfigChanged(ValueError):
    """A resume's config differs from the run's recorded one in keys that change the
    experiment."""


def is_resume_safe(key: str) -> bool:
    return any(key == safe or key.startswith(safe + ".") for safe in RESUME_SAFE)


def recorded_config(run_dir: Path) -> Path | None:
    """The config the run's last attempt ran with; None when the run has none."""
    attempt = latest_attempt(run_dir)
    for path in ([attempt / CONFIG_FILENAME] if attempt else []) + [run_dir / CONFIG_FILENAME]:
        if path.exists():
            return path
    return None


def _leaves(node: object, prefix: str = "") -> Iterator[tuple[str, object]]:
    """Dotted key -> value of every leaf (dicts descend; lists are values)."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], node


def config_changes(recorded, now) -> list[Change]:
    """Every leaf whose value differs between two composed run configs."""
    old = dict(_leaves(OmegaConf.to_container(recorded, resolve=True)))
    new = dict(_leaves(OmegaConf.to_container(now, resolve=True)))
    return [
        Change(key, old.get(key), new.get(key))
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    ]


def check_resume(recorded, now, recorded_path: Path, accept: bool) -> list[Change]:
    """The changes of `now` (the resume's composed config) from `recorded` (the run's, as
    composed from `recorded_path`) that are let through, to be recorded: all with `accept`,
    the data-order keys with `trainer.checkpoint.allow_data_order_change`; raises
    `ResumeConfigChanged` naming the others."""
    changes = [c for c in config_changes(recorded, now) if not is_resume_safe(c.key)]
    allowed = DATA_ORDER_KEYS if now.trainer.checkpoint.allow_data_order_change else ()
    refused = [c for c in changes if c.key not in allowed]
    if refused and not accept:
        run_dir = recorded_path.parent
        if run_dir.parent.name == ATTEMPTS_DIR:
            run_dir = run_dir.parent.parent
        listed = "\n  ".join(map(str, refused))
        raise ResumeConfigChanged(
            f"this resume's config differs from the run's recorded one ({recorded_path}) in "
            f"keys that change the experiment:\n  {listed}\n"
            f"Resume the run as recorded with `{commands.resume(run_dir)}` (with "
            "`-- key=value` for the keys a resume may change: the steps, checkpointing, "
            "logging, the service; seal/launch/resume.py lists them), or add "
            f"{ACCEPT_FLAG} to go on with these values (the attempt's record lists them)"
        )
    return changes


def service_section_changes(recorded, now) -> list[Change]:
    """The changes of the config's `service` section (resume-safe, recorded; its token
    left out)."""
    return [
        change
        for change in config_changes(recorded, now)
        if change.key.startswith("service.") and not names_secret(change.key)
    ]


@dataclass(frozen=True)
class ServiceBaseline:
    """What a checked resume compares its service with once it runs."""

    settings: dict | None
    """The settings the service of the run's last attempt reported (None: not recorded,
    by an earlier version)."""
    section_changes: list[Change]
    """The changes of the config's `service` section (`service_section_changes`)."""


def service_baseline(run_dir: Path, recorded, now) -> ServiceBaseline:
    """The baseline of a resume of `run_dir` from the `recorded` config to `now`."""
    attempt = latest_attempt(run_dir)
    try:
        service = read_record(attempt).get("service") if attempt else None
    except (OSError, ValueError) as error:
        print(f"[launcher] the last attempt's record cannot be read ({error}): its service's "
              "settings are not compared with this one's")  # fmt: skip
        service = None
    settings = service.get("settings") if isinstance(service, dict) else None
    if not isinstance(settings, dict):
        settings = None
        print("[launcher] the run's last attempt recorded no service settings (an earlier "
              "version): this attempt's are recorded, none compared")  # fmt: skip
    return ServiceBaseline(settings, service_section_changes(recorded, now))


def service_changes(recorded: dict | None, now: dict | None) -> list[Change]:
    """Every setting the service reports that differs between the run's last attempt
    (`recorded`) and this one (`now`); none when the record has none (None: from before
    services reported their settings), one for all when the service reports none (an
    adopted service of that time: nothing shows its settings are the recorded ones)."""
    if recorded is None:
        return []
    if now is None:
        return [Change(f"{SERVICE_KEY_PREFIX}*", "reported", "not reported")]
    return [
        Change(f"{SERVICE_KEY_PREFIX}{key}", recorded.get(key), now.get(key))
        for key in sorted(recorded.keys() | now.keys())
        if recorded.get(key) != now.get(key)
    ]


def check_service(
    baseline: ServiceBaseline, settings: dict | None, run_dir: Path, accept: bool
) -> tuple[list[Change], list[Change]]:
    """(the changes that need acceptance and were accepted, every change to record) of
    the service, reporting `settings`, since the run's last attempt; raises
    `ResumeConfigChanged` naming those that need acceptance, unless `accept`."""
    changes = service_changes(baseline.settings, settings)
    refused = [c for c in changes if c.key[len(SERVICE_KEY_PREFIX) :] not in SERVICE_SETTINGS_SAFE]
    if refused and not accept:
        listed = "\n  ".join(map(str, refused))
        raise ResumeConfigChanged(
            f"this resume's environment service has other settings than the one of the "
            f"run's last attempt, in ones that change what an episode may do:\n  {listed}\n"
            f"Start the service with the recorded settings (`service` in "
            f"{run_dir}/{ATTEMPTS_DIR}/<last>/{RECORD_FILENAME}), or let the launcher start "
            f"its own (service.start=true, service.port=0), or add {ACCEPT_FLAG} to go on "
            "with these (the attempt's record lists them)"
        )
    return refused, baseline.section_changes + changes
