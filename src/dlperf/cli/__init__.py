"""Command-line interface: one thin function per command, grouped one module per command.

Heavy libraries (torch, torchvision, SciPy) are imported inside the commands so that
`dlperf --help` answers at once.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import importlib.abc
import importlib.machinery
import io
import os
import pkgutil
import select
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn, TextIO

from dlperf import stopping
from dlperf.cli.app import app, placed_after, state
from dlperf.cli.console import documents_only
from dlperf.cli.loads import memory_hint, unloadable
from dlperf.errors import (
    CheckFailed,
    UserError,
    error_said,
    error_text,
    exit_call,
    in_model_file,
    innermost,
    interrupted,
    model_frames,
    noted_where,
    out_of_memory,
)
from dlperf.parsing import one_line
from dlperf.paths import told, unnamed_cwd, writing
from dlperf.std_streams import close_document, rewrapped

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

# Every module here but app, console and loads holds commands; importing it registers them on `app`
# (in the modules' order, the order of `dlperf --help`).
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

# At exit the interpreter's last collection walks every object torch created (2-4 s of a
# command's end on this machine); nothing left needs collecting, so freeze it all first.
atexit.register(gc.freeze)


def say(line: str) -> None:
    """One line on stderr; a file name that is not UTF-8 (lone surrogates) shown escaped, on
    any stream (pytest's capture and some terminals encode strictly)."""
    print(line.encode("utf-8", "backslashreplace").decode("utf-8"), file=sys.stderr)


def _foreign_caller(e: SystemExit) -> str | None:
    """Where a user's model file raised `e` (a sys.exit in its forward), as file:line; None
    for any other exit (dlperf's own, rich's on a closed pipe)."""
    tb = innermost(e)
    if tb is None or not in_model_file(tb.tb_frame):
        return None
    return f"{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"


def _said_as_models(e: BaseException, own: bool = False) -> bool:
    """Tell `e` as the model's error, with its frames, where its traceback goes through a
    user's model file (the user's own bug: where to look is their code, not dlperf's or
    Typer's); False otherwise. `own`: not where dlperf's own code raised it, called from the
    model (its print to a closed standard output is the system's, told by its file)."""
    frames = model_frames(e)
    if not frames or (own and Path(frames[-1].filename).is_relative_to(_PACKAGE)):
        return False
    said = error_said(e)  # a model's exception whose own __str__ raises is told too
    where = f"{one_line(w)}: " if (w := noted_where(e)) else ""
    if out_of_memory(e):  # the machine's memory, at the model's line: both are said
        say(f"error: {where}the model ran out of memory: {one_line(said)}{memory_hint()}")
    else:
        say(f"error: {where}the model raised {one_line(said)}")
    for frame in traceback.format_list(frames):
        # A line of the model's source or a file name holding ESC or U+202E was printed raw,
        # rewriting the terminal, where the line above escapes them: each line escaped so.
        for line in frame.rstrip("\n").split("\n"):
            say(one_line(line))
    if frames[-1].name == "__getattr__" and not isinstance(e, AttributeError):
        # torch looks optional attributes up with getattr(module, NAME, default), which takes
        # only AttributeError as "none": a KeyError from a model's lookup table failed
        # analyze/export at torch's `parametrizations`, a name the model never used.
        say("(a module's __getattr__ must raise AttributeError for a name it does not hold)")
    say("(the whole traceback: dlperf --debug ...)")
    return True


_PACKAGE = Path(__file__).resolve().parents[1]  # dlperf's own code: src/dlperf

# How torch begins an error raised inside a TorchScript model (engine.checks.TORCHSCRIPT)
_TORCHSCRIPT = "The following operation failed in the TorchScript interpreter"


def _torchscript_error(e: BaseException) -> str | None:
    """The error a TorchScript model raised, where `e` is one: the last line of torch's
    message ("RuntimeError: mat1 and mat2 ...", "builtins.ValueError: ..." for a `raise` in
    its code, shown without "builtins."), after its TorchScript traceback; None otherwise."""
    lines = error_text(e).strip().splitlines()
    if not lines or not lines[0].startswith(_TORCHSCRIPT):
        return None
    return lines[-1].removeprefix("builtins.")


class _StandardOutput(io.FileIO):
    """File descriptor 1, its refused writes naming it: a write to a full disk or /dev/full
    (`dlperf runs list > FILE`) raises an OSError naming no file, which said only `error:
    cannot use: No space left on device`."""

    def write(self, data: ReadableBuffer, /) -> int:
        """All of `data`, or the error: the kernel may take part (a file size limit, a nearly
        full disk), and under `python -u` no buffer above asks for the rest, which was lost."""
        view = memoryview(data).cast("B")
        done = 0
        with writing("standard output"):
            while done < len(view):
                written = super().write(view[done:])
                if written is None:  # a non-blocking pipe, full: wait for room
                    select.select([], [self], [])
                    continue
                done += written
        return done


def _name_stdout(documents: bool) -> TextIO | None:
    """sys.stdout as Python made it, over `_StandardOutput`: the process's own stdout only (a
    test's capture, or the stand-in for one closed at start, is left as it is). With
    `documents` (--json), the stream for the one JSON document is returned, over a copy of
    descriptor 1, and descriptor 1 (sys.stdout with it) is stderr's for the rest of the
    process: what a user's model writes past sys.stdout (os.write(1, ...), C code, a child
    process, an atexit handler's print once the command ended) went after or into the
    document."""
    made = sys.stdout
    if made is not sys.__stdout__ or not isinstance(made, io.TextIOWrapper):
        return None
    made.flush()
    kept = os.dup(made.fileno()) if documents else None
    if kept is not None:
        os.dup2(sys.stderr.fileno(), made.fileno())

    def wrapped(fd: int) -> TextIO:
        raw = _StandardOutput(fd, "w", closefd=fd != made.fileno())
        raw.name = "<stdout>"
        return rewrapped(made, raw)

    sys.stdout = wrapped(made.fileno())
    return None if kept is None else wrapped(kept)


class _TorchNeedsCwd(importlib.abc.MetaPathFinder):
    """Refuses `import torch` from a working directory that cannot be named (`unnamed_cwd`),
    where oneMKL ends the process with "FATAL ERROR: Cannot load .../libtorch_cpu.so",
    blaming the library. Commands that need no torch (listing a store by its absolute path)
    still work there."""

    def __init__(self, what: str, fix: str) -> None:
        self.what = what
        self.fix = fix

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "torch":
            raise UserError(f"{self.what}, and torch cannot load there", self.fix)
        return None


def _check_cwd() -> None:
    """Guard torch's import when the working directory cannot be named: deleted, or deeper
    than PATH_MAX (checked once, at start: a system call or two)."""
    unnamed = unnamed_cwd()
    if unnamed is not None and "torch" not in sys.modules:
        sys.meta_path.insert(0, _TorchNeedsCwd(*unnamed))


def outcome() -> int:
    """Run the command that sys.argv names and return its exit code, each error told in one
    line. It raises nothing but the stop signal's one KeyboardInterrupt (dlperf.stopping):
    were anything else to escape, a stop signal landing during its propagation could not be
    told apart from it."""
    stream: TextIO | None = None
    try:
        documents = "--json" in sys.argv[1:]
        stream = _name_stdout(documents)
        _check_cwd()
        # Not standalone, so that Click's usage errors come here to be told in one line too
        # (standalone, Click prints its usage text around them); Typer still turns Ctrl-C
        # into exit code 130 and --help into 0, returned here.
        with documents_only(documents, stream):
            code = app(standalone_mode=False)
    except SystemExit as e:
        if (caller := _foreign_caller(e)) is not None:  # a user's model, mid-command
            say(
                f"error: {caller} called {exit_call(e)}({e.code!r}) (code that cannot go on "
                "should raise an exception)"
            )
            return 1
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except UserError as e:
        if state.debug:  # the traceback instead of the line, the same exit code
            traceback.print_exc()
            return e.exit_code
        say(f"error: {one_line(str(e))}")
        return e.exit_code
    except CheckFailed as e:
        say(f"check failed: {one_line(str(e))}")
        return e.exit_code
    except OSError as e:
        if not state.debug and _said_as_models(e, own=True):
            # Raised on the way through the model's code (its factory's OSError, its
            # forward's ConnectionError): its bug or its file, not a file dlperf uses
            return 1
        said, bad_input = told(e)
        if state.debug:
            traceback.print_exc()
        else:
            say(one_line(f"error: {said}"))
        return 2 if bad_input else 1
    except KeyboardInterrupt:  # the stop signal's, or a model's own: Ctrl-C either way
        raise
    except BaseException as e:  # a model's GeneratorExit, or its own BaseException subclass
        if interrupted(e) and not state.debug:  # outside a recording: still Ctrl-C's 130
            return 130
        if (code := _click_error(e)) is not None:
            return code
        if not state.debug and (line := unloadable(e, limited=True)):
            # Any library's import that ran out of a set address space, a model's too: the
            # environment's problem, not the input's nor the model's.
            say(one_line(line))
            return 1
        if not state.debug and _said_as_models(e):
            return 1
        if not state.debug and (raised := _torchscript_error(e)):
            # A TorchScript model's own error: no Python frame of its file to show
            say(f"error: the model raised {one_line(raised)}")
            say("(inside its TorchScript code; the whole traceback: dlperf --debug ...)")
            return 1
        if not state.debug and (line := unloadable(e, limited=False)):
            # torch's or torchvision's broken installation: the environment's, not the input's.
            say(one_line(line))
            return 1
        if not state.debug and out_of_memory(e):  # where no check of dlperf's expected it
            said = error_text(e) or type(e).__name__  # a MemoryError says nothing of itself
            say(one_line(f"error: out of memory: {said}{memory_hint()}"))
            return 1
        traceback.print_exc()  # as Python would print it, and its exit code
        return 1
    finally:
        close_document(stream)
    return code if isinstance(code, int) else 0  # Typer's exit code, or a command's None


def _click_error(e: BaseException) -> int | None:
    """Click's own errors (Typer vendors Click, so they are matched by shape, not class) in one
    line, and their exit code; None for any other exception."""
    kind = type(e).__name__
    if kind == "Abort":  # end of input at a prompt
        say("Aborted!")
        return 1
    if not (hasattr(e, "format_message") and isinstance(getattr(e, "exit_code", None), int)):
        return None
    if kind == "NoArgsIsHelpError":  # `dlperf runs` alone: its help, as standalone Click
        e.show()  # type: ignore[attr-defined]
    elif (placed := placed_after(e)) is not None:
        say(placed)
    else:  # an unknown option, a value of the wrong type, a missing argument
        ctx = getattr(e, "ctx", None)
        see = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        say(one_line(f"error: {e.format_message()}{see}"))
    return int(e.exit_code)  # type: ignore[attr-defined]


def main() -> NoReturn:
    """`dlperf`: the command, ended by a stop signal as dlperf.stopping describes."""
    stopping.run(outcome)
