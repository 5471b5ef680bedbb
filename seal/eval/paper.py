"""The SEAL paper's reported results, for reports that set a reproduction beside them.

BFCL V3 multi-turn accuracy on the 400 held-out tasks (100 per category), in percent as
printed in the paper (arXiv 2605.24426). ``summary.py`` works in fractions of 1: divide by 100
before comparing. Category keys are the ``data_source`` names of the validation records.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PaperResult:
    """One row of the paper's results: a backbone trained (or not) with one method."""

    backbone: str
    method: str  # "untrained", "vanilla GRPO", "SEAL" or an ablation of SEAL
    average_pct: float  # mean of the four categories
    # Empty where the paper gives only the average.
    category_pct: dict[str, float] = field(default_factory=dict)


def _categories(
    base: float, miss_func: float, miss_param: float, long_context: float
) -> dict[str, float]:
    return {
        "multi_turn_base": base,
        "multi_turn_miss_func": miss_func,
        "multi_turn_miss_param": miss_param,
        "multi_turn_long_context": long_context,
    }


QWEN_7B = "Qwen2.5-7B-Instruct"
QWEN_3B = "Qwen2.5-3B-Instruct"
TOOLACE_8B = "ToolACE-2-Llama-3.1-8B"

PAPER_RESULTS: tuple[PaperResult, ...] = (
    PaperResult(QWEN_7B, "untrained", 14.00, _categories(22, 14, 10, 10)),
    PaperResult(QWEN_7B, "vanilla GRPO", 30.75, _categories(46, 27, 27, 23)),
    PaperResult(QWEN_7B, "SEAL", 40.25, _categories(58, 36, 34, 33)),
    PaperResult(QWEN_3B, "untrained", 5.75),
    PaperResult(QWEN_3B, "SEAL", 14.00),
    PaperResult(TOOLACE_8B, "untrained", 32.00),
    PaperResult(TOOLACE_8B, "SEAL", 46.75),
    PaperResult(QWEN_7B, "SEAL without environment adaptation", 35.75),
    PaperResult(QWEN_7B, "SEAL without reweighting", 32.75),
    PaperResult(QWEN_7B, "SEAL without the closed-loop update", 33.00),
)


def paper_result(backbone: str, method: str) -> PaperResult:
    """The paper's row for a backbone and method; KeyError if the paper has none."""
    for result in PAPER_RESULTS:
        if (result.backbone, result.method) == (backbone, method):
            return result
    raise KeyError(f"the paper reports no result for {backbone!r} with {method!r}")
