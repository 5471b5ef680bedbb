"""One BFCL episode: the conversation state machine behind both service protocols.

An episode walks the task's user turns: a message with tool calls gets one result per call,
one without ends the turn. It speaks data (seal.service_contract) to the native API and
text to the release protocol (env_service/release_texts.py). The modules: machine.py (the walk
and a step's three parts), prompts.py (what the model is shown), admission.py (which calls
may run), answering.py (the answers to those that ran), evaluation.py (the evaluation),
records.py (caps, counters, a step's outcome). Details: docs/design.md, "The episode
contract".
"""

from env_service.episode.machine import EpisodeMachine
from env_service.episode.records import EpisodeCaps, StepOutcome

__all__ = ["EpisodeMachine", "EpisodeCaps", "StepOutcome"]
