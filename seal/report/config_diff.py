"""The config keys that differ between runs, for `seal-report --compare`'s table: two runs
compared should differ in what the comparison is about (an ablation's switch, the seed),
and the table shows whether they differ in anything else."""

from __future__ import annotations

from collections.abc import Mapping

MISSING = "–"
"""A key one run's config does not have."""


def flatten(config: Mapping, prefix: str = "") -> dict[str, object]:
    """{"a.b.c": value} of a nested mapping (lists are values)."""
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out |= flatten(value, name + ".")
        else:
            out[name] = value
    return out


def differing_keys(configs: Mapping[str, Mapping]) -> dict[str, dict[str, object]]:
    """{dotted key: {run: value}} for every key whose value is not the same in all the
    runs' configs (a key absent from a config counts as MISSING), in key order; {} with
    fewer than two configs."""
    if len(configs) < 2:
        return {}
    flat = {run: flatten(config) for run, config in configs.items()}
    keys = sorted(set().union(*flat.values()))
    out = {}
    for key in keys:
        values = {run: found.get(key, MISSING) for run, found in flat.items()}
        if len({repr(v) for v in values.values()}) > 1:
            out[key] = values
    return out
