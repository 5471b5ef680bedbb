"""Generation with a Hugging Face causal LM in the trainer's own process (CPU or one GPU).

Episodes run concurrently on one event loop and each awaits `generate` for one prompt;
running them one by one would leave the model at batch size 1, so a worker task takes up
to `max_batch_size` pending requests that sample alike and runs `model.generate` once for
them in a thread (`_generate_batch`), while the loop keeps serving the environment.

The model object is shared with the trainer: `set_model` swaps it (e.g. after loading
a checkpoint); in-place weight updates need nothing, the next batch uses them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from seal.rollout.generation import Generation, GenerationError, SamplingParams

# Knobs a model's own generation_config may set (Qwen2.5-Instruct ships
# repetition_penalty 1.05, top_k 20, top_p 0.8, temperature 0.7). `generate` fills every
# field left unset from it, so each is pinned to its neutral value: the policy must be
# sampled from its plain softmax, the distribution the trainer's log-probs describe.
_NEUTRAL_PROCESSORS = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_new_tokens": 0,  # takes precedence over a configured min_length
    "num_beams": 1,
    "renormalize_logits": False,
}
# Attention kernels generation may use: all but cuDNN's. cuDNN's attention builds an
# execution plan for each new shape, and decoding makes one at every token (the cache
# grows by one) in every batch (each pads to its own width), so on Hopper GPUs, where
# PyTorch prefers it, the plans may cost more than the attention (docs/benchmarks.md, "The
# local trainer on a GPU": a guess until scripts/gpu_check.py measures it). The others need
# no plan; on the CPU none of this applies.
GENERATION_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
# Only applied when sampling (and flagged as unused by transformers when greedy).
_NEUTRAL_WARPERS = {
    "top_k": 0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
}


def _distribution(sampling: SamplingParams) -> tuple[float, float]:
    """What must be equal for requests to share a model.generate call."""
    return sampling.temperature, sampling.top_p


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future


class _LogprobRecorder(LogitsProcessor):
    """Records the log-probability of each sampled token under logits / temperature.

    Placed first among the processors, so it sees the raw logits. A call at step t only
    learns which token was chosen at step t-1 (the last column of input_ids), so it
    keeps one step's log-softmax, not the whole [steps, batch, vocab] history that
    `output_logits` would hold (gigabytes for a 151936-token vocabulary)."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.previous: torch.Tensor | None = None
        self.chosen: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.gather(input_ids[:, -1])
        self.previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def gather(self, token_ids: torch.Tensor) -> None:
        if self.previous is not None:
            self.chosen.append(self.previous.gather(1, token_ids[:, None]).squeeze(1))
            self.previous = None

    def finish(self, last_token_ids: torch.Tensor) -> torch.Tensor:
        """[batch, steps] log-probabilities, once the last step's token is known."""
        self.gather(last_token_ids)
        return torch.stack(self.chosen, dim=1)


class HFGenerator:
    """A `Generator` over a transformers causal LM, micro-batching concurrent calls."""

    def __init__(
        self,
        model,
        tokenizer,
        max_batch_size: int = 8,
        stop_token_ids: list[int] | None = None,
        with_logprobs: bool = True,
        attention: list[SDPBackend] | None = None,
    ):
        self.model = model
        self.attention = GENERATION_ATTENTION if attention is None else attention
        """The SDPA kernels generation may use (scripts/gpu_check.py compares cuDNN's)."""
        self.with_logprobs = with_logprobs
        """Record each generated id's log-probability. That costs a vocabulary-wide
        log-softmax per decoded token (151,936 wide for Qwen2.5); the local trainer
        recomputes old log-probs in its update anyway, so it switches this off."""
        self.max_batch_size = max_batch_size
        """Most prompts per model.generate call; bounds the padded batch's memory."""
        self.stop_token_ids = stop_token_ids or [tokenizer.eos_token_id]
        """Generation ends after any of these; the tokenizer's eos (<|im_end|> for Qwen2.5)
        by default, the token the chat template closes an assistant turn with."""
        self.pad_token_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        self._pending: deque[_Request] = deque()
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def set_model(self, model) -> None:
        """Generate with `model` from the next batch on."""
        self.model = model

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if not prompt_ids:
            raise GenerationError("empty prompt")
        self._ensure_worker()
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(list(prompt_ids), sampling, future))
        self._wakeup.set()
        return await future

    def _ensure_worker(self) -> None:
        # A trainer may call asyncio.run once per step: the worker and its event belong
        # to one loop, so a new loop gets new ones.
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._worker is None or self._worker.done():
            self._loop = loop
            self._wakeup = asyncio.Event()
            self._pending = deque(r for r in self._pending if not r.future.done())
            self._worker = loop.create_task(self._serve())

    async def _serve(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while batch := self._take_batch():
                try:
                    results = await asyncio.to_thread(self._generate_batch, batch)
                except Exception as e:
                    error = GenerationError(f"model.generate failed: {type(e).__name__}: {e}")
                    error.__cause__ = e
                    for request in batch:
                        if not request.future.done():
                            request.future.set_exception(error)
                    continue
                for request, result in zip(batch, results, strict=True):
                    if not request.future.done():  # the caller may have been cancelled
                        request.future.set_result(result)

    def _take_batch(self) -> list[_Request]:
        """The oldest pending request and up to max_batch_size - 1 later ones that sample
        alike; the others keep their order in the queue. Requests whose caller was
        cancelled are dropped."""
        batch, others = [], deque()
        while self._pending and len(batch) < self.max_batch_size:
            request = self._pending.popleft()
            if request.future.done():
                continue
            if not batch or _distribution(request.sampling) == _distribution(batch[0].sampling):
                batch.append(request)
            else:
                others.append(request)
        self._pending.extendleft(reversed(others))
        return batch

    def _generate_batch(self, batch: list[_Request]) -> list[Generation]:
        """One `model.generate` for the batch: left-padded prompts, the largest
        max_new_tokens among them, and each request's own new ids, cut at its first stop
        token or its own max_new_tokens (the episode driver lowers it near the end of the
        context, so requests differ there)."""
        model, sampling = self.model, batch[0].sampling
        max_new_tokens = max(r.sampling.max_new_tokens for r in batch)
        device = next(model.parameters()).device
        width = max(len(r.prompt_ids) for r in batch)
        input_ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, request in enumerate(batch):
            n = len(request.prompt_ids)
            input_ids[row, width - n :] = torch.tensor(request.prompt_ids)
            attention_mask[row, width - n :] = 1
        greedy = sampling.temperature == 0
        recorder = _LogprobRecorder(1.0 if greedy else sampling.temperature)
        processors = [recorder] if self.with_logprobs else []
        if greedy:
            sampling_knobs = {"do_sample": False}
        else:
            sampling_knobs = {
                "do_sample": True,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                **_NEUTRAL_WARPERS,
            }
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            eos_token_id=self.stop_token_ids,
            pad_token_id=self.pad_token_id,
            use_cache=True,
            **sampling_knobs,
            **_NEUTRAL_PROCESSORS,
        )
        with torch.inference_mode(), sdpa_kernel(self.attention):
            output = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=config,
                logits_processor=LogitsProcessorList(processors),
            )
        new_ids = output[:, width:].cpu()
        logprobs = recorder.finish(output[:, -1]).cpu().tolist() if self.with_logprobs else None
        return [
            self._cut(
                new_ids[row].tolist(),
                None if logprobs is None else logprobs[row],
                r.sampling.max_new_tokens,
            )
            for row, r in enumerate(batch)
        ]

    def _cut(self, ids: list[int], logprobs: list[float] | None, max_new_tokens: int) -> Generation:
        """One row's ids up to and including its first stop token, within its own
        max_new_tokens (what follows is padding `generate` adds once a row has finished,
        or tokens beyond this request's limit)."""
        stops = set(self.stop_token_ids)
        end, reason = max_new_tokens, "length"
        for i, token in enumerate(ids[:max_new_tokens]):
            if token in stops:
                end, reason = i + 1, "stop"
                break
        return Generation(ids[:end], None if logprobs is None else logprobs[:end], reason)
