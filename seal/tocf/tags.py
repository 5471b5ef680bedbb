"""Failure-tag vocabulary, BFCL multi-turn categories and the base tag weights.

The single source of these names for the whole project: the environment service's
diagnosis emits these tags (one per ground-truth turn), the capability state counts them
and A-Patch turns them into advantage scales. Plain constants, no imports, so the
service can use them without pulling in torch.
"""

PASS = "pass"
SPURIOUS_TOOL_CALL = "spurious_tool_call"  # ground truth empty, model called a tool
CORRECT_ABSTENTION = "correct_abstention"  # ground truth empty, model called none
EMPTY_TURN_MODEL_RESPONSE = "empty_turn_model_response"  # ground truth non-empty, no call
INSTANCE_MISMATCH = "instance_mismatch"  # the set of backend instances differs
STATE_MISMATCH = "state_mismatch"  # an instance's public attributes differ
RESPONSE_MISMATCH = "response_mismatch"  # ground-truth results missing from the model's
CHECKER_ERROR = "checker_error"  # the checker raised: says nothing about the model
GT_ERROR = "gt_error"  # the ground truth raised: says nothing about the model

ALL_TAGS = (
    PASS,
    SPURIOUS_TOOL_CALL,
    CORRECT_ABSTENTION,
    EMPTY_TURN_MODEL_RESPONSE,
    INSTANCE_MISMATCH,
    STATE_MISMATCH,
    RESPONSE_MISMATCH,
    CHECKER_ERROR,
    GT_ERROR,
)

# Infrastructure failures: they carry no signal about the policy, so they neither weight
# advantages nor appear in the failure profile.
EXCLUDED_TAGS = frozenset({CHECKER_ERROR, GT_ERROR})

# Tags that mark a turn the model got wrong; the failure profile only reports these.
FAILURE_TAGS = (
    SPURIOUS_TOOL_CALL,
    EMPTY_TURN_MODEL_RESPONSE,
    INSTANCE_MISMATCH,
    STATE_MISMATCH,
    RESPONSE_MISMATCH,
)

# The paper's base weights. Abstention errors weigh most (rare and cheap to fix), a wrong
# set of instances least (usually a symptom of an earlier mistake, not its own cause).
BASE_TAG_WEIGHTS = {
    SPURIOUS_TOOL_CALL: 2.0,
    CORRECT_ABSTENTION: 1.8,
    EMPTY_TURN_MODEL_RESPONSE: 1.5,
    STATE_MISMATCH: 1.0,
    RESPONSE_MISMATCH: 0.9,
    INSTANCE_MISMATCH: 0.6,
    PASS: 1.0,
}
UNKNOWN_TAG_WEIGHT = 1.0

# The paper's trajectory labels (its Table 5), highest priority first. A failed episode
# gets one (seal.bfcl.diagnosis.paper_label, docs/diagnosis_labels.md) for the reports;
# A-Patch and the capability state use the turn tags above (the paper's Table 6).
INVALID_TOOL_CALL = "invalid_tool_call"  # unparseable call, or an unknown/unavailable tool
ARGUMENT_MISMATCH = "argument_mismatch"  # a valid tool with a missing or unexpected argument
STATE_MISMATCH_LABEL = STATE_MISMATCH  # the calls ran but the backend state is not the expected
RECOVERY_FAILURE = "recovery_failure"  # a tool error came back and the turn still failed
MISSING_TOOL_CALL = "missing_tool_call"  # no call where one was needed (or the episode ended)
RESPONSE_MISMATCH_LABEL = RESPONSE_MISMATCH  # the calls were acceptable, results still missing

PAPER_LABELS = (
    INVALID_TOOL_CALL,
    ARGUMENT_MISMATCH,
    STATE_MISMATCH_LABEL,
    RECOVERY_FAILURE,
    MISSING_TOOL_CALL,
    RESPONSE_MISMATCH_LABEL,
)

CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)

TURN_POSITIONS = ("early", "middle", "late")


def turn_position(turn_index: int, num_turns: int) -> str:
    """Thirds of the episode: the first turn is early and, from two turns up, the last is late."""
    if not 0 <= turn_index < num_turns:
        raise ValueError(f"turn {turn_index} outside an episode of {num_turns} turns")
    span = num_turns - 1
    if 3 * turn_index < span or span == 0:
        return "early"
    if 3 * turn_index > 2 * span:
        return "late"
    return "middle"
