"""Command-line interface: one thin function per command, grouped one module per command.

Heavy libraries (torch, torchvision, SciPy) are imported inside the commands so that
`dlperf --help` answers at once.
"""

from __future__ import annotations

import atexit
import errno
import gc
import importlib
import pkgutil
import signal
import sys
from typing import Any

from dlperf.cli.app import app, state
from dlperf.errors import CheckFailed, UserError, interrupted

# Every module here but app and console holds commands; importing it registers them on `app`
# (in the modules' order, the order of `dlperf --help`).
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

# A path the user named that cannot be used is bad input; anything else the OS refuses
# (a full disk, an I/O error) is not, but still deserves one line rather than a traceback.
_BAD_PATH = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR}


# At exit the interpreter's last collection walks every object torch created (2-4 s of a
# command's end on this machine); nothing left needs collecting, so freeze it all first.
atexit.register(gc.freeze)


def _terminate(signum: int, frame: Any) -> None:
    """A scheduler's SIGTERM stops a command as Ctrl-C does, so its runs end `killed`."""
    raise KeyboardInterrupt


def _say(line: str) -> None:
    """One line on stderr; a file name that is not UTF-8 (lone surrogates) shown escaped, on
    any stream (pytest's capture and some terminals encode strictly)."""
    print(line.encode("utf-8", "backslashreplace").decode("utf-8"), file=sys.stderr)


def main() -> None:
    # A shell starts background jobs with SIGINT ignored, and Python keeps that: restore it,
    # so Ctrl-C (or a test's SIGINT) always stops the command. Typer turns the resulting
    # KeyboardInterrupt into exit code 130 once each `with store.recording(...)` has marked
    # its run killed.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        app()
    except UserError as e:
        if state.debug:
            raise
        _say(f"error: {e}")
        sys.exit(e.exit_code)
    except CheckFailed as e:
        _say(f"check failed: {e}")
        sys.exit(e.exit_code)
    except OSError as e:
        if state.debug:
            raise
        where = f" {e.filename}" if e.filename else ""
        _say(f"error: cannot use{where}: {e.strerror or e}")
        sys.exit(2 if e.errno in _BAD_PATH else 1)
    except Exception as e:
        if interrupted(e) and not state.debug:  # outside a recording: still Ctrl-C's 130
            sys.exit(130)
        raise
