"""Break-it round 50, fixer G4: scale workers under a memory limit (`ulimit -v`).

T3 C3: under `ulimit -v 3400000` each DDP worker raised MemoryError while DDP lazily imported
torch._dynamo, before any batch trained, and the worker worded every out-of-memory error as
the batch's: "out of memory at per-worker batch 16: MemoryError", naming neither the limit nor
its fix; `scale max-batch` then concluded "largest per-worker batch that fits: None; stopped
by memory ... at per-worker batch 32". Now a MemoryError under a set address-space limit names
the limit and its fix, in the words a plain run's error uses ("(a memory limit, ulimit -v N
may be too low)"); one raised before the rank drew a batch, or in an import, is the limit's,
not the batch's: the point fails not for memory, and max-batch says the limit stopped it
("none found" where no size fitted, not Python's None) and exits 1.

Cheap seams, no torchrun under a real limit: the worker's wording function under a limit
faked through resource.getrlimit, and the study's launch faked to leave what such a worker
leaves (its one line in rank-0.failure).
"""

from __future__ import annotations

import json
import resource
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.distributed import study, worker
from dlperf.distributed.contracts import WorkerSpec
from dlperf.distributed.launch import Launch

LIMIT_KIB = 3_400_000
HINT = f" (a memory limit, ulimit -v {LIMIT_KIB} may be too low)"


def _limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """An address-space limit of LIMIT_KIB, as `ulimit -v` sets it, to dlperf's eyes only."""
    real = resource.getrlimit

    def getrlimit(which: int) -> tuple[int, int]:
        if which == resource.RLIMIT_AS:
            return LIMIT_KIB * 1024, LIMIT_KIB * 1024
        return real(which)

    monkeypatch.setattr(resource, "getrlimit", getrlimit)


def _raised(code: str) -> MemoryError:
    """The MemoryError that `code`, run as a module's body, raises (an import that ran out)."""
    try:
        exec(compile(code, "starved_module.py", "exec"), {})
    except MemoryError as e:
        return e
    raise AssertionError("no MemoryError")


def _memory_error() -> MemoryError:
    try:
        raise MemoryError()
    except MemoryError as e:
        return e


def test_a_limit_that_ran_out_before_any_batch_is_named_not_the_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _limit(monkeypatch)
    monkeypatch.setattr(worker, "_drawn", False)  # no batch drawn yet: DDP's lazy import
    assert worker.memory_failure(_memory_error(), 16) == (
        f"a worker ran out of memory before per-worker batch 16 trained: MemoryError{HINT}",
        False,
    )
    # Drawn, but raised in an import (a lazy import in the first step): the limit's still.
    monkeypatch.setattr(worker, "_drawn", True)
    assert worker.memory_failure(_raised("raise MemoryError"), 16) == (
        f"a worker ran out of memory before per-worker batch 16 trained: MemoryError{HINT}",
        False,
    )


def test_the_batchs_own_out_of_memory_names_the_limit_only_where_one_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _limit(monkeypatch)
    monkeypatch.setattr(worker, "_drawn", True)
    assert worker.memory_failure(_memory_error(), 512) == (
        f"out of memory at per-worker batch 512: MemoryError{HINT}",
        True,
    )
    # The memory cap's MemoryError is the cap's, not the limit's, even under one.
    cap = worker.OverCap("peak memory 3.00 GiB is above the cap of 2.00 GiB")
    assert worker.memory_failure(cap, 512) == (
        "out of memory at per-worker batch 512: peak memory 3.00 GiB is above the cap of 2.00 GiB",
        True,
    )
    monkeypatch.undo()  # no limit: as before, whenever it was raised
    monkeypatch.setattr(worker, "_drawn", False)
    assert worker.memory_failure(_memory_error(), 16) == (
        "out of memory at per-worker batch 16: MemoryError",
        True,
    )


def test_max_batch_says_the_limit_stopped_it_and_concludes_no_size(
    cli: Callable, tiny_exp: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.MonkeyPatch.context() as worker_side:  # the store and the study: no limit
        _limit(worker_side)
        worker_side.setattr(worker, "_drawn", False)
        line, _ = worker.memory_failure(_memory_error(), 32)

    def run_torchrun(directory: Path, nproc: int, *args: object, **kwargs: object) -> Launch:
        # What the worker leaves (fail_in_one_line) where the limit stopped it
        assert WorkerSpec.read(directory / "spec.json").per_worker_batch == 32
        (directory / "rank-0.failure").write_text(line)
        return Launch(1, [])

    monkeypatch.setattr(study, "run_torchrun", run_torchrun)
    args = ["scale", "max-batch", str(tiny_exp()), "--workers", "1", "--memory-cap-gb", "2"]
    r = cli(*args, "--no-plots")
    assert r.code == 1, r.err
    assert r.out.rstrip().splitlines()[-1] == (
        "largest per-worker batch that fits: none found; stopped by a memory limit, not by "
        f"the batch: a worker ran out of memory before per-worker batch 32 trained: "
        f"MemoryError{HINT}"
    )
    assert "None" not in r.out
    r = cli(*args, "--no-plots", "--json")
    assert r.code == 1, r.err
    doc = json.loads(r.out)
    assert doc["max_per_worker_batch"] is None
    assert doc["stopped"] == {"reason": "memory_limit", "per_worker_batch": 32, "detail": line}
    assert doc["warnings"][-1] == (
        "a memory limit stopped per-worker batch 32 before it trained: the search stopped "
        "there, and a larger batch may still fit"
    )
    [row] = doc["rows"]
    assert (row["status"], row["out_of_memory"], row["error"]) == ("failed", False, line)
