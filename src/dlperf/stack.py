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


def _soft() -> int | None:
    """The soft stack limit in bytes; None where there is none (unlimited, or not POSIX)."""
    try:
        import resource
    except ImportError:  # not POSIX: no stack limit to read
        return None
    soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def holds() -> tuple[int, int] | None:
    """(the stack limit in KiB, the Python frames it holds) where the soft stack limit is
    under NEEDED, which `fit_recursion` could not raise it to (the hard limit caps it): a
    recursion limit above those frames crashes the process (SIGSEGV, nothing said) before a
    deep enough recursion reaches it. None where the limit is NEEDED or more, or none: Python's
    own limits are sized for that stack, and no recursion limit is fitted to it. Measured under
    `ulimit -s 1024` (holds 1587): `analyze` of a model nested 1,202 deep, its limit raised in
    the model file, ended in a RecursionError up to 2,400 and crashed at 3,000."""
    soft = _soft()
    if soft is None or soft >= NEEDED:
        return None
    return soft // 1024, max(FLOOR, (soft - RESERVE) // FRAME_BYTES)


def fit_recursion() -> None:
    """Raise a soft stack limit under NEEDED toward it (the hard limit caps it). Linux grows
    the main thread's stack up to the limit in force when it faults, so the raise covers this
    process's main thread, and the threads Python starts later get as much (threading's
    stack size; glibc sized its default from the limit at start-up). Where the hard limit is
    under NEEDED too, lower Python's recursion limit to the frames the stack there `holds`,
    so that a recursion too deep for it raises RecursionError instead of crashing."""
    import resource  # `_soft` read it: POSIX

    soft = _soft()
    if soft is None or soft >= NEEDED:
        return
    hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
    wanted = NEEDED if hard == resource.RLIM_INFINITY else min(hard, NEEDED)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_STACK, (wanted, hard))
        except (ValueError, OSError):  # a container's seccomp policy: the limit stays
            pass
        else:
            if threading.stack_size() == 0:  # not the user's own choice
                threading.stack_size(wanted)
    held = holds()
    if held is not None and held[1] < sys.getrecursionlimit():
        sys.setrecursionlimit(held[1])


def too_small(frames: int) -> str | None:
    """What stops a recursion limit of `frames` (a deep model needs) where the stack limit
    cannot hold them (`holds`): raising the recursion limit alone there crashes the process
    with nothing said (a model 1,202 deep under `ulimit -s 1024`, its limit raised to 9,000 as
    the advice said), so the stack limit, in KiB as `ulimit -s` sets it, is named and the
    value that holds them; None where the stack holds them, or is not fitted."""
    held = holds()
    if held is None or frames <= held[1]:
        return None
    kib, most = held
    # As `holds` counts, rounded up to whole MiB, and never under the usual 8 MiB
    enough = max(NEEDED, frames * FRAME_BYTES + RESERVE)
    raise_to = -(-enough // 2**20) * 1024
    return (
        f"raise the stack limit first: ulimit -s {kib} (KiB) holds about {most} of Python's "
        f"frames, and a recursion limit above that crashes the process; ulimit -s {raise_to} "
        "or more (in a new shell: ulimit -s sets the hard limit too, which caps it), then in "
        f"the model file: import sys; sys.setrecursionlimit({frames})"
    )
