"""The C stack a deep recursion needs, under a small stack limit (`ulimit -s`): fitted as
`dlperf` is imported (the command line, the API, every child), so that a deeply nested model
ends in a RecursionError, which dlperf says in a line, instead of a segmentation fault that
says nothing.

Python's recursion limit counts Python frames and trusts the C stack to hold them: torch's
`Module.__call__` costs C stack at each nesting level, and under `ulimit -s 256` a model 300
`nn.Sequential`s deep crashed the process (SIGSEGV, exit 139) before Python's limit of 1000
was reached. Measured on Linux x86-64, Python 3.11, in frames of the deepest nesting that
ends in a RecursionError rather than a crash, for a nested module's forward (the costliest
of those tried: `named_modules`, a Python `__call__` re-entered through C, `deepcopy` and
`repr` cost less): 268 at 128 KiB, 565 at 256 KiB, 1159 at 512 KiB, about 441 bytes a
frame and 13 KiB below the first.
"""

from __future__ import annotations

import sys
import threading

# A soft limit under this is raised toward it: Linux's default, and what Python's default
# recursion limit of 1000 is commonly sized for.
NEEDED = 8 * 2**20
# The C stack counted per Python frame where the limit cannot be raised (the hard limit is
# small too): the 441 bytes measured with room for C code that takes more, and the stack the
# interpreter and the command line use below the first frame.
FRAME_BYTES = 640
RESERVE = 32 * 2**10
# Never lowered under this: dlperf's own commands go this deep (a `dlperf run` of digits
# needed 220-300 frames, typer's and importlib's among them), and a run that worked under a
# small stack limit before must not fail now. Under about 190 KiB a deep model can still
# crash the process; a normal one works, as before.
FLOOR = 400
# (the stack limit in KiB, the recursion limit it was lowered to) once `fit_recursion` lowered
# it: the advice to raise the recursion limit would crash the process there.
_lowered: tuple[int, int] | None = None


def fit_recursion() -> None:
    """Raise a soft stack limit under NEEDED toward it (the hard limit caps it). Linux grows
    the main thread's stack up to the limit in force when it faults, so the raise covers this
    process's main thread, and the threads Python starts later get as much (threading's
    stack size; glibc sized its default from the limit at start-up). Where the hard limit is
    under NEEDED too, lower Python's recursion limit in proportion to the stack there is, so
    that a recursion too deep for it raises RecursionError instead of crashing."""
    try:
        import resource
    except ImportError:  # not POSIX: no stack limit to read
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft == resource.RLIM_INFINITY or soft >= NEEDED:
        return
    wanted = NEEDED if hard == resource.RLIM_INFINITY else min(hard, NEEDED)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_STACK, (wanted, hard))
        except (ValueError, OSError):  # a container's seccomp policy: the limit stays
            pass
        else:
            soft = wanted
            if threading.stack_size() == 0:  # not the user's own choice
                threading.stack_size(wanted)
    if soft >= NEEDED:
        return
    fitted = max(FLOOR, (soft - RESERVE) // FRAME_BYTES)
    if fitted < sys.getrecursionlimit():
        global _lowered
        sys.setrecursionlimit(fitted)
        _lowered = (soft // 1024, fitted)


def lowered() -> str | None:
    """What a RecursionError's line says of the stack where `fit_recursion` lowered Python's
    recursion limit to fit it (raising the recursion limit there crashes the process, the
    stack limit must rise first); None where it did not."""
    if _lowered is None:
        return None
    kib, limit = _lowered
    return (
        f"ulimit -s {kib} is too low for a deeper recursion (it held Python's recursion "
        f"limit to {limit}): raise it, e.g. ulimit -s 8192"
    )
