"""SealBfclAgentLoop inside verl 0.9.1's real AgentLoopWorker (no Ray, no engine): a
scripted LLM client with the client's call shape plays the ground-truth policy
against the real environment service over a socket."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import gt_texts
from tiny_models import tiny_qwen2_config

pytest.importorskip("verl")

import verl.trainer.config as verl_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopWorker,
    _agent_loop_registry,
)
from verl.protocol import DataProto  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from seal.bfcl.tags import PASS  # noqa: E402
from seal.bfcl.tasks import load_task  # noqa: E402
from seal.rollout.scripted import text_generation  # noqa: E402
from seal.service_contract import InterfaceSettings  # noqa: E402
from seal.trainer.verl.agent_loop import (  # noqa: E402
    AGENT_NAME,
    close_shared_env_clients,
    num_turns,
)
from seal.trainer.verl.episode_fields import EpisodeFields  # noqa: E402
from seal.trainer.verl.section import SealSection  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
TASK = "multi_turn_base_0"
PROMPT_LENGTH, RESPONSE_LENGTH = 8192, 16384
LOGPROB = -0.25
FIRST_VERSION = 7


class ScriptedServer:
    """LLMServerClient.generate's call shape; each request id (one episode) replays
    the ground-truth policy's texts of TASK from the start. The k-th generation reports
    weights of version FIRST_VERSION + k, as if each came after a weight update."""

    def __init__(self, tokenizer, report_versions: bool = True, task: str = TASK):
        self.script = [text_generation(tokenizer, t).token_ids for t in gt_texts(task)]
        self.position: dict[str, int] = {}
        self.sampling_params: list[dict] = []
        self.report_versions = report_versions

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.sampling_params.append(dict(sampling_params))
        k = self.position.get(request_id, 0)
        self.position[request_id] = k + 1
        ids = self.script[k]
        version = {"global_steps": FIRST_VERSION + k} if self.report_versions else {}
        return TokenOutput(
            token_ids=ids, log_probs=[LOGPROB] * len(ids), stop_reason="completed",
            extra_fields=version,
        )  # fmt: skip


def trainer_config(model_dir: Path, env_url: str, **limits):
    config = OmegaConf.load(Path(verl_config_dir.__file__).parent / "_generated_ppo_trainer.yaml")
    config.actor_rollout_ref.model.path = str(model_dir)
    rollout = config.actor_rollout_ref.rollout
    rollout.name = "vllm"
    rollout.prompt_length, rollout.response_length = PROMPT_LENGTH, RESPONSE_LENGTH
    rollout.max_model_len = PROMPT_LENGTH + RESPONSE_LENGTH
    config.seal = {"env_url": env_url, "trainer": {"limits": limits}}
    return config


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A model directory verl's HFModelConfig accepts: the project's tokenizer and a
    tiny Qwen2 config (no weights: nothing here runs the model)."""
    path = tmp_path_factory.mktemp("tiny_qwen2")
    shutil.copytree(ROOT / "seal/assets/qwen2.5-tokenizer", path, dirs_exist_ok=True)
    tiny_qwen2_config(architectures=["Qwen2ForCausalLM"]).save_pretrained(path)
    return path


def train_rows(task_id: str, copies: int, split: str = "train") -> DataProto:
    """The parquet row of task_id, repeated, with the fields RLHFDataset adds."""
    frame = pd.read_parquet(ROOT / f"data/bfcl_{split}.parquet")
    row = frame[frame["extra_info"].map(lambda e: e["task_id"]) == task_id].iloc[0]
    columns = {
        "agent_name": row["agent_name"],
        "data_source": row["data_source"],
        "extra_info": row["extra_info"],
        "reward_model": row["reward_model"],
        "raw_prompt": list(row["prompt"]),
        "index": row["extra_info"]["index"],
    }
    non_tensor = {}
    for key, value in columns.items():
        array = np.empty(copies, dtype=object)
        array[:] = [value] * copies
        non_tensor[key] = array
    return DataProto(batch=None, non_tensor_batch=non_tensor, meta_info={"global_steps": 1})


def run_worker(worker, batch):
    async def main():
        try:
            return await worker.generate_sequences(batch)
        finally:
            await close_shared_env_clients()

    return asyncio.run(main())


def test_registered_under_the_parquet_agent_name():
    frame = pd.read_parquet(ROOT / "data/bfcl_train.parquet", columns=["agent_name"])
    assert set(frame["agent_name"]) == {AGENT_NAME}
    assert _agent_loop_registry[AGENT_NAME] == {
        "_target_": "seal.trainer.verl.agent_loop.SealBfclAgentLoop"
    }


def test_ground_truth_episodes_through_agent_loop_worker(model_dir, live_service):
    url, _ = live_service
    worker = AgentLoopWorker(trainer_config(model_dir, url), llm_client=None)
    server = ScriptedServer(worker.tokenizer)
    worker.llm_client = server
    out = run_worker(worker, train_rows(TASK, copies=2))

    generated = [i for ids in server.script for i in ids]
    assert len(out) == 2 and len(server.position) == 2  # one sticky request id per episode
    assert all(n == len(server.script) for n in server.position.values())
    assert all(p["max_tokens"] == 4096 and p["logprobs"] for p in server.sampling_params)
    # The engine stops at the tool format's end of turn (<|im_end|> in Qwen2.5's format).
    im_end = worker.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert all(p["stop_token_ids"] == [im_end] for p in server.sampling_params)
    responses, mask = out.batch["responses"], out.batch["response_mask"]
    for k in range(2):
        # Mask 1 exactly on the generated ids, in order: observations are excluded.
        on = mask[k].bool()
        assert responses[k][on].tolist() == generated
        assert int(mask[k].sum()) < int(out.batch["attention_mask"][k, PROMPT_LENGTH:].sum())
        assert out.batch["rollout_log_probs"][k][on].eq(LOGPROB).all()
        assert out.batch["rollout_log_probs"][k][~on].eq(0.0).all()
        # The reward sits on the last response token.
        last = int(out.batch["attention_mask"][k, PROMPT_LENGTH:].sum()) - 1
        assert out.batch["rm_scores"][k, last] == 1.0 and out.batch["rm_scores"][k].sum() == 1.0
    nt = out.non_tensor_batch
    episodes = [EpisodeFields.from_extra_fields(row) for row in sample_columns(nt)]
    turns = load_task(TASK).num_turns
    for e in episodes:
        assert (e.task_id, e.category, e.accuracy, e.progress) == (TASK, "multi_turn_base", 1, 1.0)
        assert e.failure_tags == [PASS] * turns and e.paper_label is None
        assert (e.stop_reason, e.invalid_calls, e.tool_errors) == ("terminated", 0, 0)
        assert e.num_generations == len(server.script)
        assert e.interface["schema_cues"] and not e.interface["guidelines"]  # the paper's layers
        # The weight versions of the first and last generations.
        assert (e.min_weight_version, e.max_weight_version) == (
            FIRST_VERSION, FIRST_VERSION + len(server.script) - 1
        )  # fmt: skip
    # verl's step metrics read the versions under its own names (trainer_base._compute_metrics).
    assert list(nt["min_global_steps"]) == [FIRST_VERSION] * 2
    # first user + one message per generation + the observations between them
    assert list(nt["__num_turns__"]) == [2 * len(server.script)] * 2
    # What verl's validation averages into its metrics, and the episode the SEAL trainer's
    # validation records are read from.
    assert list(nt["acc"]) == [1, 1] and list(nt["turns"]) == [len(server.script)] * 2
    assert list(nt["progress"]) == [1.0, 1.0]
    assert [EpisodeFields.from_validation_columns(nt, i) for i in range(2)] == episodes


def sample_columns(non_tensor_batch: dict) -> list[dict]:
    """Each sample's row of verl's non-tensor columns (one per extra_fields key)."""
    size = len(non_tensor_batch["__num_turns__"])
    return [{key: column[i] for key, column in non_tensor_batch.items()} for i in range(size)]


# Ground truths whose responses are longer than the release's 4,096 trained tokens, under
# the paper's limits (scripts/count_context_stops.py): 4,325 and 4,107 tokens.
LONG = {"train": "multi_turn_long_context_84", "eval": "multi_turn_long_context_139"}


def test_a_training_episode_is_cut_to_the_release_s_response_length(model_dir, live_service):
    """What verl trains of a long episode: its first 4,096 response tokens as the release
    counts them (our prompt ends with the 3-token assistant header the release counts
    in its response); a validation episode is scored and returned whole."""
    url, _ = live_service
    lengths = {}
    for split, task in LONG.items():
        worker = AgentLoopWorker(trainer_config(model_dir, url), llm_client=None)
        worker.llm_client = ScriptedServer(worker.tokenizer, task=task)
        out = run_worker(worker, train_rows(task, copies=1, split=split))
        [row] = sample_columns(out.non_tensor_batch)
        assert EpisodeFields.from_extra_fields(row).accuracy == 1
        lengths[split] = int(out.batch["attention_mask"][0, PROMPT_LENGTH:].sum())
        # The service's reward sits on the last token verl keeps.
        assert out.batch["rm_scores"][0, lengths[split] - 1] == 1.0
    assert lengths == {"train": 4096 - 3, "eval": 4107}


def test_a_server_without_weight_versions_fails_the_episode(model_dir, live_service):
    """verl's step metrics turn the versions into integers; an episode without one
    fails with a message instead of breaking the step after the update."""
    url, _ = live_service
    worker = AgentLoopWorker(trainer_config(model_dir, url), llm_client=None)
    worker.llm_client = ScriptedServer(worker.tokenizer, report_versions=False)
    with pytest.raises(Exception, match="no weight version"):
        run_worker(worker, train_rows(TASK, copies=1))


def test_prompt_longer_than_prompt_length_fails_before_generating(model_dir, live_service):
    """A first prompt verl's prompt tensor cannot hold fails the episode before its first
    generation (not after a whole episode was played), and the service's episode is
    closed."""
    url, engine = live_service
    config = trainer_config(model_dir, url)
    config.actor_rollout_ref.rollout.prompt_length = 16
    worker = AgentLoopWorker(config, llm_client=None)
    server = ScriptedServer(worker.tokenizer)
    worker.llm_client = server
    with pytest.raises(ValueError, match="more than the 16 allowed.*rollout.prompt_length"):
        run_worker(worker, train_rows(TASK, copies=1))
    assert server.sampling_params == []  # nothing was generated
    assert engine.stats()["live_episodes"] == 0


def test_context_beyond_response_length_refused(model_dir):
    config = trainer_config(model_dir, "http://127.0.0.1:1", max_context_tokens=RESPONSE_LENGTH + 1)
    worker = AgentLoopWorker(config, llm_client=None)
    # hydra.utils.instantiate wraps the ValueError in an InstantiationException.
    with pytest.raises(Exception, match="max_context_tokens 16385 exceeds rollout.response_length"):
        run_worker(worker, train_rows(TASK, copies=1))


def test_settings():
    assert SealSection.from_config(OmegaConf.create({})) == SealSection()
    with pytest.raises(Exception, match="env_ulr"):  # a misspelt key is an error
        SealSection.from_config(OmegaConf.create({"seal": {"env_ulr": "x"}}))
    settings = SealSection.from_config(
        OmegaConf.create({"seal": {"trainer": {"interface": {"recovery_feedback": True}}}})
    )
    sample = settings.trainer.episode_settings("sample")
    # The paper's default layers (schema cues) with the one the section turns on.
    assert sample.interface == InterfaceSettings(schema_cues=True, recovery_feedback=True)
    validate = settings.trainer.episode_settings("validate")
    assert validate.mode == "validate" and not validate.interface.any
    assert validate.limits == sample.limits == settings.trainer.limits
    assert num_turns([1, 1, 0, 0, 1]) == 4 and num_turns([1]) == 2 and num_turns([]) == 1
