"""Every console script of pyproject.toml answers `--help` with examples of its use, and the
launcher's help has its own: a new user's first question is what a command line looks like."""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {
    e.name: e.value for e in distribution("seal-repro").entry_points if e.group == "console_scripts"
}
"""pyproject.toml's [project.scripts], as installed."""


def help_text(entry_point: str) -> str:
    module, function = entry_point.split(":")
    main = getattr(importlib.import_module(module), function)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_console_scripts_help_shows_examples_of_its_use(name):
    text = help_text(SCRIPTS[name])
    # An example is a line that runs the script: its bare name, or its file in the venv.
    uses = [line.strip() for line in text.splitlines() if line.strip().split(" ")[0]
            in (name, str(Path(sys.executable).parent / name)) or f"bin/{name} " in line]  # fmt: skip
    assert len(uses) >= 2, f"{name} --help shows no example:\n{text}"


def test_the_launchers_help_shows_examples():
    sys.path.insert(0, str(REPO))
    text = help_text("launcher:main")
    assert text.count("launcher.py --") >= 3, text


def test_the_gpu_pages_scoring_commands_parse_and_count_with_the_models_tokenizer():
    """docs/gpu.md's seal-eval lines (a checkpoint served by vLLM) are valid seal-eval
    command lines, each in a tool format and with the tokenizer a served path needs."""
    import shlex

    from seal.eval.endpoint_episode import load_tokenizer
    from seal.eval.score_endpoint import parse_args, prompting_of

    text = (REPO / "docs" / "gpu.md").read_text().replace("\\\n", " ")
    lines = [line.split("#")[0] for line in text.splitlines() if "bin/seal-eval " in line]
    assert len(lines) >= 2, "the renter's page shows how to score a trained checkpoint"
    for line in lines:
        args = parse_args(shlex.split(line.split("bin/seal-eval", 1)[1]))
        assert args.base_url and args.start_env and args.tokenizer == args.model, line
        assert prompting_of(args).tool_format.name.startswith("bfcl_qwen_fc"), line
    with pytest.raises(ValueError, match="--tokenizer is needed"):
        load_tokenizer(None, "outputs/export/SEAL")  # why the page names it
