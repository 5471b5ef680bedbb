"""The diagnosis's vocabulary: the failure tag of each ground-truth turn (the paper's
Table 6) and the label of a failed episode (its Table 5).

The single source of these names for the whole project: the diagnosis
(seal/bfcl/diagnosis.py) emits them, the environment service shows them, the capability
state counts them and A-Patch weights them (seal/tocf, where the weights are), the reports
print them. Plain constants, no imports, so every floor can use them without torch.
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
