"""The paper's reference numbers: transcribed consistently and found by backbone and method."""

import pytest

from seal.eval.paper import PAPER_RESULTS, QWEN_7B, paper_result
from seal.tocf.tags import CATEGORIES


def test_averages_are_the_mean_of_the_four_categories_where_given():
    with_categories = [result for result in PAPER_RESULTS if result.category_pct]
    assert len(with_categories) == 3
    for result in with_categories:
        assert sorted(result.category_pct) == sorted(CATEGORIES)
        assert sum(result.category_pct.values()) / 4 == pytest.approx(result.average_pct)


def test_lookup_by_backbone_and_method():
    assert paper_result(QWEN_7B, "SEAL").category_pct["multi_turn_base"] == 58
    with pytest.raises(KeyError, match="no result"):
        paper_result(QWEN_7B, "PPO")
