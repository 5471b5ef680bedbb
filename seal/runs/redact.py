"""Secrets kept out of what a run writes: its config, its record, its lock file.

A secret's value is replaced by `REDACTED`, as `config.yaml` has always held the service
token: in a command line, the value of any `key=value` or `--flag value` whose key names
a secret (`service.token=...`, `--token ...`), and any occurrence of the secrets the
caller knows (the token itself, however it was spelt).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "***"
SECRET_KEY = re.compile(r"(token|api[_-]key|secret|password)$", re.IGNORECASE)
"""The end of a key or flag name whose value is a secret."""


def names_secret(key: str) -> bool:
    """Whether `key` (a config key, `--flag` or override) holds a secret."""
    return bool(SECRET_KEY.search(key.lstrip("+~-")))


def redact_argv(argv: Iterable[str], secrets: Iterable[str | None] = ()) -> list[str]:
    """`argv` with every secret value replaced by `REDACTED` (see the module docstring)."""
    known = sorted({s for s in secrets if s}, key=len, reverse=True)
    out: list[str] = []
    for arg in argv:
        key, equals, value = arg.partition("=")
        if equals and value and names_secret(key):
            arg = f"{key}={REDACTED}"
        elif out and out[-1].startswith("--") and "=" not in out[-1] and names_secret(out[-1]):
            arg = REDACTED
        for secret in known:
            arg = arg.replace(secret, REDACTED)
        out.append(arg)
    return out
