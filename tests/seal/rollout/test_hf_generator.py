"""HFGenerator on a tiny random Qwen2 built from its config (no download)."""

from __future__ import annotations

import asyncio

import pytest
import torch
from tiny_models import tiny_qwen2

from seal.rollout.generation import GenerationError, SamplingParams
from seal.rollout.hf_generator import HFGenerator

GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)
TEXTS = [
    "List the files in the current directory.",
    "cd",
    "Move final_report.pdf into the temp folder and then grep for budget analysis.",
    "Hello",
]


def decisive_qwen2(seed: int):
    """The tiny Qwen2 in eval mode, initialised wider than the default 0.02, so greedy
    choices are clear winners, not near-ties that padding's rounding differences could flip."""
    return tiny_qwen2(seed, initializer_range=0.5).eval()


@pytest.fixture(scope="module")
def model():
    return decisive_qwen2(0)


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [tokenizer.encode(t) for t in TEXTS]


class CountingModel(torch.nn.Module):
    """Wraps a model and records the batch size of every generate call."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.batch_sizes: list[int] = []

    def generate(self, input_ids, **kwargs):
        self.batch_sizes.append(input_ids.shape[0])
        return self.model.generate(input_ids=input_ids, **kwargs)


def gather(generator, prompts, sampling=GREEDY):
    async def main():
        return await asyncio.gather(*(generator.generate(p, sampling) for p in prompts))

    return asyncio.run(main())


def one_at_a_time(generator, prompts, sampling=GREEDY):
    async def main():
        return [await generator.generate(p, sampling) for p in prompts]

    return asyncio.run(main())


def forward_logprobs(model, prompt, new_ids, temperature=1.0) -> torch.Tensor:
    """log-softmax(logits / T) of a plain forward pass at the generated positions."""
    ids = torch.tensor([prompt + new_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, -1).gather(1, torch.tensor(new_ids)[:, None])[
        :, 0
    ]


def test_concurrent_calls_are_batched_and_equal_one_at_a_time(model, tokenizer, prompts):
    counting = CountingModel(model)
    generator = HFGenerator(counting, tokenizer, max_batch_size=3)
    batched = gather(generator, prompts)
    assert counting.batch_sizes == [3, 1]
    single = one_at_a_time(generator, prompts)
    assert counting.batch_sizes[2:] == [1, 1, 1, 1]
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]
    for b, s in zip(batched, single, strict=True):
        assert b.logprobs == pytest.approx(s.logprobs, abs=1e-4)


def test_greedy_is_deterministic_and_runs_to_max_new_tokens(model, tokenizer, prompts):
    generator = HFGenerator(model, tokenizer)
    first, second = gather(generator, prompts), gather(generator, prompts)
    assert [g.token_ids for g in first] == [g.token_ids for g in second]
    # A random model does not find <|im_end|> within 12 tokens.
    assert all(g.finish_reason == "length" and len(g.token_ids) == 12 for g in first)
    assert all(tokenizer.eos_token_id not in g.token_ids for g in first)


def test_generation_stops_at_and_includes_the_first_stop_token(model, tokenizer, prompts):
    free = gather(HFGenerator(model, tokenizer), prompts)
    # Make the token each prompt greedily emits at some step a stop token; the padding
    # `generate` adds after a row stops must not come back.
    stop = free[2].token_ids[4]
    stopped = gather(HFGenerator(model, tokenizer, stop_token_ids=[stop]), prompts)
    for f, s in zip(free, stopped, strict=True):
        if stop in f.token_ids:
            end = f.token_ids.index(stop) + 1
            assert (s.token_ids, s.finish_reason) == (f.token_ids[:end], "stop")
            assert s.logprobs == pytest.approx(f.logprobs[:end], abs=1e-4)
        else:
            assert (s.token_ids, s.finish_reason) == (f.token_ids, "length")
    assert stopped[2].token_ids[-1] == stop and len(stopped[2].token_ids) <= 5


def test_greedy_logprobs_equal_a_forward_pass(model, tokenizer, prompts):
    for prompt, generation in zip(
        prompts, gather(HFGenerator(model, tokenizer), prompts), strict=True
    ):
        expected = forward_logprobs(model, prompt, generation.token_ids)
        assert len(generation.logprobs) == len(generation.token_ids)
        assert generation.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
        assert max(generation.logprobs) > -5  # peaked, not the uniform -11.9


def test_sampled_logprobs_are_of_logits_over_temperature(model, tokenizer, prompts):
    sampling = SamplingParams(max_new_tokens=8, temperature=0.7)
    torch.manual_seed(1)
    generations = gather(HFGenerator(model, tokenizer), prompts, sampling)
    for prompt, generation in zip(prompts, generations, strict=True):
        expected = forward_logprobs(model, prompt, generation.token_ids, temperature=0.7)
        assert generation.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
    greedy = gather(HFGenerator(model, tokenizer), prompts)
    assert [g.token_ids for g in generations] != [g.token_ids[:8] for g in greedy]


def test_the_models_own_generation_config_does_not_leak_in(tokenizer, prompts):
    """Qwen2.5-Instruct ships repetition_penalty, top_k, top_p and temperature; the
    policy must still be sampled from its plain softmax."""
    plain = decisive_qwen2(0)
    expected = gather(HFGenerator(plain, tokenizer), prompts)
    tuned = decisive_qwen2(0)
    tuned.generation_config.update(
        repetition_penalty=1.5, top_k=3, top_p=0.5, temperature=0.3, do_sample=True
    )
    got = gather(HFGenerator(tuned, tokenizer), prompts)
    assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    assert any(len(set(g.token_ids)) < len(g.token_ids) for g in got)  # repeats unpenalized
    torch.manual_seed(0)
    sampled = gather(HFGenerator(tuned, tokenizer), prompts, SamplingParams(12, temperature=1.0))
    ranks = []  # of each sampled token among its step's logits: top_k 3 would keep 0..2
    for prompt, generation in zip(prompts, sampled, strict=True):
        with torch.no_grad():
            logits = tuned(torch.tensor([prompt + generation.token_ids])).logits[0]
        for step, token in enumerate(generation.token_ids):
            row = logits[len(prompt) - 1 + step]
            ranks.append(int((row > row[token]).sum()))
    assert max(ranks) > 100


def test_requests_share_a_batch_unless_their_distribution_differs(model, tokenizer, prompts):
    counting = CountingModel(model)
    generator = HFGenerator(counting, tokenizer, max_batch_size=8)
    short = SamplingParams(max_new_tokens=3, temperature=0.0)  # batched with GREEDY
    warm = SamplingParams(max_new_tokens=5, temperature=0.7)  # not

    async def main():
        return await asyncio.gather(
            *(generator.generate(p, (short, GREEDY, warm)[i % 3]) for i, p in enumerate(prompts))
        )

    results = asyncio.run(main())
    assert counting.batch_sizes == [3, 1]
    assert [(len(g.token_ids), g.finish_reason) for g in results] == [
        (3, "length"),
        (12, "length"),
        (5, "length"),
        (3, "length"),
    ]
    single = one_at_a_time(HFGenerator(model, tokenizer), prompts)
    assert results[1].token_ids == single[1].token_ids
    assert results[0].token_ids == single[0].token_ids[:3]
    assert results[3].logprobs == pytest.approx(single[3].logprobs[:3], abs=1e-4)


def test_set_model_switches_the_weights_used(model, tokenizer, prompts):
    other = decisive_qwen2(1)
    generator = HFGenerator(model, tokenizer)
    before = gather(generator, prompts)
    generator.set_model(other)
    after = gather(generator, prompts)
    assert [g.token_ids for g in after] == [
        g.token_ids for g in gather(HFGenerator(other, tokenizer), prompts)
    ]
    assert [g.token_ids for g in after] != [g.token_ids for g in before]


def test_a_failing_model_is_a_generation_error_for_every_request(tokenizer, prompts):
    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def generate(self, **kwargs):
            raise RuntimeError("CUDA error: device-side assert triggered")

    generator = HFGenerator(Broken(), tokenizer)

    async def main():
        return await asyncio.gather(
            *(generator.generate(p, GREEDY) for p in prompts), return_exceptions=True
        )

    errors = asyncio.run(main())
    assert all(isinstance(e, GenerationError) and "device-side assert" in str(e) for e in errors)


def test_generation_leaves_cudnn_attention_out(tokenizer, prompts):
    # cuDNN's attention plans each new shape, and decoding makes one per token.
    seen = []

    class Recorder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def generate(self, input_ids, **kwargs):
            seen.append(
                (torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled())
            )
            return torch.cat([input_ids, input_ids[:, -1:]], dim=1)

    assert torch.backends.cuda.cudnn_sdp_enabled()  # PyTorch's default, restored after
    gather(HFGenerator(Recorder(), tokenizer, with_logprobs=False), prompts)
    assert seen == [(False, True)]
    assert torch.backends.cuda.cudnn_sdp_enabled()
