"""Dynamic micro-batching: concurrent requests share one model call.

Requests wait in a bounded queue. The worker takes the oldest, then waits at most
`max_wait_s` for more, up to `max_batch` rows, and runs the lot in one call on a single
inference thread, so the event loop keeps accepting requests while the model runs. The
answers go back to each request's future in order; when a batch fails, its requests run
again one by one, so that one bad request cannot fail the others. A stopping server first tells
the batcher to run what comes at once (`stop`), then, once its connections are done,
closes it: closing stops new work and drains what is queued, so a graceful shutdown loses no
accepted request.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dlperf.errors import NoThreads, limit_words, out_of_threads, threads_limit


@contextmanager
def server_threads() -> Iterator[None]:
    """Within the block, a thread the host refuses to start (`ulimit -u`, or `ulimit -v`
    leaving no room for its stack) is the server's one line, exit 1: the batcher's, the
    decoders' and the log writer's (`serve_log.Writer`) alike."""
    try:
        yield
    except RuntimeError as e:
        if not out_of_threads(e):
            raise
        raise NoThreads(
            "the server could not start its threads", threads_limit(", or lower --threads")
        ) from None


def start_threads(executor: ThreadPoolExecutor, threads: int) -> None:
    """Start `executor`'s `threads` threads now, not one at a time as tasks come: a process
    that cannot start them (`ulimit -u`) is refused in one line before it says it serves,
    rather than answering 500 with a traceback at every request."""
    go = threading.Event()
    try:
        with server_threads():
            for _ in range(threads):
                executor.submit(go.wait)  # each held: the next task needs a thread of its own
    finally:
        go.set()
    started(executor._threads)  # the executor's own set of its threads


def started(threads: Iterable[threading.Thread]) -> None:
    """Every one of `threads` runs. One whose start-up failed (a MemoryError under `ulimit -v`,
    as it set itself up) left its `start()` waiting for ever, and `serve` hung with no line;
    `stopping` now ends that wait, the thread not alive, and it is the server's one line here,
    exit 1, before it says it serves."""
    if all(thread.is_alive() for thread in threads):
        return
    short = limit_words() or "the host is short of memory"
    raise NoThreads("the server could not start its threads", f"one ran out of memory: {short}")


class QueueFull(Exception):
    """The queue holds `queue_size` requests already, or the batcher is closing; the
    message says which."""


@dataclass
class _Job:
    payload: Any
    rows: int
    future: asyncio.Future[Any]


class Batcher:
    """`run(payloads) -> results` (one result per payload, same order) runs in a worker
    thread; `on_batch(rows, seconds)` is told each batch's size and run time."""

    def __init__(
        self,
        run: Callable[[list[Any]], list[Any]],
        max_batch: int,
        max_wait_s: float,
        queue_size: int,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        self.run = run
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.queue_size = queue_size
        self.on_batch = on_batch
        self._pending: deque[_Job] = deque()
        self._arrived = asyncio.Event()
        self._stopping = False  # the server stops: nobody else is coming, no batch waits
        self._closing = False  # no request is taken any more
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inference")
        start_threads(self._executor, 1)
        self._worker: asyncio.Task[None] | None = None

    @property
    def depth(self) -> int:
        """Requests waiting for a batch (not counting the batch being run)."""
        return len(self._pending)

    @property
    def running(self) -> bool:
        return self._worker is not None and not self._worker.done() and not self._stopping

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._loop())

    async def submit(self, payload: Any, rows: int = 1) -> Any:
        """Queue one request of `rows` rows and wait for its result."""
        if self._closing:
            raise QueueFull("the server is shutting down")
        if len(self._pending) >= self.queue_size:
            raise QueueFull("the request queue is full")
        job = _Job(payload, rows, asyncio.get_running_loop().create_future())
        self._pending.append(job)
        self._arrived.set()
        return await job.future

    def stop(self) -> None:
        """The server stops: a batch no longer waits --max-wait-ms for company, and the batcher
        says it is not ready, but it still takes the requests already arriving (read from
        their connections after the stop), until `close`."""
        self._stopping = True
        self._arrived.set()

    async def close(self) -> None:
        """Refuse new requests, finish the queued ones, stop the worker thread."""
        self._closing = True
        self.stop()
        if self._worker is not None:
            await self._worker
        self._executor.shutdown(wait=True)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._pending:
                if self._closing:
                    return
                self._arrived.clear()
                await self._arrived.wait()
            deadline = loop.time() + self.max_wait_s
            # A stopping batcher drains at once: nobody else is coming.
            while sum(job.rows for job in self._pending) < self.max_batch and not self._stopping:
                self._arrived.clear()
                try:  # a deadline already past times out at once
                    await asyncio.wait_for(self._arrived.wait(), deadline - loop.time())
                except TimeoutError:
                    break
            batch = self._take()
            if batch:
                await self._run(loop, batch)

    def _take(self) -> list[_Job]:
        """The oldest jobs up to max_batch rows (at least one: a big request runs alone);
        requests whose client gave up are dropped here rather than computed."""
        batch: list[_Job] = []
        rows = 0
        while self._pending:
            job = self._pending[0]
            if batch and rows + job.rows > self.max_batch:
                break
            self._pending.popleft()
            if not job.future.done():
                batch.append(job)
                rows += job.rows
        return batch

    async def _run(self, loop: asyncio.AbstractEventLoop, batch: list[_Job]) -> None:
        start = loop.time()
        try:
            results = await loop.run_in_executor(
                self._executor, self.run, [job.payload for job in batch]
            )
        except Exception as e:
            if len(batch) > 1:
                # One request's input may be what the model refused: run each request alone,
                # so that only those the model fails on hear the error.
                for job in batch:
                    await self._run(loop, [job])
            elif not batch[0].future.done():
                batch[0].future.set_exception(e)
            return
        if self.on_batch is not None:
            self.on_batch(sum(job.rows for job in batch), loop.time() - start)
        for job, result in zip(batch, results, strict=True):
            if not job.future.done():
                job.future.set_result(result)
