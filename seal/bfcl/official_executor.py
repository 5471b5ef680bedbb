"""bfcl-eval's own executor, run as a fresh BFCL process would and kept from running model text.

The executor (`execute_multi_turn_func_call`) builds each call as a string and `eval`s it,
caches backend instances in its module's globals per (model name, task id), and
`TwitterAPI.post_tweet`'s mutable default arguments keep what an earlier task put in them.
The service never uses it (seal/bfcl/backends.py); bfcl-eval's own harness does
(seal/eval/bfcl_harness.py), and so does the test oracle (tests/bfcl_official.py). Here:
`fresh_backends` gives a run the state a fresh process has and takes it back afterwards;
`unsafe_call` says which decoded call string `eval` must not see.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import importlib
import inspect
from collections.abc import Iterable, Iterator

from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

from seal.bfcl.backends import mutable_defaults
from seal.bfcl.calls import parse_call_string


@contextlib.contextmanager
def fresh_backends(namespaces: Iterable[str], class_names: list[str]) -> Iterator[None]:
    """Run bfcl-eval's executor under the model names `namespaces` as a fresh BFCL process
    would: afterwards the instances it cached for those names are deleted and the backends'
    mutated default arguments restored. Names must be made of letters, digits and `_`
    (the executor writes its keys with `-./:` replaced)."""
    saved = _save_defaults(class_names)
    try:
        yield
    finally:
        _restore_defaults(saved)
        prefixes = tuple(namespaces)
        for key in [k for k in vars(multi_turn_utils) if k.startswith(prefixes)]:
            delattr(multi_turn_utils, key)


def _save_defaults(class_names: list[str]) -> list[tuple[object, tuple]]:
    saved = []
    for name in class_names:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)
        for method in mutable_defaults(cls):
            fn = getattr(cls, method)
            saved.append((fn, copy.deepcopy(fn.__defaults__)))
    return saved


def _restore_defaults(saved: list[tuple[object, tuple]]) -> None:
    # Plain attribute assignment on bfcl-eval's functions, only to undo what its executor
    # just did to them.
    for fn, defaults in saved:
        fn.__defaults__ = defaults


def backend_methods(class_names: list[str]) -> frozenset[str]:
    """The public method names the executor maps to the task's instances."""
    names = set()
    for name in class_names:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)
        names |= {m for m, _ in inspect.getmembers(cls, inspect.isfunction) if m[0] != "_"}
    return frozenset(names)


def unsafe_call(call: str, methods: frozenset[str]) -> str | None:
    """Why the executor must not `eval` the decoded call string `call`, or None. Safe: a
    call of a plain name with literal arguments (seal.bfcl.calls.parse_call_string) whose
    name is one of the task's backend methods (`methods`), or names nothing the executor's
    `eval` can find (it then answers with bfcl's own NameError, as for any unknown tool).
    Anything else would run as Python: a builtin (exec, open, ...), a global of the
    executor's module, an attribute or expression in the name or the arguments."""
    try:
        parsed = parse_call_string(call)
    except ValueError as error:
        return str(error)
    if parsed.name in methods:
        return None
    if parsed.name in vars(multi_turn_utils) or hasattr(builtins, parsed.name):
        return f"{parsed.name!r} is no tool of the task but a name Python's eval would run"
    return None
