"""The device check: what one call on a lent GPU measures of the local trainer's path, with
only torch and transformers installed (no verl, Ray or vLLM: the lent machines have none).

    python scripts/gpu_check.py [--quick] [--out gpu_check.json] [--sizes tiny 0.5b]

Parts (a group of rows in the printed table, a key of the JSON file): versions,
generation (bare generate vs the rollout's HFGenerator), verdict (HFGenerator within
RATIO_TARGET of bare generate), update (what one bf16 step moves), loop (the local
trainer's steps, Qwen2 and Qwen3.5), not_run. `--quick`: tiny shapes, seconds on a CPU.
Each part in detail: docs/gpu.md, "The device check".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the device runs from a copy of the tree, not installed

NOT_RUN = {
    "environment service and LocalTrainer.fit": "fastapi, bfcl-eval and omegaconf are not on "
    "the device: the loop runs the trainer's generator and update on synthetic episodes",
    "verl's vLLM rollout": "vLLM is not on the device (verl's own GPU path: install.sh --gpu)",
}
BARE_MAIN = "bare generate, main thread"
BARE_THREAD = "bare generate, new worker thread"
HF = "HFGenerator (worker thread)"
RATIO_TARGET = 1.5
"""The rollout's ms per new token may be at most this many times a bare `generate`'s on the
same shapes (issue 33)."""
SHAPES = {
    # The rollout's shapes: the local trainer's batch of 32 episodes at ~4.3k-token prompts.
    "full": {"batch": 32, "prompt": 4300, "new": 64, "vocab": 151936,
             "loop_batch": 16, "loop_prompt": 2048, "loop_new": 128},
    "quick": {"batch": 2, "prompt": 48, "new": 4, "vocab": 1024,
              "loop_batch": 4, "loop_prompt": 32, "loop_new": 4},
}  # fmt: skip
MODELS = {
    # exp/cpu_default.yaml's tiny-qwen2 (its defaults) and Qwen2.5-0.5B's shape, random.
    "tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 128},
    "0.5b": {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2, "intermediate_size": 4864},
    "quick": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
              "num_key_value_heads": 1, "intermediate_size": 64},
}  # fmt: skip


def random_qwen2(shape: dict, vocab: int, device, seed: int = 0):
    """A randomly initialised Qwen2 of `shape` in float32 on `device` (tied embeddings)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, tie_word_embeddings=True, **shape)
    return Qwen2ForCausalLM(config).to(device)


def random_qwen35(shape: dict, vocab: int, device, seed: int = 0):
    """A randomly initialised Qwen3.5 of `shape`'s width, 4 layers (Gated DeltaNet x 3, then
    full attention: tiny-qwen3.5's layout, seal/trainer/model.py), float32 on `device`."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(seed)
    head = shape["hidden_size"] // shape["num_attention_heads"]
    config = Qwen3_5TextConfig(
        vocab_size=vocab, tie_word_embeddings=True, **{**shape, "num_hidden_layers": 4},
        head_dim=head, linear_key_head_dim=head, linear_value_head_dim=head,
        linear_num_key_heads=shape["num_key_value_heads"],
        linear_num_value_heads=shape["num_attention_heads"],
    )  # fmt: skip
    return Qwen3_5ForCausalLM(config).to(device)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_gb(device) -> float | None:
    """Peak allocated GB since the last call (a new count started); None off CUDA."""
    import torch

    if device.type != "cuda":
        return None
    peak = torch.cuda.max_memory_allocated(device) / 1e9
    torch.cuda.reset_peak_memory_stats(device)
    return peak


# --- versions and SDPA ------------------------------------------------------------------------


def versions(device) -> dict:
    import torch
    import transformers
    from torch.nn.attention import SDPBackend

    from seal.trainer.preflight_rows import linear_attention_path

    facts = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "transformers": transformers.__version__,
        "device": str(device),
    }
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        facts |= {"gpu": p.name, "capability": f"{p.major}.{p.minor}",
                  "gpu_memory_gib": round(p.total_memory / 1024**3, 1)}  # fmt: skip
    # No public accessor in torch 2.11-2.13; said when this one lacks the private one.
    order = getattr(torch._C, "_get_sdp_priority_order", None)
    facts["sdpa_priority"] = (
        [SDPBackend(i).name for i in order()] if order else "unknown: no _get_sdp_priority_order"
    )
    facts["sdpa_enabled"] = {
        "flash": torch.backends.cuda.flash_sdp_enabled(),
        "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
        "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
        "math": torch.backends.cuda.math_sdp_enabled(),
    }
    facts["sdpa_decode_op"] = sdpa_op(device)
    facts["gated_deltanet_path"] = linear_attention_path()[1]
    return facts


def sdpa_op(device) -> list[str]:
    """The aten ops one default sdpa call runs on a decoding step's shapes as Hugging Face
    passes them (one query, a 4.3k-token cache, a boolean padding mask, bf16)."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import profile

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    q = torch.randn(32, 4, 1, 16, device=device, dtype=dtype)
    k = torch.randn(32, 4, 4300, 16, device=device, dtype=dtype)
    mask = torch.ones(32, 1, 1, 4300, device=device, dtype=torch.bool)
    mask[:, :, :, :100] = False  # left padding
    F.scaled_dot_product_attention(q, k, k, attn_mask=mask)
    with profile() as prof:
        F.scaled_dot_product_attention(q, k, k, attn_mask=mask)
        sync(device)
    ops = {e.name for e in prof.events() if e.name.startswith("aten::_") and "attention" in e.name}
    return sorted(ops)


# --- generation -------------------------------------------------------------------------------


def prompts(batch: int, width: int, vocab: int, seed: int) -> list[list[int]]:
    """`batch` prompts of random ids, the widest `width` and the others up to a quarter
    shorter (left padding, as the rollout's batches have)."""
    import random

    rng = random.Random(seed)
    lengths = [width] + [width - rng.randrange(width // 4 + 1) for _ in range(batch - 1)]
    return [[rng.randrange(vocab - 1) for _ in range(n)] for n in lengths]


def ids_only(stop: int):
    """What HFGenerator reads of a tokenizer, for prompts that are ids already."""
    return SimpleNamespace(pad_token_id=0, eos_token_id=stop)


def left_padded(rows: list[list[int]], device):
    import torch

    width = max(map(len, rows))
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.tensor(row)
        mask[i, width - len(row) :] = 1
    return ids.to(device), mask.to(device)


def bare_generate(model, rows, new: int, stop: int, attention) -> int:
    """One `model.generate` with sampling as the rollout samples; the steps it ran."""
    import torch
    from torch.nn.attention import sdpa_kernel

    ids, mask = left_padded(rows, model.device)
    with torch.inference_mode(), sdpa_kernel(attention):
        out = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
            top_k=0, max_new_tokens=new, eos_token_id=[stop], pad_token_id=0,
        )  # fmt: skip
    return out.shape[1] - ids.shape[1]


def hf_generate(generator, rows, new: int) -> int:
    """The rollout's path: every prompt awaits HFGenerator.generate at once (one batch)."""
    from seal.rollout.generation import SamplingParams

    sampling = SamplingParams(max_new_tokens=new, temperature=1.0, top_p=1.0)

    async def all_of_them():
        return await asyncio.gather(*(generator.generate(r, sampling) for r in rows))

    return max(len(g.token_ids) for g in asyncio.run(all_of_them()))


def timed_ms_per_step(device, call) -> tuple[float, int]:
    sync(device)
    start = time.perf_counter()
    steps = call()
    sync(device)
    return (time.perf_counter() - start) * 1000 / max(steps, 1), steps


def generation(model, shape: dict, full_matrix: bool) -> list[dict]:
    """Each variant at a width of its own, first cold then warm (see the module doc)."""
    from torch.nn.attention import SDPBackend

    from seal.rollout.hf_generator import GENERATION_ATTENTION, HFGenerator

    device, stop, new = model.device, shape["vocab"] - 1, shape["new"]
    with_cudnn = [*GENERATION_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    bare_generate(model, prompts(2, 64, shape["vocab"], 99), 2, stop, with_cudnn)  # CUDA warm-up
    variants = [
        (BARE_MAIN, "bare", "main", with_cudnn),
        (BARE_MAIN, "bare", "main", GENERATION_ATTENTION),
        (HF, "hf", "worker", with_cudnn),
        (HF, "hf", "worker", GENERATION_ATTENTION),
    ]
    if full_matrix:
        variants += [
            (BARE_THREAD, "bare", "thread", with_cudnn),
            (BARE_THREAD, "bare", "thread", GENERATION_ATTENTION),
        ]
    rows = []
    for k, (name, how, thread, attention) in enumerate(variants):
        batch = prompts(shape["batch"], shape["prompt"] + 16 * (k + 1), shape["vocab"], k)
        generator = HFGenerator(
            model, ids_only(stop), max_batch_size=shape["batch"], stop_token_ids=[stop],
            with_logprobs=False, attention=attention,
        ) if how == "hf" else None  # fmt: skip
        if how == "hf":
            call = partial(hf_generate, generator, batch, new)
        elif thread == "thread":
            call = partial(_in_new_thread, bare_generate, model, batch, new, stop, attention)
        else:
            call = partial(bare_generate, model, batch, new, stop, attention)
        for warmth in ("cold", "warm"):
            ms, steps = timed_ms_per_step(device, call)
            rows.append({
                "variant": name, "cudnn": SDPBackend.CUDNN_ATTENTION in attention,
                "width": warmth, "ms_per_step": round(ms, 3), "steps": steps,
                "batch": shape["batch"], "prompt_width": len(batch[0]),
            })  # fmt: skip
    return rows


def _in_new_thread(function, *args):
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function, *args).result()


def verdict(generation: dict[str, list[dict]], answers: str | None) -> dict:
    """For each model size and cuDNN setting timed: HFGenerator's warm ms per step over a
    bare generate's, warm, on the same thread kind (a new worker thread, as HFGenerator's;
    the main thread where only that was timed, and the row says so), passing at
    RATIO_TARGET or below. `answers`: None when these figures answer the issue's question
    (the rollout's shapes on a GPU), else why they do not."""
    rows = []
    for size, timed in generation.items():
        warm = {(r["variant"], r["cudnn"]): r["ms_per_step"] for r in timed if r["width"] == "warm"}
        for cudnn in sorted({c for v, c in warm if v == HF}, reverse=True):
            baseline = BARE_THREAD if (BARE_THREAD, cudnn) in warm else BARE_MAIN
            hf, bare = warm[HF, cudnn], warm.get((baseline, cudnn))
            ratio = None if not bare else hf / bare
            rows.append({
                "size": size, "cudnn": cudnn, "baseline": baseline, "hf_ms": hf, "bare_ms": bare,
                "ratio": None if ratio is None else round(ratio, 2),
                "passed": None if ratio is None else ratio <= RATIO_TARGET,
            })  # fmt: skip
    return {"target": RATIO_TARGET, "rows": rows, "answers_the_gpu_question": answers is None,
            "why_not": answers}  # fmt: skip


# --- the update and the loop -----------------------------------------------------------------


def synthetic_samples(rows: list[list[int]], responses: list[list[int]]) -> list:
    return [
        SimpleNamespace(prompt_ids=p, response_ids=r, response_mask=[1] * len(r))
        for p, r in zip(rows, responses, strict=True)
    ]


def advantages_for(samples, width: int):
    import torch

    signs = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(samples))])
    return signs[:, None].expand(-1, width).contiguous()


def one_update(weights, samples, lr: float, micro: int) -> dict:
    """The trainer's update: old and reference log-probs, then policy_update (AdamW)."""
    import torch

    from seal.algos.loss import PolicyLossConfig
    from seal.trainer.update import batch_logprobs, policy_update

    width = max(len(s.response_ids) for s in samples)
    old = batch_logprobs(weights.compute, samples, width, micro, 1024, 0)
    optimizer = torch.optim.AdamW(weights.master.parameters(), lr=lr, weight_decay=0.01)
    return policy_update(
        weights, optimizer, samples, advantages_for(samples, width), old, old,
        PolicyLossConfig(), samples_per_mini_batch=len(samples), micro_batch_size=micro,
        chunk_tokens=1024, grad_clip=1.0, pad_id=0,
    )  # fmt: skip


def moved_share(before: dict, model) -> float:
    changed = sum(int((p.detach() != before[n]).sum()) for n, p in model.named_parameters())
    return changed / sum(t.numel() for t in before.values())


def update_share(shape: dict, device) -> dict:
    """One AdamW step at lr 1e-6 in bf16: float32 master weights vs bf16 in place."""
    import torch

    from seal.trainer.precision import MixedPrecision
    from seal.trainer.update import collate, response_logprobs

    rows = prompts(4, 16, shape["vocab"], 7)
    samples = synthetic_samples(rows, prompts(4, 8, shape["vocab"], 8))
    model = random_qwen2(MODELS["quick"], shape["vocab"], device)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    one_update(MixedPrecision(model, torch.bfloat16), samples, 1e-6, 2)
    master = moved_share(before, model)
    # bf16 weights updated in place (the local trainer before issue 33), the same loss sign.
    inplace = random_qwen2(MODELS["quick"], shape["vocab"], device).to(torch.bfloat16)
    before = {n: p.detach().clone() for n, p in inplace.named_parameters()}
    batch = collate(samples, list(range(len(samples))), 0, device)
    logp, _ = response_logprobs(inplace, batch)
    width = batch.response_len
    loss = -(logp * advantages_for(samples, width).to(device) * batch.response_mask).sum()
    loss.backward()
    torch.optim.AdamW(inplace.parameters(), lr=1e-6, weight_decay=0.01).step()
    return {"fp32_master_bf16_compute": round(master, 5), "bf16_in_place": round(
        moved_share(before, inplace), 5)}  # fmt: skip


def tiny_loop(shape: dict, device, steps: int = 2, build=random_qwen2) -> list[dict]:
    """The local trainer's generation and update, `steps` times, on synthetic episodes of
    the model `build` makes (random_qwen2 or random_qwen35)."""
    import torch

    from seal.rollout.generation import SamplingParams
    from seal.rollout.hf_generator import HFGenerator
    from seal.trainer.precision import MixedPrecision

    model = build(MODELS["quick" if shape is SHAPES["quick"] else "tiny"], shape["vocab"], device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    weights = MixedPrecision(model, dtype)
    generator = HFGenerator(
        weights.compute, ids_only(shape["vocab"] - 1), max_batch_size=shape["loop_batch"],
        stop_token_ids=[shape["vocab"] - 1], with_logprobs=False,
    )  # fmt: skip
    rows = []
    for step in range(1, steps + 1):
        batch = prompts(shape["loop_batch"], shape["loop_prompt"], shape["vocab"], 100 + step)
        peak_gb(device)
        start = time.perf_counter()
        sampling = SamplingParams(max_new_tokens=shape["loop_new"])

        async def all_of_them(batch=batch, sampling=sampling):
            return await asyncio.gather(*(generator.generate(r, sampling) for r in batch))

        responses = [g.token_ids for g in asyncio.run(all_of_them())]
        sync(device)
        rollout_s, rollout_gb = time.perf_counter() - start, peak_gb(device)
        start = time.perf_counter()
        metrics = one_update(weights, synthetic_samples(batch, responses), 1e-6, 2)
        sync(device)
        rows.append({
            "step": step, "rollout_s": round(rollout_s, 3), "rollout_peak_gb": rollout_gb,
            "update_s": round(time.perf_counter() - start, 3), "update_peak_gb": peak_gb(device),
            "episodes": len(batch), "pg_loss": metrics["actor/pg_loss"],
        })  # fmt: skip
    return rows


# --- the table --------------------------------------------------------------------------------


def table(result: dict) -> str:
    lines = [f"{'part':<11} {'what':<58} value", "-" * 100]
    for key, value in result.get("versions", {}).items():
        lines.append(f"{'versions':<11} {key:<58} {value}")
    for size, rows in result["generation"].items():
        for r in rows:
            what = f"{size}: {r['variant']}, cuDNN {'on' if r['cudnn'] else 'off'}, {r['width']}"
            lines.append(f"{'generation':<11} {what:<58} {r['ms_per_step']:.2f} ms/step "
                         f"({r['steps']} steps, {r['batch']} x {r['prompt_width']})")  # fmt: skip
    judged = result.get("verdict")
    for r in judged["rows"] if judged else []:
        thread = "worker" if r["baseline"] == BARE_THREAD else "main"
        what = f"{r['size']}: HFGenerator / bare, {thread} thread, cuDNN {'on' if r['cudnn'] else 'off'}, warm"
        said = "no baseline timed" if r["ratio"] is None else (
            f"{r['ratio']:.2f}x ({r['hf_ms']:.2f} / {r['bare_ms']:.2f} ms/step): "
            f"{'pass' if r['passed'] else 'FAIL'} at {judged['target']}x"
        )  # fmt: skip
        lines.append(f"{'verdict':<11} {what:<58} {said}")
    if judged and not judged["answers_the_gpu_question"]:
        lines.append(
            f"{'verdict':<11} {'does not answer the GPU question':<58} {judged['why_not']}"
        )
    for key, share in result.get("update", {}).items():
        lines.append(f"{'update':<11} {'weights moved by one step at lr 1e-6, ' + key:<58} "
                     f"{share:.2%}")  # fmt: skip
    for key in ("loop", "loop_qwen3.5"):
        for r in result.get(key, []):
            gb = lambda x: "n/a" if x is None else f"{x:.2f} GB"  # noqa: E731
            what = f"step {r['step']}: rollout / update"
            lines.append(f"{key:<11} {what:<58} {r['rollout_s']:.2f} s "
                         f"({gb(r['rollout_peak_gb'])}) / {r['update_s']:.2f} s "
                         f"({gb(r['update_peak_gb'])}), {r['episodes']} episodes")  # fmt: skip
    for what, why in result["not_run"].items():
        lines.append(f"{'not run':<11} {what:<58} {why}")
    for what, error in result["failed"].items():
        lines.append(f"{'FAILED':<11} {what:<58} {error}")
    lines.append(f"{'total':<11} {'seconds':<58} {result['seconds']:.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="tiny shapes: the script's own check")
    p.add_argument("--sizes", nargs="+", default=["tiny", "0.5b"], choices=["tiny", "0.5b"],
                   help="models whose generation is timed (full mode; default both)")  # fmt: skip
    p.add_argument("--out", type=Path, default=None,
                   help="the JSON file (default $OUT/gpu_check.json, else ./gpu_check.json)")  # fmt: skip
    args = p.parse_args(argv)
    import torch

    start = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = SHAPES["quick" if args.quick else "full"]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out = args.out or Path(os.environ.get("OUT", ".")) / "gpu_check.json"
    result = {"mode": "quick" if args.quick else "full", "shapes": shape, "not_run": NOT_RUN,
              "failed": {}, "generation": {}}  # fmt: skip

    def part(key: str, run, into: dict = result) -> None:
        """One part into `into[key]`; its error, if any, into result["failed"] (the check
        goes on with the others and exits 1). The JSON is rewritten after each part, so a
        run cut short by its time limit keeps what it measured."""
        try:
            into[key] = run()
        except Exception as error:  # noqa: BLE001 - a failing part is a finding, said below
            result["failed"][key] = f"{type(error).__name__}: {error}"
        result["seconds"] = round(time.perf_counter() - start, 1)
        out.write_text(json.dumps(result, indent=2))

    part("versions", lambda: versions(device))
    for size in ["quick"] if args.quick else args.sizes:

        def timed(size=size):
            model = random_qwen2(MODELS[size], shape["vocab"], device).to(dtype).eval()
            return generation(model, shape, full_matrix=size != "0.5b")

        part(size, timed, into=result["generation"])
    why_not = None
    if device.type != "cuda" or args.quick:
        why_not = (f"{device.type} figures{' on --quick shapes' if args.quick else ''}: the "
                   "question is the rollout's shapes on a GPU")  # fmt: skip
    part("verdict", lambda: verdict(result["generation"], why_not))
    part("update", lambda: update_share(shape, device))
    part("loop", lambda: tiny_loop(shape, device))
    part("loop_qwen3.5", lambda: tiny_loop(shape, device, build=random_qwen35))
    print(table(result))
    print(f"\nwrote {out}")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
