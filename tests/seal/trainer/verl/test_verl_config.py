"""The verl backend's config: every paper config composes into verl 0.9.1's own
`ppo_trainer` schema (Hydra, struct mode: no unknown keys) with no missing value and
passes verl's `validate_config`; the run config's keys land on the right verl keys;
mistakes are errors; verl's prompt width holds every BFCL first prompt."""

from __future__ import annotations

import asyncio
import functools
import os
from pathlib import Path

import pytest
from conftest import shipped_tokenizer
from omegaconf import OmegaConf

pytest.importorskip("verl")

from hydra.errors import ConfigCompositionException  # noqa: E402

import launcher  # noqa: E402
from env_service import api_native  # noqa: E402
from env_service.engine import EnvEngine, ServiceConfig  # noqa: E402
from env_service.interface_layers import GUIDELINES  # noqa: E402
from seal.bfcl.tasks import task_ids  # noqa: E402
from seal.formats.registry import default_format, get_format  # noqa: E402
from seal.rollout.generation import SamplingParams  # noqa: E402
from seal.service_contract import CreateEpisode, EpisodeSettings, InterfaceSettings  # noqa: E402
from seal.trainer.verl.section import SealSection  # noqa: E402
from seal.trainer.verl.verl_config import compose_verl_config, hydra_value, validate  # noqa: E402

REPO = Path(__file__).resolve().parents[4]
SEVEN_B = ["SEAL", "GRPO", "SEAL_no_env_adaptation", "SEAL_no_reweighting", "SEAL_no_closed_loop"]
"""The paper's Qwen2.5-7B-Instruct rows: the recipe, the baseline, the ablations."""
PAPER_CONFIGS = [
    *SEVEN_B,
    "SEAL_full_interface",
    "SEAL_qwen2.5_3b",
    "GRPO_qwen2.5_3b",
    "SEAL_toolace2_8b",
    "GRPO_toolace2_8b",
    "SEAL_qwen3_4b",
    "SEAL_qwen3.5_4b",
    "GRPO_qwen3.5_4b",
]
URL = "http://127.0.0.1:8082"


def verl_config(name: str, tmp_path: Path, *overrides: str):
    run_cfg = launcher.compose(REPO / f"exp/{name}.yaml", list(overrides))
    return run_cfg, compose_verl_config(run_cfg, URL, tmp_path / name)


RUNS = Path("/nonexistent/runs")
"""The run folder of the configs `composed` makes (composing writes nothing there)."""


@functools.cache
def composed(name: str):
    """exp/NAME.yaml as it is, composed into verl's config once for the module and read-only:
    a compose is about a second of Hydra and verl's checks, and a dozen tests read each
    paper config."""
    run_cfg, config = verl_config(name, RUNS)
    for cfg in (run_cfg, config):
        OmegaConf.set_readonly(cfg, True)
    return run_cfg, config


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_paper_configs_validate_against_verl(name):
    run_cfg, config = composed(name)
    assert run_cfg.job == "verl"  # the paper configs run on this backend by default
    t, actor = run_cfg.trainer, config.actor_rollout_ref.actor
    rollout = config.actor_rollout_ref.rollout
    assert config.trainer.v1.trainer_mode == "seal_sync" and config.trainer.use_v1
    assert config.algorithm.adv_estimator == "grpo"
    assert config.trainer.n_gpus_per_node == 4 and config.trainer.nnodes == 1
    assert rollout.name == "vllm" and rollout.mode == "async"
    assert rollout.agent.default_agent_loop == "seal_bfcl"
    # The paper's hyperparameters, through the mapping.
    assert actor.optim.lr == t.optim.lr == 1e-6
    # The release's arithmetic: each episode weighs the same (tests/seal/trainer/verl/
    # test_loss_weight.py), 4,096 response tokens trained, its context stop.
    assert actor.loss_agg_mode == "seq-mean-token-mean"
    assert t.loss.trained_response_tokens == 4096 and t.limits.context_stop == "release"
    batch = 16 if "3b" in name else 32  # the release's 3B runs: 16 tasks per step
    assert rollout.n == 8 and config.data.train_batch_size == batch
    assert actor.ppo_mini_batch_size == t.optim.mini_batch_size
    assert actor.use_kl_loss and actor.kl_loss_coef == 0.001
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.2)
    assert config.trainer.total_epochs == 6 and config.trainer.test_freq == 10
    assert rollout.val_kwargs.n == 1 and rollout.val_kwargs.temperature == 0
    # The agent loop's length contract: every episode fits verl's response tensor.
    assert rollout.response_length == t.limits.max_context_tokens == 16384
    assert Path(config.data.train_files).is_absolute() and Path(config.data.train_files).exists()
    seal = SealSection.from_config(config)
    assert seal.env_url == URL and seal.run_dir == str(RUNS / name)
    # The agent loop and the SEAL trainer read the run's very `trainer` section.
    assert seal.trainer == OmegaConf.to_object(t)


EXP_CONFIGS = sorted(p.stem for p in (REPO / "exp").glob("*.yaml"))
TINY_OVERRIDES = ["verl.device=cpu", "trainer.loss.use_kl_loss=false"]
"""What a config of the tiny random model (cpu_default) needs to compose for verl."""


@pytest.mark.parametrize("name", EXP_CONFIGS)
def test_every_config_is_sized_for_its_context(name, tmp_path):
    """Every exp/*.yaml, composed into verl's config: vLLM's context is the run's context
    limit (not the model's window), the update and both log-prob passes batch by token
    budgets that hold the longest sample (prompt + response <= the context limit), the
    retention policy keeps the best and the latest checkpoint with Hugging Face weights,
    and the engine is told to stop at the tool format's end of turn."""
    from seal.trainer.verl.agent_loop import stop_token_ids
    from seal.trainer.verl.generator import VerlGenerator

    tiny = launcher.compose(REPO / f"exp/{name}.yaml", []).trainer.model.path.startswith("tiny-")
    run_cfg, config = verl_config(name, tmp_path, *TINY_OVERRIDES) if tiny else composed(name)
    t, arr = run_cfg.trainer, config.actor_rollout_ref
    context = t.limits.max_context_tokens
    assert arr.rollout.max_model_len == context
    assert arr.actor.use_dynamic_bsz and arr.rollout.log_prob_use_dynamic_bsz
    assert arr.ref.log_prob_use_dynamic_bsz
    longest_sample = context  # the driver never lets prompt + response exceed it
    assert arr.actor.ppo_max_token_len_per_gpu >= longest_sample
    assert arr.rollout.log_prob_max_token_len_per_gpu >= longest_sample
    assert arr.ref.log_prob_max_token_len_per_gpu >= longest_sample
    assert t.checkpoint.keep_only_best and config.trainer.max_actor_ckpt_to_keep == 1
    assert "hf_model" in arr.actor.checkpoint.save_contents
    assert "hf_model" not in arr.actor.checkpoint.load_contents
    tool_format = OmegaConf.to_object(t.model).resolved_tool_format()
    stop = stop_token_ids(tokenizer(), tool_format)
    sent = VerlGenerator(None, {}, stop_token_ids=stop).sampling_dict(
        SamplingParams(max_new_tokens=8)
    )
    assert sent["stop_token_ids"] == tokenizer().convert_tokens_to_ids([tool_format.end_of_turn])


def test_budgets_below_the_context_are_refused(tmp_path):
    with pytest.raises(ValueError, match="update_max_tokens_per_gpu 8192 is below the context"):
        verl_config("SEAL", tmp_path, "verl.update_max_tokens_per_gpu=8192")
    with pytest.raises(ValueError, match="max_model_len 8192 is below max_context_tokens"):
        verl_config(
            "SEAL", tmp_path, "verl.overrides=[actor_rollout_ref.rollout.max_model_len=8192]"
        )
    _, config = verl_config("SEAL", tmp_path, "verl.dynamic_batching=false")
    actor = config.actor_rollout_ref.actor
    assert not actor.use_dynamic_bsz and actor.ppo_micro_batch_size_per_gpu == 1


def test_ray_reservations_fit_the_node(tmp_path):
    """verl holds 3 CPUs per GPU and one per TransferQueue storage unit for the whole run:
    with its 8 default units a 4-GPU node needs 21, more than a 16-core node has, and Ray
    waits forever. The mapping uses 2 units per node, and a Ray the launcher starts gets at
    least what verl reserves plus one slot for its other actors."""
    from seal.trainer.verl.verl_config import reserved_cpus

    _, config = composed("SEAL")
    units = config.transfer_queue.backend.SimpleStorage.num_data_storage_units
    assert units == 2
    assert reserved_cpus(4, 0, units) + 1 == 16
    assert config.ray_kwargs.ray_init.num_cpus >= 16
    _, two_nodes = verl_config("SEAL", tmp_path, "verl.nnodes=2")
    assert two_nodes.transfer_queue.backend.SimpleStorage.num_data_storage_units == 4


def test_attention_follows_what_imports(tmp_path):
    from seal.trainer.verl.attention import choose_attention

    run_cfg = launcher.compose(REPO / "exp/SEAL.yaml", [])
    with_fa = compose_verl_config(run_cfg, URL, tmp_path, choose_attention("cuda", "2.8.3"))
    model = with_fa.actor_rollout_ref.model
    assert (
        model.use_remove_padding
        and model.override_config.attn_implementation == "flash_attention_2"
    )
    without = compose_verl_config(run_cfg, URL, tmp_path, choose_attention("cuda", None))
    model = without.actor_rollout_ref.model
    assert not model.use_remove_padding and model.override_config.attn_implementation == "sdpa"
    assert "flash-attn does not import" in choose_attention("cuda", None).reason


def test_ablations_differ_where_the_paper_says():
    seal = {n: SealSection.from_config(composed(n)[1]).trainer for n in SEVEN_B}
    assert seal["SEAL"].apatch.enable and seal["SEAL"].interface.schema_cues
    assert not seal["SEAL"].interface.guidelines and seal["SEAL"].rollout.push_profile
    assert not seal["GRPO"].apatch.enable and not seal["GRPO"].interface.any
    assert not seal["SEAL_no_reweighting"].apatch.enable
    assert seal["SEAL_no_reweighting"].interface.schema_cues
    assert not seal["SEAL_no_env_adaptation"].interface.any
    assert seal["SEAL_no_env_adaptation"].apatch.enable
    assert seal["SEAL_no_closed_loop"].apatch.weight_source == "static"
    assert seal["SEAL_no_closed_loop"].interface.schema_cues


def test_overrides_win_and_unknown_keys_fail(tmp_path):
    _, config = verl_config(
        "SEAL", tmp_path, "verl.overrides=[actor_rollout_ref.rollout.max_num_seqs=512]"
    )
    assert config.actor_rollout_ref.rollout.max_num_seqs == 512
    with pytest.raises(ConfigCompositionException, match="max_num_seqz"):
        verl_config("SEAL", tmp_path, "verl.overrides=[actor_rollout_ref.rollout.max_num_seqz=1]")


def test_invalid_combinations_fail(tmp_path):
    with pytest.raises(ValueError, match="needs a Hugging Face model"):
        verl_config("SEAL", tmp_path, "trainer.model.path=tiny-qwen2")
    _, config = verl_config("SEAL", tmp_path)
    config.actor_rollout_ref.rollout.name = "???"  # as verl's default for it
    with pytest.raises(ValueError, match=r"without a value: \['actor_rollout_ref.rollout.name'\]"):
        validate(config)
    # 32 x 8 samples (8 x 8 per mini-batch) do not split over 3 GPUs.
    with pytest.raises(ValueError, match=r"\(256\) must be divisible by the 3 GPUs"):
        verl_config("SEAL", tmp_path, "verl.n_gpus_per_node=3")


def test_cpu_smoke_config_selects_the_cpu_backend():
    """exp/verl_cpu_smoke.yaml composes into verl's schema with the CPU backend's
    platform, replica, weight sync, trainer and float32 FSDP2, on the tiny model saved in
    the run directory."""
    run_cfg, config = composed("verl_cpu_smoke")
    assert run_cfg.verl.device == "cpu" and run_cfg.trainer.model.path == "tiny-qwen2"
    rollout, actor = config.actor_rollout_ref.rollout, config.actor_rollout_ref.actor
    assert config.trainer.v1.trainer_mode == "seal_sync_cpu" and config.trainer.device == "cpu"
    assert rollout.name == "seal_hf_cpu" and rollout.checkpoint_engine.backend == "seal_gloo"
    assert actor.strategy == "fsdp2" and actor.fsdp_config.mixed_precision.param_dtype == "fp32"
    assert not actor.use_kl_loss
    ray_init = config.ray_kwargs.ray_init
    assert ray_init.runtime_env.env_vars.VERL_PLATFORM == "seal_cpu"
    assert int(ray_init.runtime_env.env_vars.OMP_NUM_THREADS) == os.cpu_count()
    assert ray_init.num_gpus == 2  # one actor worker and one replica
    assert config.actor_rollout_ref.model.path == str(RUNS / "verl_cpu_smoke/tiny_model")
    assert config.data.train_files.endswith("data/smoke_train.parquet")


def test_cpu_backend_refusals(tmp_path):
    with pytest.raises(ValueError, match="tiny-qwen2.*verl.device=cpu"):
        verl_config("verl_cpu_smoke", tmp_path, "verl.device=cuda")
    with pytest.raises(ValueError, match="pin_memory.*use_kl_loss=false"):
        verl_config("verl_cpu_smoke", tmp_path, "trainer.loss.use_kl_loss=true")
    with pytest.raises(ValueError, match="verl.device must be cuda or cpu"):
        verl_config("verl_cpu_smoke", tmp_path, "verl.device=tpu")


@pytest.mark.parametrize("name", ["verl_cpu_smoke", "verl_cpu_smoke_qwen3.5"])
def test_cpu_smoke_widths_hold_its_prompts(name):
    """The smoke cuts verl's padded widths to save CPU time; every smoke task's first
    prompt still fits the prompt width, with room left for an episode in the context."""
    from scripts_loader import load_script

    run_cfg, config = composed(name)
    rollout = config.actor_rollout_ref.rollout
    smoke = [t for ids in load_script("prepare_data").SMOKE_TASKS.values() for t in ids]
    fmt = OmegaConf.to_object(run_cfg.trainer.model).resolved_tool_format().name
    longest = max(tokens(text) for text in first_prompts(fmt, smoke))
    assert 2000 < longest <= rollout.prompt_length - 256
    assert rollout.prompt_length + rollout.response_length <= 8192  # not the paper's 24k


def test_hydra_values_stay_literal():
    assert hydra_value("a/b's:c=d") == "'a/b\\'s:c=d'"
    assert hydra_value(None) == "null" and hydra_value(True) == "true"
    assert hydra_value(["console", "wandb"]) == "['console','wandb']"


def first_prompts(tool_format: str, ids) -> list[str]:
    """The first prompt of each task in a format, with every training layer on and every
    guideline in the system prompt (the longest a prompt gets)."""
    engine = EnvEngine(ServiceConfig(workers=0))
    engine.profiles.push({"tags": [{"tag": tag} for tag in GUIDELINES]})
    layers = InterfaceSettings(
        schema_cues=True, type_hints=True, guidelines=True, max_guidelines=len(GUIDELINES)
    )
    fmt, texts = get_format(tool_format), []
    settings = EpisodeSettings(mode="sample", prompt=fmt.prompt, interface=layers)

    async def create_all():
        for task_id in ids:
            body = CreateEpisode(task_id=task_id, settings=settings)
            created = await api_native.create(engine, body)
            engine.close(created.episode_id)
            texts.append(fmt.render(fmt.start(created.model_dump())))

    asyncio.run(create_all())
    return texts


@functools.cache
def tokenizer():
    """The shipped tokenizer with Llama 3's special tokens, one for the module."""
    return shipped_tokenizer(llama_tokens=True)


def tokens(text: str) -> int:
    return len(tokenizer().encode(text, add_special_tokens=False))


@functools.cache
def longest_first_prompt(tool_format: str) -> int:
    """Tokens of the longest first prompt of the 800 tasks in a format. Only the 16
    longest prompts in characters are tokenized (tokenizing all 800 took 30 s per
    format): the prompts of one format are the same kind of text (tool docs as JSON,
    questions), so the longest in tokens is among them."""
    longest = sorted(first_prompts(tool_format, task_ids()), key=len)[-16:]
    return max(tokens(text) for text in longest)


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_prompt_length_holds_every_bfcl_prompt(name):
    """The longest first prompt of the 800 tasks in the config's tool format fits verl's
    prompt tensor (else episodes fail)."""
    run_cfg, config = composed(name)
    model = OmegaConf.to_object(run_cfg.trainer.model)
    tool_format = model.resolved_tool_format().name  # `auto` for the 7B configs
    longest = longest_first_prompt(tool_format)
    assert 6000 < longest <= config.actor_rollout_ref.rollout.prompt_length
    if tool_format == "bfcl_qwen_fc":
        assert config.actor_rollout_ref.rollout.prompt_length == 8192  # the paper's


def test_each_row_uses_its_model_s_format(tmp_path):
    models = {n: launcher.compose(REPO / f"exp/{n}.yaml", []).trainer.model for n in PAPER_CONFIGS}
    assert models["SEAL"].tool_format == "auto"
    assert default_format(models["SEAL"].path) == "bfcl_qwen_fc"
    assert models["SEAL_toolace2_8b"].tool_format == "toolace_official_prompt"
    assert models["SEAL_qwen3_4b"].tool_format == "qwen3"
    assert models["SEAL_qwen3.5_4b"].tool_format == "bfcl_qwen_fc_qwen3.5"
    assert models["SEAL_qwen2.5_3b"].tool_format == "bfcl_qwen_fc"
    for model in models.values():  # written out, each is what `auto` picks
        assert model.tool_format in ("auto", default_format(model.path))


def test_verl_job_hands_the_validated_config_to_verl(tmp_path, monkeypatch):
    """The launcher's `verl` job up to verl's entry point (which needs GPUs): the config
    it passes is the validated one, saved in the run directory (the pass rates after it are
    the launcher's: tests/seal/launch/test_launcher.py)."""
    from omegaconf import OmegaConf

    from seal.trainer.verl import launch

    handed = {}

    def fake_run_ppo(config, task_runner_class):
        handed["config"], handed["runner"] = config, task_runner_class

    def fake_start_ray(config, env):
        handed["worker_env"] = env

    def fake_preflight(run_cfg, config, run_dir, probe_env=None):
        handed["preflight"] = True
        return []

    monkeypatch.setattr(launch, "run_ppo", fake_run_ppo)
    monkeypatch.setattr(launch, "start_ray", fake_start_ray)
    monkeypatch.setattr(launch, "run_preflight", fake_preflight)
    monkeypatch.setenv("SEAL_ENV_TOKEN", "the-run-token")
    run_cfg = launcher.compose(REPO / "exp/SEAL.yaml", [])
    launch.run_verl_training(run_cfg, URL, tmp_path, REPO / "data/seal_split.json")
    config = handed["config"]
    assert handed["runner"] is launch.TaskRunnerV1
    assert handed["preflight"]  # before verl's entry point, on the same config
    # The workers' environment goes to Ray, not into the config (saved and printed).
    # A resumed run's wandb run is the first start's: its id, kept in the run directory.
    assert handed["worker_env"] == {
        "SEAL_ENV_TOKEN": "the-run-token", "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path),
        "WANDB_RUN_ID": (tmp_path / "wandb_run_id.txt").read_text(), "WANDB_RESUME": "allow",
    }  # fmt: skip
    assert "the-run-token" not in (tmp_path / "verl_config.yaml").read_text()
    assert config.trainer.v1.trainer_mode == "seal_sync" and config.seal.env_url == URL
    assert OmegaConf.load(tmp_path / "verl_config.yaml") == config


def test_ray_gets_verl_s_own_arguments_plus_the_workers_environment(tmp_path, monkeypatch):
    """The launcher starts Ray as verl's run_ppo would (its runtime environment, the
    config's ray_init), with the token and the tracking mode added, so they reach workers on
    every node; joining a `ray start` cluster, the CPU and GPU counts are the cluster's."""
    import verl.trainer.main_ppo as main_ppo

    from seal.trainer.verl.ray_init import ray_init_kwargs, worker_env

    monkeypatch.setenv("SEAL_ENV_TOKEN", "t0k3n")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    run_cfg, config = verl_config("verl_cpu_smoke", tmp_path)
    captured = {}

    class Stop(Exception):
        pass

    def fake_init(**kwargs):
        captured.update(kwargs)
        raise Stop

    monkeypatch.setattr(main_ppo.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(main_ppo.ray, "init", fake_init)
    with pytest.raises(Stop):
        main_ppo.run_ppo(config, None)
    env = worker_env(run_cfg, tmp_path)
    assert env == {"SEAL_ENV_TOKEN": "t0k3n", "WANDB_MODE": "disabled", "WANDB_DIR": str(tmp_path)}
    ours = ray_init_kwargs(config, env)
    expected = {**captured, "runtime_env": dict(captured["runtime_env"])}
    expected["runtime_env"]["env_vars"] = {**captured["runtime_env"]["env_vars"], **env}
    assert ours == expected
    assert ours["num_cpus"] == 16 and ours["num_gpus"] == 2  # the CPU backend's local Ray
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    joined = ray_init_kwargs(config, env)
    assert "num_cpus" not in joined and "num_gpus" not in joined
    assert joined["runtime_env"]["env_vars"]["SEAL_ENV_TOKEN"] == "t0k3n"
