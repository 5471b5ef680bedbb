"""scripts/count_context_stops.py on three training tasks: the driver's context stop under
the paper config (`context_stop: release`) ends the ground-truth episode before the same
generation as the release's own rule, counted its way (the raw conversation rendered with
the chat template and tokenized whole), and `fill` lets it finish. The counts over all 800
tasks: docs/paper_configs.md."""

from __future__ import annotations

import asyncio

from scripts_loader import load_script

from seal.rollout.env_client import EnvClient
from seal.trainer.response_cut import ResponseCut

# (task, generation the release's rule stops before, ground truth passes then)
CASES = [
    # A tool output of over 12,000 tokens after the first reply: the ground truth fails.
    ("multi_turn_long_context_100", 1, 0),
    # The raw history reaches the reserve only before the last turn's closing answer,
    # after every call ran: it still passes.
    ("multi_turn_long_context_113", 3, 1),
    # A long episode the rule never stops (its response is cut for training).
    ("multi_turn_long_context_84", None, 1),
]


def test_the_driver_stops_where_the_release_s_rule_does(live_service, tokenizer):
    count = load_script("count_context_stops")
    cut = ResponseCut(count.PAPER.loss.trained_response_tokens, tokenizer)

    async def main():
        async with EnvClient(live_service[0]) as env:
            return [await count.one_task(env, tokenizer, cut, t, "train") for t, *_ in CASES]

    rows = asyncio.run(main())
    for (task, stop, passes), row in zip(CASES, rows, strict=True):
        assert row["release_stop"] == stop, task  # the release's rule, its way
        assert count.driver_stop(row["release"]) == stop, task
        assert row["release"]["accuracy"] == passes, task
        # Without the release's rule every one finishes and passes.
        assert (row["fill"]["stop_reason"], row["fill"]["accuracy"]) == ("terminated", 1), task
    assert [row["fill"]["cut"] for row in rows] == [True, False, True]
    lines = count.table(rows).splitlines()
    assert lines[-1].split() == ["train", "all", "3", "2", "2", "1", "3", "0", "2", "4325"]
