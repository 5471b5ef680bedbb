"""Checkpoints load anywhere, and a model directory is scored in one command.

One real run through the launcher (the tiny random Qwen2, one step, a checkpoint; shared
with test_run_record.py: tests/conftest.py's one_step_run). Then:
- the checkpoint is a Hugging Face model directory: its tokenizer loads with the model's
  vocabulary and chat template (it used to "load" with a vocabulary of 1), the model
  generates from a chat-templated prompt, and the run's last lines name it with the
  export and scoring commands;
- `seal-export` writes the model's files alone (no optimizer state), and gives a checkpoint
  without a tokenizer the run's, saying so; it refuses damaged weights and leaves an
  existing `OUT.tmp` alone;
- `transformers serve` on the checkpoint answers a chat request (it answered 500);
- `seal-eval --model-dir` scores it with the records the URL path gives, and a server
  error is reported with the server's own message, not only "HTTP 500" (slow: each
  starts a server).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import free_port, shipped_tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from seal.rollout.env_client import TOKEN_ENV

EVAL = ["--limit", "1", "--max-generations", "2", "--max-tokens", "8", "--concurrency", "2",
        "--quiet", "--attempts", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def run(one_step_run):
    """(run directory, the launcher's output) of a one-step tiny run (tests/conftest.py)."""
    run_dir, _, printed = one_step_run
    return run_dir, printed


def checkpoint(run_dir: Path) -> Path:
    return run_dir / "checkpoints" / "step_000001"


def test_a_checkpoint_is_a_hugging_face_model_directory(run):
    run_dir, _ = run
    shipped = shipped_tokenizer()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint(run_dir))
    assert len(tokenizer) == len(shipped) and tokenizer.chat_template == shipped.chat_template
    model = AutoModelForCausalLM.from_pretrained(checkpoint(run_dir))
    assert len(tokenizer) <= model.config.vocab_size
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, return_tensors="pt",
        return_dict=True,
    )  # fmt: skip
    out = model.generate(**prompt, max_new_tokens=2, do_sample=False)
    assert out.shape[1] == prompt["input_ids"].shape[1] + 2


def test_the_run_s_last_lines_name_the_model_and_the_export_command(run):
    run_dir, output = run
    last = output.strip().splitlines()[-1]
    assert f"{checkpoint(run_dir)}, a Hugging Face model directory" in last, last
    assert f"seal-export {run_dir} " in last and "seal-eval --model-dir" in last


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_weights_are_as_readable_as_the_rest_of_the_checkpoint(run):
    """The safetensors writer makes model.safetensors 0600, while config.json and the
    tokenizer get the umask's mode: another user or a vLLM container could not read it."""
    folder = checkpoint(run[0])
    assert mode(folder / "model.safetensors") == mode(folder / "config.json"), oct(
        mode(folder / "model.safetensors")
    )


def test_the_export_hint_runs_as_pasted_into_a_shell_without_the_venv(run, tmp_path, monkeypatch):
    """The run's last line names seal-export and seal-eval so that they run from the
    directory the run was started in, the venv not activated (`.venv/bin/seal-export`,
    as the README writes it); the export's files, weights included, are readable like a
    plain file (a checkpoint written 0600, as verl's or an older one's, included)."""
    from seal.runs.export import export_hint

    run_dir = tmp_path / "run"
    shutil.copytree(run[0], run_dir, ignore=shutil.ignore_patterns(".lock"))
    os.chmod(checkpoint(run_dir) / "model.safetensors", 0o600)
    repo = Path(__file__).resolve().parents[3]
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(repo)
    hint = export_hint(run_dir)
    export, score = hint.split("Export it alone: ")[1].split("; score it: ")
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(["bash", "-c", export], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"{export}\n{done.stderr}"
    out = tmp_path / "export" / "run"
    assert json.loads((out / "seal_export.json").read_text())["step"] == 1
    plain = mode(out / "config.json")
    assert {f.name: mode(f) for f in out.iterdir()} == {f.name: plain for f in out.iterdir()}
    program = shlex.split(score)[0]
    help_run = subprocess.run(["bash", "-c", f"{program} --help"], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
    assert help_run.returncode == 0, f"{score}\n{help_run.stderr}"


def test_export_writes_the_model_alone(run, tmp_path, capsys):
    from seal.runs.export import main as seal_export

    run_dir, _ = run
    out = tmp_path / "model"
    assert seal_export([str(run_dir), str(out), "--step", "latest"]) == 0
    assert "exported step 1" in capsys.readouterr().out
    assert not (out / "optimizer.pt").exists() and not (out / "rng.pt").exists()
    trained = AutoModelForCausalLM.from_pretrained(checkpoint(run_dir)).state_dict()
    exported = AutoModelForCausalLM.from_pretrained(out).state_dict()
    assert all(torch.equal(trained[name], exported[name]) for name in trained)
    assert len(AutoTokenizer.from_pretrained(out)) == len(shipped_tokenizer())
    assert json.loads((out / "seal_export.json").read_text())["step"] == 1

    # The best validated step of this run is step 1 (validated at the end), by the run's
    # rule (cpu_default's: this project's average), which the export records and says.
    assert seal_export([str(run_dir), str(tmp_path / "best")]) == 0
    assert json.loads((tmp_path / "best/seal_export.json").read_text())["best_rule"] == "average"
    assert "exported step 1 (the best by the average rule)" in capsys.readouterr().out
    # A checkpoint from before checkpoints held their tokenizer gets the run's, said so.
    old = tmp_path / "old_run"
    shutil.copytree(run_dir, old, ignore=shutil.ignore_patterns(".lock"))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (checkpoint(old) / name).unlink()
    assert seal_export([str(old), str(tmp_path / "old_model"), "--step", "1"]) == 0
    assert "the checkpoint has none: the run config" in capsys.readouterr().out
    assert AutoTokenizer.from_pretrained(tmp_path / "old_model").chat_template


def test_export_leaves_an_existing_out_tmp_alone(run, tmp_path):
    """`OUT.tmp` may be anything of the user's: it was deleted without a word."""
    from seal.runs.export import main as seal_export

    run_dir, _ = run
    mine = tmp_path / "model.tmp"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert seal_export([str(run_dir), str(tmp_path / "model"), "--step", "latest"]) == 0
    assert (mine / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.tmp"]


@pytest.mark.parametrize("damage", ["cut in half", "index names a missing tensor"])
def test_export_refuses_a_damaged_checkpoint_and_writes_nothing(run, tmp_path, capsys, damage):
    """A weights file cut in half was exported with exit 0 (the export did not load)."""
    from seal.runs.export import main as seal_export

    run_dir = shutil.copytree(run[0], tmp_path / "run", ignore=shutil.ignore_patterns(".lock"))
    weights = checkpoint(run_dir) / "model.safetensors"
    if damage == "cut in half":
        data = weights.read_bytes()
        weights.write_bytes(data[: len(data) // 2])
        named = weights
    else:  # a sharded model's index naming a tensor no file holds
        named = checkpoint(run_dir) / "model.safetensors.index.json"
        index = {"weight_map": {"model.embed_tokens.weight": "model.safetensors",
                                "model.extra.weight": "model.safetensors"}}  # fmt: skip
        named.write_text(json.dumps(index))
    capsys.readouterr()
    out = tmp_path / "exports" / "model"
    assert seal_export([str(run_dir), str(out), "--step", "latest"]) == 1
    err = capsys.readouterr().err
    assert str(named) in err and "not exported" in err, err
    assert not out.parent.exists() or not any(out.parent.iterdir()), "a refused export wrote"


@pytest.fixture(scope="module")
def served(run, tmp_path_factory):
    """`transformers serve` on the run's checkpoint, as a user would start it."""
    from seal.eval.model_server import serve_model

    run_dir, _ = run
    log = tmp_path_factory.mktemp("server") / "server.log"
    with serve_model(checkpoint(run_dir), log, device="cpu") as server:
        yield server


def test_transformers_serve_on_a_checkpoint_answers_a_chat_request(served):
    from seal.eval.chat_endpoint import ChatEndpoint, EndpointSettings

    async def ask():
        settings = EndpointSettings(served.base_url, served.model, attempts=1, timeout_s=120)
        async with ChatEndpoint(settings) as chat:
            return await chat.complete([{"role": "user", "content": "Hi"}], "a request", 4)

    reply = asyncio.run(ask())
    assert isinstance(reply.text, str) and reply.finish_reason in ("stop", "length")


def records_of(out_dir: Path) -> dict[str, dict]:
    lines = (out_dir / "validation" / "step_000000.jsonl").read_text().splitlines()
    return {r["task_id"]: r for r in map(json.loads, lines)}


@pytest.mark.slow  # two evaluations, one with a server of its own: about 2 minutes here
def test_seal_eval_scores_a_model_directory_as_the_url_path_does(served, run, tmp_path):
    from seal.eval.score_endpoint import main as seal_eval

    run_dir, _ = run
    token_before = os.environ.get(TOKEN_ENV)
    common = [*EVAL, "--start-env", "--tokenizer", str(checkpoint(run_dir))]
    by_url = ["--base-url", served.base_url, "--model", served.model]
    env = ["--env-url", f"http://127.0.0.1:{free_port()}"]
    assert seal_eval([*by_url, *common, *env, "--out-dir", str(tmp_path / "url")]) == 0
    env = ["--env-url", f"http://127.0.0.1:{free_port()}"]
    by_dir = ["--model-dir", str(checkpoint(run_dir)), "--server-device", "cpu"]
    assert seal_eval([*by_dir, *common, *env, "--out-dir", str(tmp_path / "dir")]) == 0
    assert os.environ.get(TOKEN_ENV) == token_before  # its service's token left with it
    url, local = records_of(tmp_path / "url"), records_of(tmp_path / "dir")
    assert sorted(url) == sorted(local) and len(url) == 4
    for task_id, record in url.items():
        other = local[task_id]
        for key in ("score", "reward", "output", "failure_tags", "turns", "input"):
            assert record[key] == other[key], (task_id, key)
        timing = {"seconds"}
        assert {k: v for k, v in record["extra"].items() if k not in timing} == {
            k: v for k, v in other["extra"].items() if k not in timing
        }
    assert not (tmp_path / "dir" / "model_server.log").read_text().count("Traceback")


@pytest.mark.slow  # starts a server: about a minute here
def test_a_server_error_is_reported_with_the_server_s_message(run, tmp_path, capsys):
    from seal.eval.score_endpoint import main as seal_eval

    run_dir, _ = run
    broken = tmp_path / "no_template"
    shutil.copytree(checkpoint(run_dir), broken)
    (broken / "chat_template.jinja").unlink()  # the server answers 500 to every chat request
    env = ["--env-url", f"http://127.0.0.1:{free_port()}"]
    args = ["--model-dir", str(broken), "--server-device", "cpu", *EVAL, "--start-env", *env]
    assert seal_eval([*args, "--out-dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "HTTP 500" in err and "tokenizer.chat_template is not set" in err, err


def test_a_verl_run_s_checkpoint_exports_or_names_verl_s_merge_command(tmp_path, capsys):
    """verl's checkpoints keep the model as Hugging Face files in actor/huggingface (its
    checkpoint manager saves the tokenizer there always, the weights with
    verl.export_hf_weights); the export finds the best or the latest one, and without
    weights names verl's own merge command."""
    from seal.runs.export import main as seal_export
    from seal.trainer.model import save_tiny_model
    from seal.trainer_config import ModelSettings

    run_dir = tmp_path / "verl_run"
    step2 = run_dir / "checkpoints/global_step_2/actor/huggingface"
    save_tiny_model(ModelSettings(path="tiny-qwen2"), step2)
    best = run_dir / "checkpoints/best"
    shutil.copytree(run_dir / "checkpoints/global_step_2", best)
    best_record = {"step": 2, "rule": "release", "metric": "val/multi_turn_base", "value": 0.5}
    (best / "seal_best.json").write_text(json.dumps(best_record))
    assert seal_export([str(run_dir), str(tmp_path / "best")]) == 0
    exported = json.loads((tmp_path / "best/seal_export.json").read_text())
    assert (exported["step"], exported["best_rule"]) == (2, "release")
    assert len(AutoTokenizer.from_pretrained(tmp_path / "best")) == len(shipped_tokenizer())
    for weights in step2.glob("*.safetensors"):
        weights.unlink()
    assert seal_export([str(run_dir), str(tmp_path / "latest"), "--step", "latest"]) == 1
    err = capsys.readouterr().err
    assert "verl.export_hf_weights was off" in err and "python -m verl.model_merger merge" in err
