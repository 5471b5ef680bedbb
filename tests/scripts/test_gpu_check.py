"""scripts/gpu_check.py, the device check a lent GPU runs in one call, runs end to end with
--quick on the CPU: every part reports, the JSON file holds what the table prints, and the
update part tells the trainer's float32 master weights from bf16 weights updated in place;
the verdict divides HFGenerator's warm timings by bare generate's on the same thread kind."""

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
    judged = result["verdict"]
    assert [(r["size"], r["cudnn"]) for r in judged["rows"]] == [("quick", True), ("quick", False)]
    assert all(r["baseline"] == "bare generate, new worker thread" for r in judged["rows"])
    assert judged["answers_the_gpu_question"] is False and "GPU" in judged["why_not"]
    printed = capsys.readouterr().out
    assert "HFGenerator (worker thread), cuDNN off, warm" in printed and str(out) in printed
    assert "quick: HFGenerator / bare, worker thread, cuDNN off, warm" in printed
    assert "does not answer the GPU question" in printed


def timings(size: str, warm: dict, cold_ms: float = 99.0) -> dict:
    """Generation rows as the check writes them: `warm` maps (variant, cuDNN) to ms per
    step; every variant gets a cold row too, which the verdict must ignore."""
    rows = []
    for (variant, cudnn), ms in warm.items():
        for width, value in (("cold", cold_ms), ("warm", ms)):
            rows.append({"variant": variant, "cudnn": cudnn, "width": width, "ms_per_step": value})
    return {size: rows}


def test_the_verdict_is_hfgenerator_over_bare_generate_on_the_same_thread_kind():
    check = load_script("gpu_check")
    hf, main, thread = check.HF, check.BARE_MAIN, check.BARE_THREAD
    generation = timings(
        "tiny",
        {(main, False): 1.0, (thread, False): 2.0, (hf, False): 2.9,  # 1.45x: passes
         (main, True): 1.0, (thread, True): 2.0, (hf, True): 3.2},  # 1.6x: fails
    )  # fmt: skip
    # The 0.5b model times bare generate on the main thread alone (full_matrix off).
    generation |= timings("0.5b", {(main, False): 2.0, (hf, False): 55.0})
    judged = check.verdict(generation, answers=None)
    assert judged["target"] == 1.5 and judged["answers_the_gpu_question"] is True
    got = {
        (r["size"], r["cudnn"]): (r["baseline"], r["ratio"], r["passed"]) for r in judged["rows"]
    }
    assert got == {
        ("tiny", True): (thread, 1.6, False),
        ("tiny", False): (thread, 1.45, True),
        ("0.5b", False): (main, 27.5, False),
    }
    printed = check.table({"generation": {}, "verdict": judged, "not_run": {}, "failed": {},
                           "seconds": 1.0})  # fmt: skip
    assert "tiny: HFGenerator / bare, worker thread, cuDNN off, warm" in printed
    assert "1.45x (2.90 / 2.00 ms/step): pass at 1.5x" in printed
    assert "1.60x (3.20 / 2.00 ms/step): FAIL at 1.5x" in printed
    assert "0.5b: HFGenerator / bare, main thread, cuDNN off, warm" in printed
    assert "does not answer" not in printed


def test_a_verdict_without_a_bare_timing_says_so_rather_than_passing():
    check = load_script("gpu_check")
    judged = check.verdict(timings("tiny", {(check.HF, False): 3.0}), answers="cpu figures")
    assert judged["rows"] == [{"size": "tiny", "cudnn": False, "baseline": check.BARE_MAIN,
                               "hf_ms": 3.0, "bare_ms": None, "ratio": None, "passed": None}]  # fmt: skip
    assert judged["answers_the_gpu_question"] is False
    printed = check.table({"generation": {}, "verdict": judged, "not_run": {}, "failed": {},
                           "seconds": 1.0})  # fmt: skip
    assert "no baseline timed" in printed and "cpu figures" in printed


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
