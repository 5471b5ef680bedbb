"""The paper's base tag weights, where A-Patch and the capability state start from.

Plain constants (the capability state imports no torch); the tags themselves are the
diagnosis's (seal/bfcl/tags.py).
"""

from seal.bfcl import tags as T

# The paper's base weights. Abstention errors weigh most (rare and cheap to fix), a wrong
# set of instances least (usually a symptom of an earlier mistake, not its own cause).
BASE_TAG_WEIGHTS = {
    T.SPURIOUS_TOOL_CALL: 2.0,
    T.CORRECT_ABSTENTION: 1.8,
    T.EMPTY_TURN_MODEL_RESPONSE: 1.5,
    T.STATE_MISMATCH: 1.0,
    T.RESPONSE_MISMATCH: 0.9,
    T.INSTANCE_MISMATCH: 0.6,
    T.PASS: 1.0,
}
UNKNOWN_TAG_WEIGHT = 1.0
