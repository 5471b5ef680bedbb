"""A run keeps its experiment and records what the paper's Appendix C.4 asks of a run.

One real run through the launcher (the local job: the tiny random Qwen2, one step of 4
tasks x 2 samples, through its own environment service), an ablation: A-Patch, the schema
cues and the profile push off. Then:

- each C.4 field is in its run directory, with the right value: the attempt's config, the
  overrides as given, the code's commit and uncommitted diff, every package's version,
  the sampling seeds (and the trainer did seed with them), the base checkpoint's identity
  (the tiny model's weights' sha256), the data order and the interface of each step;
- the base checkpoint's identity for the other kinds, without a run or the network: a
  local model directory (each file's sha256) and a hub model in a fake Hugging Face cache
  (its revision and blob hashes; one not in the cache recorded as such);
- resumed as the issue's user did, `-- name=... trainer.checkpoint.resume=true` with the
  default config (full SEAL), it is refused with the keys that differ, before anything
  is written (it used to continue as SEAL and overwrite config.yaml);
- `--resume RUN_DIR` continues it with its recorded config; a key a resume may change
  (`trainer.total_steps`) passes, another only with --accept-config-change, and each
  attempt keeps its own config and record, never rewritten.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402
from seal.trainer.model import build_tiny_model, load_tokenizer  # noqa: E402
from seal.trainer_config import ModelSettings  # noqa: E402


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture(scope="module")
def vanilla(one_step_run):
    """(run directory, the overrides given) of the ablation run (tests/conftest.py)."""
    run_dir, overrides, _ = one_step_run
    return run_dir, overrides


def attempt(run_dir: Path, number: int = 1) -> Path:
    return run_dir / "attempts" / f"{number:03d}"


def record(run_dir: Path, number: int = 1) -> dict:
    return json.loads((attempt(run_dir, number) / "record.json").read_text())


# --- the C.4 record: one test per field ----------------------------------------------------


def check_config(run_dir, overrides):
    saved = OmegaConf.load(attempt(run_dir) / "config.yaml")
    assert saved.trainer.apatch.enable is False and saved.trainer.rollout.seed == 7
    assert (run_dir / "config.yaml").read_text() == (attempt(run_dir) / "config.yaml").read_text()


def check_overrides(run_dir, overrides):
    command = record(run_dir)["command"]
    assert command["overrides"] == overrides and command["argv"] == ["--", *overrides]
    assert command["conf"].endswith("exp/cpu_default.yaml")


def check_code_commit(run_dir, overrides):
    assert record(run_dir)["code"]["commit"] == git("rev-parse", "HEAD").strip()


def check_uncommitted_diff(run_dir, overrides):
    assert (attempt(run_dir) / "uncommitted.diff").read_text() == git("diff", "HEAD", "--no-color")
    untracked = git("ls-files", "--others", "--exclude-standard").splitlines()
    assert record(run_dir)["code"]["untracked"] == untracked


def check_package_versions(run_dir, overrides):
    packages = record(run_dir)["packages"]
    assert packages["torch"] == torch.__version__
    assert packages["transformers"] == transformers.__version__
    assert "bfcl-eval" in packages and "seal-repro" in packages


def check_sampling_seed(run_dir, overrides):
    assert record(run_dir)["seeds"]["trainer.rollout.seed"] == 7
    assert record(run_dir)["seeds"]["trainer.data.seed"] == 0
    # The trainer seeded its sampling with it: the checkpoint's random state descends from
    # seed 7 (torch keeps the seed it was last given).
    rng = torch.load(run_dir / "checkpoints/step_000001/rng.pt", weights_only=True)
    generator = torch.Generator()
    generator.set_state(rng["torch"])
    assert generator.initial_seed() == 7


def check_base_model(run_dir, overrides):
    from seal.runs.run_record import weights_sha256

    base = json.loads((attempt(run_dir) / "base_model.json").read_text())
    model = ModelSettings(path="tiny-qwen2")
    expected = weights_sha256(build_tiny_model(model, load_tokenizer(model)).state_dict())
    assert base["path"] == "tiny-qwen2" and base["weights_sha256"] == expected
    assert base["settings"]["seed"] == 0 and base["settings"]["hidden_size"] == 64


def check_data_order(run_dir, overrides):
    order = json.loads((run_dir / "data_order.json").read_text())
    assert order["seed"] == 0 and order["train_batch_size"] == 4


def check_interface(run_dir, overrides):
    interface = json.loads((run_dir / "interface/step_000001.json").read_text())
    assert interface["step"] == 1


C4_FIELDS = {
    "config": check_config,
    "overrides as given": check_overrides,
    "code commit": check_code_commit,
    "uncommitted diff": check_uncommitted_diff,
    "package versions": check_package_versions,
    "sampling seed": check_sampling_seed,
    "base checkpoint": check_base_model,
    "data order": check_data_order,
    "interface per step": check_interface,
}


@pytest.mark.parametrize("field", C4_FIELDS)
def test_the_run_directory_records_each_c4_field(vanilla, field):
    run_dir, overrides = vanilla
    C4_FIELDS[field](run_dir, overrides)


# --- the base checkpoint's identity, for a model other than the tiny one --------------------


def recorded_identity(tmp_path: Path, path: str) -> dict:
    """`path`'s identity as a run records it: written to an attempt's base_model.json and
    read back."""
    from seal.runs.run_record import model_identity, record_base_model

    folder = tmp_path / "attempts" / "001"
    folder.mkdir(parents=True)
    record_base_model(folder, model_identity(path))
    return json.loads((folder / "base_model.json").read_text())


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


FILES = {"config.json": b'{"model_type": "qwen2"}', "tokenizer/vocab.json": b'{"a": 0}'}


def test_a_local_model_directory_is_recorded_by_each_files_sha256(tmp_path):
    model = tmp_path / "my_model"
    for name, data in FILES.items():
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_bytes(data)
    assert recorded_identity(tmp_path, str(model)) == {
        "path": str(model.resolve()),
        "kind": "local directory",
        "sha256": {name: sha256(data) for name, data in FILES.items()},
    }


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face hub cache in tmp_path/hub. huggingface_hub reads HF_HUB_CACHE
    once, at its import: its constant is pointed there as well."""
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def cache_model(cache: Path, repo_id: str, revision: str) -> dict[str, str]:
    """Lay out `repo_id` at `revision` as the hub's downloads do (blobs named by their
    sha256, the snapshot's files linking to them, refs/main naming the revision); each
    file's blob name."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    for name, data in FILES.items():
        blob = repo / "blobs" / sha256(data)
        blob.write_bytes(data)
        link = repo / "snapshots" / revision / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * (name.count("/") + 2)) / "blobs" / blob.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return {name: sha256(data) for name, data in FILES.items()}


def test_a_hub_model_is_recorded_by_its_revision_and_blob_hashes(tmp_path, hub_cache):
    revision = "0123456789abcdef0123456789abcdef01234567"
    blobs = cache_model(hub_cache, "org/name", revision)
    assert recorded_identity(tmp_path, "org/name") == {
        "path": "org/name",
        "kind": "hub",
        "revision": revision,
        "blobs": blobs,
    }


def test_a_hub_model_missing_from_the_cache_is_recorded_as_such(tmp_path, hub_cache):
    cache_model(hub_cache, "org/other", "f" * 40)
    identity = recorded_identity(tmp_path, "org/name")
    assert identity["kind"] == "hub" and identity["revision"] is None
    assert "not in the local Hugging Face cache" in identity["note"]


# --- resume keeps the experiment -----------------------------------------------------------


def test_resuming_an_ablation_with_the_default_config_is_refused_with_the_diff(vanilla, capsys):
    run_dir, _ = vanilla
    before = snapshot(run_dir)
    capsys.readouterr()
    code = launcher.main(["--", f"output_dir={run_dir.parent}", "name=b",
                          "trainer.checkpoint.resume=true"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    for key in ("trainer.apatch.enable", "trainer.interface.schema_cues",
                "trainer.rollout.push_profile"):  # fmt: skip
        assert f"{key}: False (recorded) -> True (now)" in err, err
    assert "trainer.total_steps:" not in err, "a key a resume may change was listed"
    assert f"--resume {run_dir}" in err and "--accept-config-change" in err
    assert snapshot(run_dir) == before, "the refused resume wrote into the run"


@pytest.mark.slow  # three more launcher runs: about 90 s on 2 cores
def test_resume_continues_the_recorded_config_and_records_each_attempt(vanilla, tmp_path, capsys):
    # A copy: the run is shared (tests/conftest.py's one_step_run) and this test extends it.
    run_dir = shutil.copytree(vanilla[0], tmp_path / "b", ignore=shutil.ignore_patterns(".lock"))
    first = snapshot(attempt(run_dir))
    config = (run_dir / "config.yaml").read_bytes()

    assert launcher.main(["--resume", str(run_dir), "--", "trainer.total_steps=2"]) == 0
    second = OmegaConf.load(attempt(run_dir, 2) / "config.yaml")
    assert second.trainer.apatch.enable is False and second.trainer.total_steps == 2
    assert record(run_dir, 2)["command"]["resume"] == str(run_dir)
    assert record(run_dir, 2)["accepted_changes"] == []

    refused = ["--resume", str(run_dir), "--", "trainer.total_steps=3",
               "trainer.apatch.enable=true"]  # fmt: skip
    assert launcher.main(refused) == 1
    assert "trainer.apatch.enable: False (recorded) -> True (now)" in capsys.readouterr().err
    assert launcher.main([refused[0], refused[1], "--accept-config-change", *refused[2:]]) == 0
    assert record(run_dir, 3)["accepted_changes"] == [
        "trainer.apatch.enable: False (recorded) -> True (now)"
    ]
    assert OmegaConf.load(attempt(run_dir, 3) / "config.yaml").trainer.apatch.enable is True

    assert snapshot(attempt(run_dir)) == first, "a resume rewrote the first attempt's record"
    assert (run_dir / "config.yaml").read_bytes() == config, "a resume rewrote config.yaml"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]
