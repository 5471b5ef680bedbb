"""The paper's base tag weights, where A-Patch and the capability state start from.

Plain constants (the capability state imports no torch); the tags themselves are the
diagnosis's (seal/bfcl/tags.py).
"""

from seal.bfcl.tags import (
    CORRECT_ABSTENTION,
    EMPTY_TURN_MODEL_RESPONSE,
    INSTANCE_MISMATCH,
    PASS,
    RESPONSE_MISMATCH,
    SPURIOUS_TOOL_CALL,
    STATE_MISMATCH,
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
