"""Run config keys that were renamed, and their old spellings read as the new ones.

`RENAMED` maps an old dotted key (a leaf or a whole section) to its new one. `rename_old_keys`
moves a config layer's old keys to their new names before the run config's schema sees it:
the launcher applies it to exp/*.yaml, a user's file, the `key=value` overrides and a run's
recorded config.yaml (a resume), and the reports (seal/report/run_source.py) to the
recorded config they read, so a run made before a rename still resumes and compares. Each old key read
warns once per process (a FutureWarning naming the new key). The service reads a create's
`settings` through it too, with seal.service_contract.RENAMED_SETTINGS.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, MutableMapping

RENAMED: dict[str, str] = {
    "trainer.apatch.budget": "trainer.apatch.renormalize",
    "trainer.evolution": "trainer.interface",
}
"""Old dotted key -> new dotted key (docs/design.md, "Glossary"; CHANGELOG.md says when)."""

_warned: set[str] = set()
"""The old keys already warned about in this process."""


def _section(config: MutableMapping, parts: list[str], create: bool) -> MutableMapping | None:
    node = config
    for part in parts:
        if part not in node:
            if not create:
                return None
            node[part] = {}
        node = node[part]
        if not isinstance(node, MutableMapping):
            return None
    return node


def rename_old_keys(config, renamed: Mapping[str, str] = RENAMED, what: str = "config key"):
    """`config` (a dict or an OmegaConf DictConfig, changed in place and returned) with
    each old key of `renamed` moved to its new name; `what` names such keys in the
    messages. Refused: a layer giving both."""
    if not isinstance(config, MutableMapping):
        return config
    for old, new in renamed.items():
        *old_parents, old_leaf = old.split(".")
        source = _section(config, old_parents, create=False)
        if source is None or old_leaf not in source:
            continue
        *new_parents, new_leaf = new.split(".")
        target = _section(config, new_parents, create=True)
        if target is None or new_leaf in target:
            raise ValueError(f"{what} {new!r} given twice: also as its old spelling {old!r}")
        target[new_leaf] = source.pop(old_leaf)
        if old not in _warned:
            _warned.add(old)
            warnings.warn(
                f"{what} {old!r} is deprecated, read as {new!r}: rename it",
                FutureWarning,
                stacklevel=2,
            )
    return config
