"""The server's log lines, written by a thread of their own (`unblocked`).

uvicorn's loggers wrote each line from the event loop's thread, to stderr: a stderr that is a
pipe nobody reads (a supervisor that does not drain logs, `dlperf serve ... 2>&1 | slow`) filled
up, and the loop blocked in the write. The server answered nothing, and no stop signal ended it:
uvicorn's handler only sets a flag that the blocked loop never read (round 48). Here the loop
hands each line to a bounded queue and goes on; a writer thread writes them. While the reader
lags the queue fills, and the lines past it are dropped and counted: the count is said in one
line once the writer catches up.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import IO

from dlperf.deploy.batcher import server_threads, started

# uvicorn's loggers, whose handlers (its dictConfig's, on stderr and stdout) are replaced.
LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
# Lines waiting for the writer at most; later ones are dropped while the queue is full.
QUEUED_LINES = 1024
# How long a stop waits for the lines still queued, as long as none is written in that time
# (a pipe nobody reads takes none): a reader that reads is given every line.
STALL_S = 1.0


class Writer:
    """A daemon thread that writes lines to their streams; `put` never blocks."""

    def __init__(self, lines: int = QUEUED_LINES) -> None:
        self.queue: queue.Queue[tuple[IO[str], str] | None] = queue.Queue(lines)
        self.dropped = 0  # lines dropped since the last said
        self.lock = threading.Lock()
        self.written_at = time.monotonic()  # when a line was last written
        self.thread = threading.Thread(target=self._run, name="serve-log", daemon=True)
        with server_threads():
            self.thread.start()
        started([self.thread])

    def put(self, stream: IO[str], line: str) -> None:
        try:
            self.queue.put_nowait((stream, line))
        except queue.Full:
            with self.lock:
                self.dropped += 1

    def _run(self) -> None:
        while (item := self.queue.get()) is not None:
            stream, line = item
            _write(stream, line)
            self.written_at = time.monotonic()
            with self.lock:
                dropped, self.dropped = self.dropped, 0
            if dropped:
                _write(stream, f"warning: {dropped:,} log lines dropped: stderr was not read\n")
            self.queue.task_done()
        self.queue.task_done()

    def close(self) -> None:
        """End the thread once the lines queued are written (not at all while it blocks)."""
        with suppress(queue.Full):
            self.queue.put_nowait(None)

    def drain(self, stall_s: float = STALL_S) -> bool:
        """Wait for the lines queued to be written, while one is written every `stall_s` at
        least; True if all were."""
        while self.queue.unfinished_tasks:
            if time.monotonic() - self.written_at > stall_s:
                return False
            time.sleep(0.01)
        return True


def _write(stream: IO[str], line: str) -> None:
    """`line` on `stream`: on its file descriptor where it has one, past its Python buffer,
    whose lock a write blocked for good would hold (the main thread's last flush at exit then
    waited on it for ever)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's capture)
        with suppress(Exception):
            stream.write(line)
            stream.flush()
        return
    encoding = getattr(stream, "encoding", None) or "utf-8"
    data = line.encode(encoding, "backslashreplace")
    while data:
        try:
            data = data[os.write(fd, data) :]
        except InterruptedError:
            continue
        except OSError:  # a closed pipe: nobody reads the lines
            return


class _Queued(logging.Handler):
    """`handler`'s lines, formatted as it formats them, handed to the writer."""

    def __init__(self, handler: logging.StreamHandler[IO[str]], writer: Writer) -> None:
        super().__init__(handler.level)
        self.handler = handler
        self.writer = writer
        self.filters = handler.filters

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.handler.format(record) + self.handler.terminator
        except Exception:
            self.handleError(record)
            return
        self.writer.put(self.handler.stream, line)


@contextmanager
def unblocked(writer: Writer | None = None) -> Iterator[Writer]:
    """uvicorn's stream handlers (and logging's last resort, asyncio's) write through `writer`
    (a new one if None) while the block runs; at its end they are put back, and the lines
    still queued are waited for (`Writer.drain`)."""
    writer = Writer() if writer is None else writer
    replaced: list[tuple[logging.Logger, int, logging.Handler]] = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for i, handler in enumerate(logger.handlers):
            if type(handler) is logging.StreamHandler:  # a FileHandler's file never fills
                replaced.append((logger, i, handler))
                logger.handlers[i] = _Queued(handler, writer)
    last_resort = logging.lastResort
    if isinstance(last_resort, logging.StreamHandler):
        logging.lastResort = _Queued(last_resort, writer)
    try:
        yield writer
    finally:
        logging.lastResort = last_resort
        for logger, i, handler in replaced:
            logger.handlers[i] = handler
        if writer.drain():
            writer.close()
