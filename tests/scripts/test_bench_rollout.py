"""scripts/bench_rollout.py's in-process part runs (its synthetic episode had fallen behind
the client's episode: no `tools`, so every length row failed)."""

from __future__ import annotations

from scripts_loader import load_script


def test_the_sample_building_rows_run_for_every_length(capsys):
    bench = load_script("bench_rollout")
    bench.main(["--skip-http", "--runs", "1", "--observation-tokens", "48"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    lengths = [int(r[0]) for r in rows if len(r) == 5 and r[0].isdigit()]
    assert lengths == list(bench.LENGTHS)
