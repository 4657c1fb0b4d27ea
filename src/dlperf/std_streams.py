"""The standard streams as a command finds them: closed at start (`dlperf ... >&-`), in an
encoding that lacks characters dlperf prints (`PYTHONIOENCODING=ascii`, a C locale with UTF-8
mode off), or a stderr whose writes fail (`2>/dev/full`). `settle_std_streams` makes them
writable before anything is printed."""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


def null_over(fd: int) -> None:
    """/dev/null over descriptor `fd`: what is written to it from now on (by Python, C code or a
    child started later) is lost, and no write fails."""
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:  # a closed `fd` is the lowest free one: /dev/null took it already
        os.dup2(null, fd)
        os.close(null)


def _held_open(fd: int) -> TextIO:
    """A stream for descriptor `fd`, which the command was started without (`dlperf ... >&-`):
    what is written to it is lost, and the command ends as it would with it open. It is held on
    /dev/null: a file opened (the run store) taking it got what C code or a child wrote."""
    try:
        os.fstat(fd)
    except OSError:  # closed: taken now, before any file could be
        null_over(fd)
    # Held for the process's life: over a descriptor it does not close, so that the collector
    # at exit does not warn "unclosed file" (a traceback under PYTHONWARNINGS=error).
    return open(os.open(os.devnull, os.O_WRONLY), "w", encoding="utf-8", closefd=False)


class _Stderr(io.FileIO):
    """Descriptor 2, for a reader who may be gone: a write that fails (ENOSPC on /dev/full or a
    full disk, EIO, EPIPE) raised OSError from whatever printed, a progress line or a warning,
    and that was taken as the command's own failure (a run stored `failed`, a bad input's exit
    code 2 told as 1). Like a closed pipe's, such a stderr goes quiet: /dev/null is put over
    descriptor 2 (what C code and later children write is lost too) and the work goes on."""

    def write(self, data: ReadableBuffer, /) -> int:
        try:
            return super().write(data)
        except OSError:
            with contextlib.suppress(OSError):
                null_over(self.fileno())
            return memoryview(data).nbytes  # taken, as /dev/null takes it


def rewrapped(made: io.TextIOWrapper, raw: io.FileIO) -> io.TextIOWrapper:
    """A text stream as Python `made` it (encoding, errors, buffering, `python -u`) over
    `raw`, a descriptor's FileIO of dlperf's own."""
    unbuffered = isinstance(made.buffer, io.FileIO)  # python -u
    return io.TextIOWrapper(
        raw if unbuffered else io.BufferedWriter(raw),
        encoding=made.encoding,
        errors=made.errors,
        line_buffering=made.line_buffering,
        write_through=made.write_through,
    )


def _quiet_on_failure(made: io.TextIOWrapper) -> TextIO:
    """sys.stderr as Python made it, over `_Stderr`."""
    made.flush()
    raw = _Stderr(made.fileno(), "w", closefd=False)  # Python's own stderr keeps descriptor 2
    raw.name = "<stderr>"
    return rewrapped(made, raw)


def _raises_on_lacking(stream: io.TextIOWrapper) -> bool:
    """Whether writing a character `stream`'s encoding lacks raises UnicodeEncodeError: under
    "strict", and under "surrogateescape" unless the encoding is UTF-8 (a C locale with UTF-8
    mode off, PYTHONUTF8=0, gives ASCII with it; with UTF-8 it only writes a file name's
    undecodable bytes back, and is kept)."""
    utf8 = codecs.lookup(stream.encoding).name == "utf-8"
    return stream.errors == "strict" or (stream.errors == "surrogateescape" and not utf8)


def settle_std_streams() -> None:
    """A stream closed at start is None in sys, and every print (rich's console too) would fail
    on it: it is held on /dev/null. A character stdout's encoding lacks (runs compare's Δ, a
    run's name under PYTHONIOENCODING=ascii) is written as an escape, as on stderr, not raised
    as UnicodeEncodeError; ascii:replace stays. Python's own stderr goes quiet where a write
    to it fails (`_Stderr`). A test's capture is left as it is."""
    if sys.stdout is None:
        sys.stdout = _held_open(1)
    if sys.stderr is None:
        sys.stderr = _held_open(2)
    if sys.stderr is sys.__stderr__ and isinstance(sys.stderr, io.TextIOWrapper):
        sys.stderr = _quiet_on_failure(sys.stderr)
    made = sys.stdout
    if made is sys.__stdout__ and isinstance(made, io.TextIOWrapper) and _raises_on_lacking(made):
        made.reconfigure(errors="backslashreplace")


def unread(stream: object) -> bool:
    """Whether `stream` is a pipe (or socket, terminal) with no room for a write now: its reader
    does not read. False where that cannot be asked (a test's capture, a platform without
    poll)."""
    import select

    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        poller = select.poll()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return False
    poller.register(fd, select.POLLOUT)
    return not poller.poll(0)


def holds(stream: TextIO, text: str) -> bool:
    """Whether `stream`'s encoding writes `text` as it is; True where its bytes cannot be
    reached (a test's StringIO)."""
    if not hasattr(stream, "buffer"):
        return True
    try:
        text.encode(stream.encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def close_document(stream: TextIO | None) -> None:
    """Close --json's stream (the CLI's `_name_stdout`): left to the collector at exit, its
    descriptor still open, it warned "ResourceWarning: unclosed file <stdout>" under -X dev, a
    traceback under PYTHONWARNINGS=error. The document was flushed whole
    (console.print_json); a flush failing here is one whose write already failed and was told."""
    if stream is not None:
        with contextlib.suppress(OSError, ValueError):  # closed all the same (io closes on error)
            stream.close()
