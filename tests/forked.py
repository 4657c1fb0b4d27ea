"""Real `dlperf` processes without a fresh interpreter's imports, for the tests whose point is a
process of its own (its pid, a signal to it, its exit code) but not how an interpreter starts.

A `python -m dlperf` start costs 6-8 CPU-s here before the command does anything: torch, and
torch._dynamo, which an optimizer's first step imports. Forked straight from a pytest worker,
a child skips them, but it hangs at its first parallel region with more than one thread where
the worker ran one before (GNU OpenMP's thread pool does not survive fork: measured here, a
2-thread matmul in the child waited forever; every `dlperf` command with run.threads unset runs
on all the usable cores). So the children are forked by multiprocessing's fork server: one
process per pytest worker, started on first use, that imports torch, torch._dynamo and
dlperf's entry point and never computes; each child of it starts with those imported, no
OpenMP pool, and the signal actions of a fresh interpreter. The server ends with its worker.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import sys
from multiprocessing.process import BaseProcess
from pathlib import Path

SERVER = multiprocessing.get_context("forkserver")
SERVER.set_forkserver_preload(["torch", "torch._dynamo", "dlperf.__main__", "dlperf.cli"])


def _child(
    args: list[str], cwd: Path, env: dict[str, str], err: Path, out: Path | None, session: bool
) -> None:
    """`dlperf ARGS` through `python -m dlperf`'s entry point, in the fork server's child."""
    # The server's environment is the one it started in: the test's, as it is now, instead
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    if session:
        os.setsid()
    os.dup2(os.open(out or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
    os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115  (the child's own)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    faulthandler.enable(sys.stderr)  # a SIGABRT's stacks to `err`
    sys.argv = ["dlperf", *args]
    from dlperf.__main__ import main

    main()


def dlperf_process(
    args: list[str],
    err: Path,
    out: Path | None = None,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    session: bool = False,
) -> BaseProcess:
    """A real `dlperf ARGS` process, started, not waited for: in `cwd` (this process's
    directory by default), with this process's environment and `env` over it (a value of ""
    removes the name), its stderr to `err` and its stdout to `out` (or /dev/null), in a
    session of its own with `session` (a signal to its group reaches it and its children, as a
    terminal's does). Where a fresh interpreter is what is tested (its imports, its streams or
    encoding as it starts), start `python -m dlperf` instead."""
    environ = dict(os.environ)
    for key, value in (env or {}).items():
        if value == "":
            environ.pop(key, None)
        else:
            environ[key] = value
    proc = SERVER.Process(target=_child, args=(args, cwd or Path.cwd(), environ, err, out, session))
    proc.start()
    return proc
