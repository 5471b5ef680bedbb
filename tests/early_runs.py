"""Runs started ahead of their tests: the verl CPU smokes' launcher runs, started one after
another in a background thread as soon as their modules' tests are selected (conftest.py's
`pytest_collection_finish`), so minutes of run overlap the tests before those modules."""

from __future__ import annotations

import threading


class EarlyRuns:
    """The early runs of this session, started one after another in a background thread
    in the modules' collection order: each starts once the one before has ended (its
    `wait()` returned), so two verl runs (8-10 GB each) never share the machine. A module
    whose tests start more verl runs of their own after its early run (the HF smoke's
    resume) must therefore come last among them: tests/seal/trainer/verl/
    test_cpu_rollout_vllm.py runs both of its launches in its early run and sorts before
    test_cpu_smoke.py."""

    def __init__(self, starters: list[tuple[str, object]]):
        self.starters = starters
        self.started: dict[str, object] = {}
        self.errors: dict[str, BaseException] = {}
        self.ready = {name: threading.Event() for name, _ in starters}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run_all, name="early-runs", daemon=True)
        self.thread.start()

    def _run_all(self) -> None:
        for name, start in self.starters:
            if self.stopping.is_set():
                self.errors[name] = RuntimeError("the session ended before this run started")
                self.ready[name].set()
                continue
            try:
                self.started[name] = run = start()
            except BaseException as error:  # noqa: BLE001 - re-raised in the module's fixture
                self.errors[name] = error
                self.ready[name].set()
                continue
            self.ready[name].set()
            run.wait()

    def get(self, name: str):
        """The module's run once started (waiting for the runs before it), or None."""
        if name not in self.ready:
            return None
        self.ready[name].wait()
        if name in self.errors:
            raise self.errors[name]
        return self.started[name]

    def stop(self) -> None:
        self.stopping.set()
        for run in list(self.started.values()):
            run.stop()
        self.thread.join(timeout=120)
