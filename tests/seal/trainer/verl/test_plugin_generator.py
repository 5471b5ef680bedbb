"""seal.trainer.verl.generator against a fake with verl 0.9.1's client signature."""

import asyncio
import inspect

import pytest

pytest.importorskip("verl")

from verl.workers.rollout.llm_server import LLMServerClient  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from seal.rollout.generation import GenerationError, SamplingParams  # noqa: E402
from seal.trainer.verl.generator import VerlGenerator  # noqa: E402

EOS = 7


class FakeServer:
    """Same call shape as LLMServerClient.generate; replies from a queue."""

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.calls = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append((request_id, prompt_ids, dict(sampling_params)))
        output = self.outputs.pop(0)
        if isinstance(output, Exception):
            raise output
        return output


def test_fake_matches_verl_signature():
    real = inspect.signature(LLMServerClient.generate).parameters
    assert list(real)[:2] == ["self", "request_id"]
    assert real["prompt_ids"].kind is inspect.Parameter.KEYWORD_ONLY
    assert real["sampling_params"].kind is inspect.Parameter.KEYWORD_ONLY
    assert set(TokenOutput.model_fields) >= {"token_ids", "log_probs", "stop_reason"}


def run(generator, prompt, sampling):
    return asyncio.run(generator.generate(prompt, sampling))


def test_maps_output_and_sends_params():
    server = FakeServer(
        [
            TokenOutput(
                token_ids=[1, 2, EOS], log_probs=[-0.1, -0.2, -0.3], stop_reason="completed"
            ),
            TokenOutput(token_ids=[4, 5], log_probs=[-1.0, -2.0], stop_reason="completed"),
            TokenOutput(token_ids=[4], log_probs=[-1.0], stop_reason="length"),
        ]
    )
    base = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    generator = VerlGenerator(server, base, stop_token_ids={EOS})
    prompt = [10, 11]
    sampling = SamplingParams(max_new_tokens=2, temperature=0.5, top_p=0.9)
    first = run(generator, prompt, SamplingParams(max_new_tokens=8))
    assert (first.token_ids, first.logprobs, first.finish_reason) == (
        [1, 2, EOS],
        [-0.1, -0.2, -0.3],
        "stop",
    )
    second = run(generator, prompt, sampling)  # max_new_tokens ids, no stop token: cut
    assert second.finish_reason == "length"
    third = run(generator, prompt, sampling)  # fewer ids than allowed: the engine stopped
    assert third.finish_reason == "stop"
    request_ids = {call[0] for call in server.calls}
    assert request_ids == {generator.request_id}  # one sticky session per episode
    sent = server.calls[1][2]
    assert sent == {
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": -1,
        "logprobs": True,
        "max_tokens": 2,
        "stop_token_ids": [EOS],  # the engine stops at the format's end of turn
    }
    assert server.calls[0][1] == prompt and server.calls[0][1] is not prompt
    assert base == {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}


@pytest.mark.parametrize(
    "output, message",
    [
        (TokenOutput(token_ids=[], stop_reason="aborted"), "aborted"),
        (TokenOutput(token_ids=[1], stop_reason="abort"), "abort"),
        (TokenOutput(token_ids=[1], stop_reason=None), "None"),
        (TokenOutput(token_ids=[], stop_reason="completed"), "no tokens"),
        (TokenOutput(token_ids=[1, 2], log_probs=[-1.0], stop_reason="completed"), "1 log-prob"),
        (TokenOutput(token_ids=[1, 2], stop_reason="completed"), "requested"),
        (RuntimeError("server down"), "server down"),
    ],
)
def test_errors_raise_generation_error(output, message):
    generator = VerlGenerator(FakeServer([output]), {"logprobs": True}, stop_token_ids={EOS})
    with pytest.raises(GenerationError, match=message):
        run(generator, [1], SamplingParams(max_new_tokens=4))


def test_no_logprobs_when_not_requested():
    server = FakeServer([TokenOutput(token_ids=[3, EOS], stop_reason="stop")])
    generation = run(
        VerlGenerator(server, {"logprobs": False}), [1], SamplingParams(max_new_tokens=4096)
    )
    assert generation.logprobs is None and generation.finish_reason == "stop"
