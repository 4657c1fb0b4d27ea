"""What the command line tells of a library that cannot load or memory that ran out: the
environment's problem (a memory limit, a broken installation), told in one line, not a
traceback. Holds no command."""

from __future__ import annotations

import traceback

from dlperf.blas import NO_ROOM, address_limit
from dlperf.errors import error_text, in_model_file, memory_limit

# The libraries whose own ImportError is told in one line with or without a memory limit: a
# broken installation of theirs is the environment's, which dlperf cannot fix.
LIBRARIES = ("torch", "torchvision")
# What glibc's loader says when mapping a shared object ran out of address space (and the
# strerror of ENOMEM), and dlperf.blas refusing SciPy; glibc's "cannot allocate memory in
# static TLS block" is no limit's doing.
_NO_ROOM = (
    "failed to map segment",
    "cannot map zero-fill pages",
    "cannot allocate memory",
    NO_ROOM,
)


def load_hint() -> str:
    """The likely cause of a library that cannot load: the address-space limit when one is
    set, a broken installation otherwise."""
    return memory_limit() or " (its installation may be broken: reinstall it)"


def memory_hint() -> str:
    """What an allocation that failed needs: the address-space limit raised, when one is set,
    else less asked for."""
    return memory_limit() or " (ask for less: a smaller data set, batch or model)"


def _loaded(e: BaseException, among: tuple[str, ...] | None) -> str | None:
    """The top package of the module whose import raised `e` (one of `among`, when given): the
    innermost module body running in its traceback that is neither dlperf's nor a model
    file's, else the module that importlib was loading when compiling it failed, else the
    extension that an ImportError names. None when `e` came from no such import."""
    found = None
    for frame, _ in traceback.walk_tb(e.__traceback__):
        if frame.f_code.co_name == "<module>" and not in_model_file(frame):
            name = str(frame.f_globals.get("__name__", ""))
        elif frame.f_code.co_name == "_find_and_load":  # importlib's; kept for non-ImportErrors
            name = str(frame.f_locals.get("name", ""))
        else:
            continue
        found = _library(name, among) or found
    if found is None and isinstance(e, ImportError) and e.name:  # an extension dlperf imports
        found = _library(e.name, among)
    return found


def _library(module: str, among: tuple[str, ...] | None) -> str | None:
    """The top package of `module` when it is a library's (one of `among`, when given)."""
    top = module.partition(".")[0]
    if top in ("", "__main__", "dlperf") or (among is not None and top not in among):
        return None
    return top


def _reason(e: BaseException) -> BaseException:
    """The ImportError that says why a library failed: the innermost of the chain that
    rewords it (NumPy's 25-line advice around "Original error was: ...")."""
    while isinstance(e, ImportError) and isinstance(e.__cause__, ImportError):
        e = e.__cause__
    return e


def _starved(e: BaseException) -> bool:
    """Whether `e` is what an import that ran out of the address space raises: the loader's
    words in an ImportError, a MemoryError, or a SystemError (an extension's init that ran
    out returns NULL without an exception set)."""
    if isinstance(e, ImportError):
        said = error_text(_reason(e)).lower()
        return any(words in said for words in _NO_ROOM) and "static tls" not in said
    return isinstance(e, MemoryError | SystemError)


def unloadable(e: BaseException, *, limited: bool) -> str | None:
    """The one line for a library whose own import raised `e`, or None. `limited`: under a
    set address-space limit, any library's import that ran out of room; otherwise torch's or
    torchvision's ImportError (an import that failed in dlperf's code or a model file's is
    their own bug, told as such)."""
    if limited:
        if address_limit() is None or not _starved(e):
            return None
    elif not isinstance(e, ImportError):
        return None
    lib = _loaded(e, None if limited else LIBRARIES)
    if lib is None:
        return None
    reason = _reason(e)
    text = error_text(reason)  # an exception whose own __str__ raises is told too
    said = text if isinstance(reason, ImportError) else type(reason).__name__
    if not isinstance(reason, ImportError) and text:
        said = f"{said}: {text}"
    return f"error: cannot load {lib}: {said}{load_hint()}"
