"""scripts/gpu_check.py, the device check a lent GPU runs in one call, runs end to end with
--quick on the CPU: every part reports, the JSON file holds what the table prints, and the
update part tells the trainer's float32 master weights from bf16 weights updated in place."""

from __future__ import annotations

import json

from scripts_loader import load_script


def test_the_device_check_runs_quick_on_the_cpu(tmp_path, capsys):
    out = tmp_path / "gpu_check.json"
    assert load_script("gpu_check").main(["--quick", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["mode"] == "quick" and result["versions"]["torch"]
    assert "MATH" in result["versions"]["sdpa_priority"]
    assert result["versions"]["sdpa_decode_op"], "no attention op seen in the profile"
    rows = result["generation"]["quick"]
    variants = {(r["variant"], r["cudnn"], r["width"]) for r in rows}
    assert len(variants) == 12 and all(r["steps"] == 4 and r["ms_per_step"] > 0 for r in rows)
    # One AdamW step at lr 1e-6: the master weights move, bf16 ones in place barely do.
    assert result["update"]["fp32_master_bf16_compute"] >= 0.99
    assert result["update"]["bf16_in_place"] < 0.1
    assert [r["step"] for r in result["loop"]] == [1, 2]
    assert [r["step"] for r in result["loop_qwen3.5"]] == [1, 2]  # Gated DeltaNet layers
    assert "torch fallback" in result["versions"]["gated_deltanet_path"]  # no fla here
    assert "verl's vLLM rollout" in result["not_run"]
    printed = capsys.readouterr().out
    assert "HFGenerator (worker thread), cuDNN off, warm" in printed and str(out) in printed


def test_a_failing_part_is_reported_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    check = load_script("gpu_check")

    def broken(shape, device):
        raise RuntimeError("CUDA out of memory (planted)")

    monkeypatch.setattr(check, "update_share", broken)
    # The generation timings are the first test's: here they would only take seconds.
    monkeypatch.setattr(check, "generation", lambda model, shape, full_matrix: [])
    out = tmp_path / "gpu_check.json"
    assert check.main(["--quick", "--out", str(out)]) == 1
    result = json.loads(out.read_text())
    assert result["failed"] == {"update": "RuntimeError: CUDA out of memory (planted)"}
    assert result["generation"] == {"quick": []}  # the part before it ran too
    assert [r["step"] for r in result["loop"]] == [1, 2]  # the part after it ran
    assert "FAILED      update" in capsys.readouterr().out
