"""dlperf.deploy.batcher on its own: a fake model call (a Python function), no server.
(The drain on close and the one-by-one rerun of a failed batch are in test_server.py.)"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from dlperf.deploy.batcher import Batcher, QueueFull

T = TypeVar("T")
WAIT_S = 20.0  # generous: the tests wait on events, this only bounds a hang


def run_async(scenario: Callable[[], Awaitable[T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), timeout=WAIT_S)

    return asyncio.run(bounded())


class Gated:
    """A model call that records each batch and blocks until `gate` opens (so that requests
    pile up behind the batch it runs)."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self.started = threading.Event()
        self.gate = threading.Event()

    def __call__(self, payloads: list[Any]) -> list[Any]:
        self.calls.append(list(payloads))
        self.started.set()
        assert self.gate.wait(WAIT_S), "the test never opened the gate"
        return [p * 10 for p in payloads]


def test_requests_arriving_during_a_batch_share_the_next_call() -> None:
    model = Gated()
    seen: list[tuple[int, float]] = []

    async def scenario() -> list[Any]:
        # A 30 s wait: each batch below can only go at once because it fills max_batch.
        batcher = Batcher(
            model,
            max_batch=3,
            max_wait_s=30,
            queue_size=8,
            on_batch=lambda r, s: seen.append((r, s)),
        )
        batcher.start()
        first = asyncio.ensure_future(batcher.submit(1, rows=3))
        await asyncio.to_thread(model.started.wait, WAIT_S)
        later = [asyncio.ensure_future(batcher.submit(p)) for p in (2, 3, 4)]
        await asyncio.sleep(0)
        assert batcher.depth == 3  # waiting behind the running batch, which is not counted
        model.gate.set()
        results = await asyncio.gather(first, *later)
        await batcher.close()
        return results

    assert run_async(scenario) == [10, 20, 30, 40]
    assert model.calls == [[1], [2, 3, 4]]
    # on_batch hears each batch's rows (the first request alone was 3 rows) and its time
    assert [rows for rows, _ in seen] == [3, 3]
    assert all(seconds >= 0 for _, seconds in seen)


def test_a_lone_request_runs_once_max_wait_is_up() -> None:
    calls: list[list[int]] = []

    def run(payloads: list[int]) -> list[int]:
        calls.append(payloads)
        return [p + 1 for p in payloads]

    async def scenario() -> int:
        batcher = Batcher(run, max_batch=64, max_wait_s=0.01, queue_size=8)
        batcher.start()
        try:
            return int(await batcher.submit(41))  # never fills the batch, never closed first
        finally:
            await batcher.close()

    assert run_async(scenario) == 42
    assert calls == [[41]]


def test_a_full_queue_refuses_with_its_reason() -> None:
    async def scenario() -> None:
        batcher = Batcher(lambda p: p, max_batch=4, max_wait_s=30, queue_size=2)  # not started
        waiting = [asyncio.ensure_future(batcher.submit(i)) for i in range(2)]
        await asyncio.sleep(0)
        assert batcher.depth == 2
        with pytest.raises(QueueFull, match=r"^the request queue is full$"):
            await batcher.submit(3)
        for w in waiting:
            w.cancel()
        await batcher.close()

    run_async(scenario)


def test_running_is_true_only_between_start_and_close() -> None:
    async def scenario() -> list[bool]:
        batcher = Batcher(lambda p: p, max_batch=4, max_wait_s=30, queue_size=2)
        states = [batcher.running]
        batcher.start()
        states.append(batcher.running)
        await batcher.close()
        states.append(batcher.running)
        return states

    assert run_async(scenario) == [False, True, False]


def test_a_stopped_batcher_is_not_ready_but_runs_what_still_comes_at_once() -> None:
    """`stop` (the server's stop signal): the batcher says it is not ready, a batch waiting
    for company runs at once, and a request taken after the stop (one that had arrived,
    read from its connection after it) runs at once too; only `close` refuses."""
    calls: list[list[int]] = []

    def run(payloads: list[int]) -> list[int]:
        calls.append(payloads)
        return [p + 1 for p in payloads]

    async def scenario() -> tuple[bool, list[int]]:
        # A wait past WAIT_S: only the stop lets either request run within it.
        batcher = Batcher(run, max_batch=4, max_wait_s=10 * WAIT_S, queue_size=2)
        batcher.start()
        before = asyncio.ensure_future(batcher.submit(1))
        await asyncio.sleep(0)
        batcher.stop()
        ready = batcher.running
        results = [await before, await batcher.submit(2)]
        await batcher.close()
        with pytest.raises(QueueFull, match=r"^the server is shutting down$"):
            await batcher.submit(3)
        return ready, results

    assert run_async(scenario) == (False, [2, 3])
    assert calls == [[1], [2]]


def test_a_request_whose_client_gave_up_is_not_computed() -> None:
    model = Gated()

    async def scenario() -> list[Any]:
        batcher = Batcher(model, max_batch=2, max_wait_s=30, queue_size=8)
        batcher.start()
        busy = asyncio.ensure_future(batcher.submit(1, rows=2))
        await asyncio.to_thread(model.started.wait, WAIT_S)
        abandoned = asyncio.ensure_future(batcher.submit(2))
        kept = [asyncio.ensure_future(batcher.submit(p)) for p in (3, 4)]
        await asyncio.sleep(0)
        abandoned.cancel()  # the client hung up while queued
        model.gate.set()
        results = await asyncio.gather(busy, *kept)
        await batcher.close()
        return results

    assert run_async(scenario) == [10, 30, 40]
    assert model.calls == [[1], [3, 4]]  # 2 dropped, not run


def test_a_request_larger_than_max_batch_runs_alone() -> None:
    calls: list[list[str]] = []

    def run(payloads: list[str]) -> list[str]:
        calls.append(payloads)
        return [p.upper() for p in payloads]

    async def scenario() -> list[Any]:
        batcher = Batcher(run, max_batch=4, max_wait_s=30, queue_size=8)
        batcher.start()
        waiting = [
            asyncio.ensure_future(batcher.submit(p, rows=r))
            for p, r in (("a", 1), ("big", 9), ("b", 1), ("c", 2))
        ]
        await asyncio.sleep(0)
        await batcher.close()  # drains in arrival order without waiting out max_wait
        return await asyncio.gather(*waiting)

    assert run_async(scenario) == ["A", "BIG", "B", "C"]
    assert calls == [["a"], ["big"], ["b", "c"]]


def test_a_single_request_that_fails_gets_the_models_exception() -> None:
    class Refused(Exception):
        pass

    def run(payloads: list[int]) -> list[int]:
        raise Refused(f"cannot take {payloads}")

    async def scenario() -> None:
        batcher = Batcher(run, max_batch=4, max_wait_s=30, queue_size=8)
        batcher.start()
        waiting = asyncio.ensure_future(batcher.submit(7))
        await asyncio.sleep(0)
        await batcher.close()
        with pytest.raises(Refused, match=r"cannot take \[7\]"):
            await waiting

    run_async(scenario)
