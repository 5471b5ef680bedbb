"""seal/trainer/verl/episode_fields.py: every field of what the agent loop hands the trainer
comes back with its type, through verl's own collation of agent loop outputs (training)
and through the columns verl's validation gathers and reduces (validation records).
The real TransferQueue round trip: test_trainer.py."""

from __future__ import annotations

from collections import defaultdict

import pytest

pytest.importorskip("verl")

from pydantic import ValidationError  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput  # noqa: E402
from verl.trainer.ppo.metric_utils import process_validation_metrics  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402

from seal.trainer.reweight import SampleOutcome  # noqa: E402
from seal.trainer.verl.episode_fields import EPISODE_KEY, EPISODE_TEXT_KEY, EpisodeFields  # noqa: E402
from seal.trainer.verl.trainer import validation_records  # noqa: E402

INTERFACE = {
    "schema_cues": True,
    "type_hints": False,
    "recovery_feedback": True,
    "guidelines": True,
    "shown": [{"tag": "state_mismatch", "text": "Check the state, then act."}],
}
FAILED = EpisodeFields(
    task_id="multi_turn_miss_param_9",
    category="multi_turn_miss_param",
    accuracy=0,
    progress=0.5,
    failure_tags=["pass", "wrong_args"],
    paper_label="argument_mismatch",
    interface=INTERFACE,
    num_generations=5,
    stop_reason="terminated",
    tool_calls=4,
    invalid_calls=1,
    tool_errors=2,
    turns_reached=2,
    min_weight_version=3,
    max_weight_version=4,
)
PASSED = FAILED.model_copy(
    update={
        "task_id": "multi_turn_base_3",
        "category": "multi_turn_base",
        "accuracy": 1,
        "progress": 1.0,
        "failure_tags": [],  # a task without ground-truth turns: no tags
        "paper_label": None,
        "interface": {},
        "invalid_calls": 0,
        "min_weight_version": 7,
        "max_weight_version": 7,
    }
)
EPISODES = [FAILED, PASSED]


def output(episode: EpisodeFields) -> AgentLoopOutput:
    return AgentLoopOutput(
        prompt_ids=[1, 2, 3],
        response_ids=[4, 5],
        response_mask=[1, 1],
        reward_score=1.0,
        num_turns=2,
        metrics=AgentLoopMetrics(),
        extra_fields=episode.to_extra_fields(),
    )


def test_every_field_comes_back_through_verl_s_collation():
    """What AgentLoopWorkerTQ stores: each output's as_dict() collated into one
    TensorDict, `extra_fields` one field of it, read back as the SEAL hooks read it."""
    batch = list_of_dict_to_tensordict([output(e).as_dict() for e in EPISODES])
    back = [EpisodeFields.from_extra_fields(f) for f in list(batch["extra_fields"])]
    assert back == EPISODES
    assert back[1].paper_label is None and back[1].failure_tags == []
    assert back[0].interface == INTERFACE


def test_verl_reads_the_weight_versions_under_its_own_names():
    """AgentLoopWorkerTQ tags each sample with them; the step metrics turn them into ints."""
    fields = FAILED.to_extra_fields()
    assert (fields["min_global_steps"], fields["max_global_steps"]) == (3, 4)


def test_the_step_s_outcome_of_a_sample():
    assert FAILED.outcome(0.25) == SampleOutcome(
        "multi_turn_miss_param_9", "multi_turn_miss_param", 0.25, 0,
        ["pass", "wrong_args"], "argument_mismatch", INTERFACE,
    )  # fmt: skip


def gathered_as_verl_validates(outputs: list[AgentLoopOutput]) -> dict[str, list]:
    """The columns verl 0.9.1's `_validate` builds from each sample's reward_extra_info
    (trainer_base.py: one list per key, in sample order)."""
    columns = defaultdict(list)
    for o in outputs:
        for key, value in o.extra_fields["reward_extra_info"].items():
            columns[key].append(value)
    return dict(columns)


def test_validation_records_and_verl_s_metrics_from_the_gathered_columns():
    columns = gathered_as_verl_validates([output(e) for e in EPISODES])
    assert [EpisodeFields.from_validation_columns(columns, i) for i in range(2)] == EPISODES

    records = validation_records(7, ["in a", "in b"], ["out a", "out b"], [0.0, 1.0], columns)
    assert [(r.task_id, r.data_source, r.score, r.reward) for r in records] == [
        ("multi_turn_miss_param_9", "multi_turn_miss_param", 0, 0.0),
        ("multi_turn_base_3", "multi_turn_base", 1, 1.0),
    ]
    assert [(r.failure_tags, r.paper_label) for r in records] == [
        (["pass", "wrong_args"], "argument_mismatch"),
        ([], None),
    ]
    assert [(r.turns, r.progress, r.step) for r in records] == [(5, 0.5, 7), (5, 1.0, 7)]
    assert [(r.input, r.output) for r in records] == [("in a", "out a"), ("in b", "out b")]

    # verl reduces every column: the numbers become its metrics, the episode's text is
    # skipped (a list or a dict there would fail its mean).
    metrics = process_validation_metrics(
        [e.category for e in EPISODES], ["u0", "u1"], columns | {"reward": [0.0, 1.0]}
    )
    assert metrics["multi_turn_base"]["acc"]["mean@1"] == 1.0
    assert metrics["multi_turn_miss_param"]["turns"]["mean@1"] == 5
    assert EPISODE_TEXT_KEY not in metrics["multi_turn_base"]


@pytest.mark.parametrize(
    "change",
    [
        {"accuracy": "1"},  # another type is an error, not converted
        {"failure_tags": "pass,wrong_args"},  # the old comma-joined form
        {"interface": "{}"},  # the old JSON-text form
        {"unknown": 1},
    ],
)
def test_a_field_of_another_type_is_refused(change):
    with pytest.raises(ValidationError):
        EpisodeFields.from_extra_fields({EPISODE_KEY: FAILED.model_dump() | change})


def test_a_sample_without_the_episode_is_refused():
    with pytest.raises(KeyError, match=EPISODE_KEY):
        EpisodeFields.from_extra_fields({"min_global_steps": 1, "max_global_steps": 1})
