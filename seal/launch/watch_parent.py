"""`python -m seal.launch.watch_parent MODULE [ARG...]`: run `python -m MODULE ARG...` in
this process, and end it when its standard input, a pipe from its parent, closes.

The launcher starts the environment service this way, and `seal-eval` its model server;
neither ever writes to the pipe. When the parent dies, however it dies (kill -9 included,
where none of its own clean-up runs), the kernel closes the pipe's write end; the watcher
thread then sends this process SIGTERM (uvicorn shuts down cleanly) and, if it is still
running `GRACE_S` later (a handler stuck on the event loop), exits hard. So the next run
never finds, and never adopts, the service of a run that died. A pipe works on any POSIX
system, unlike Linux's PR_SET_PDEATHSIG, and needs nothing from the served module.
"""

from __future__ import annotations

import os
import runpy
import signal
import stat
import sys
import threading
import time

GRACE_S = 5.0
"""Seconds between SIGTERM and the hard exit."""


def _stop_when_stdin_closes() -> None:
    while os.read(0, 4096):  # the parent never writes; b"" is end of file
        pass
    print(
        "[watch_parent] the parent's pipe closed (the process that started this one is "
        "gone): stopping",
        file=sys.stderr,
        flush=True,
    )
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)
    os._exit(1)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        sys.exit("usage: python -m seal.launch.watch_parent MODULE [ARG...]")
    if not stat.S_ISFIFO(os.fstat(0).st_mode):
        # Anything else (a terminal, /dev/null) would end the module at once or never.
        sys.exit("seal.launch.watch_parent: standard input must be its parent's pipe")
    threading.Thread(target=_stop_when_stdin_closes, name="watch-parent", daemon=True).start()
    sys.argv = [argv[0], *argv[1:]]
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
