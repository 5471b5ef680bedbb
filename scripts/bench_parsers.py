"""Every parser of model text on degenerate messages: milliseconds per parse.

    python scripts/bench_parsers.py [--runs 5] [--sizes 262144,1048576,10485760]
        [--parsers paper,...] [--unbounded]

Each parser (the service's release-protocol parses and every tool format's) reads each
shape of message (unclosed `<tool_call>{` openings, whitespace in a call, a flood of
blocks, nested brackets, ...) at each size; prints the median of `--runs` parses per cell
and whether every message of 1 MB and more came under a second. `--unbounded` lifts the
MAX_MESSAGE_CHARS refusal (slow). Shapes and figures: docs/benchmarks.md, "Parsers".
"""

from __future__ import annotations

import argparse
import statistics
import time

from seal.bfcl import calls, paper_calls, toolace_calls
from seal.formats.registry import FORMATS, get_format

TOOLS = [{"name": "f", "description": "", "parameters": {"properties": {"a": {"type": "integer"}}}}]
CAP = 128  # the service's max_calls_per_step

SHAPES = {
    "unclosed openings": "<tool_call>{",
    "whitespace in a call": ("<tool_call><function=f>", " \n\t"),
    "flood of blocks": '<tool_call>{"name":"f","arguments":{"a":1}}</tool_call>',
    "many call lists": "[f(a=1)] ",
    "one list of calls": ("[", "f(a=1), "),
    "dotted name": ("[", "a."),
    "nested brackets": ("[", "[", "]"),
}
"""Each shape: a unit repeated to the size, or (head, unit) or (head, unit, closing
unit): the head, then units, then as many closing units (half and half)."""


def message(shape, size: int) -> str:
    if isinstance(shape, str):
        return (shape * (size // len(shape) + 1))[:size]
    if len(shape) == 2:
        head, unit = shape
        return (head + unit * (size // len(unit) + 1))[:size]
    head, opening, closing = shape
    half = (size - len(head)) // 2
    return head + opening * (half - 1) + closing * (size - len(head) - half + 1)


def parsers() -> dict:
    """name -> parse(text): the release protocol's parses, then every tool format's."""
    table = {
        "release bfcl_qwen_fc (128)": lambda t: paper_calls.parse_first(t, CAP),
        "release qwen2.5 (128)": lambda t: calls.parse_first_tool_calls(t, CAP),
        "release toolace (128)": lambda t: toolace_calls.parse_first(t, CAP),
    }
    for name in FORMATS:
        fmt = get_format(name)
        table[f"format {name}"] = lambda t, fmt=fmt: fmt.parse(t, TOOLS)
    return table


def median_ms(parse, text: str, runs: int) -> float:
    parse(text[:100])  # warm-up: first calls import and compile
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        parse(text)
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument(
        "--sizes",
        type=lambda text: [int(s) for s in text.split(",")],
        default=[calls.MAX_MESSAGE_CHARS, 2**20, 10 * 2**20],
    )
    p.add_argument("--parsers", type=lambda text: text.split(","), default=None)
    p.add_argument("--unbounded", action="store_true", help="lift MAX_MESSAGE_CHARS")
    args = p.parse_args(argv)
    if args.unbounded:
        calls.MAX_MESSAGE_CHARS = max(args.sizes)  # message_too_long reads it at each call
    table = parsers()
    chosen = args.parsers or list(table)
    sizes = "".join(f"{s:>12,}" for s in args.sizes)
    print(f"median ms of {args.runs} parses; columns: message characters\n")
    worst = 0.0
    for name in chosen:
        parse = table[name]
        print(f"{name}\n  {'':<22}{sizes}")
        for shape, spec in SHAPES.items():
            cells = []
            for size in args.sizes:
                ms = median_ms(parse, message(spec, size), args.runs)
                cells.append(ms)
                if size >= 2**20:
                    worst = max(worst, ms)
            print(f"  {shape:<22}" + "".join(f"{ms:>12.2f}" for ms in cells), flush=True)
    if args.unbounded:  # every message read whole: how the reading grows, no verdict
        return
    verdict = "under" if worst < 1000 else "NOT under"
    print(f"\nslowest parse of a message of 1 MB or more: {worst:.2f} ms ({verdict} a second)")


if __name__ == "__main__":
    main()
