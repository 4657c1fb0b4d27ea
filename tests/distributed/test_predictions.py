"""dlperf.distributed.predictions with a fake store: which all-reduce study the models are
calibrated on (the newest finished one of the backend), the ring model over DDP's buckets
by hand, the bases in words, what makes no prediction, and the error against the
measurement."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pytest

from dlperf.distributed.contracts import AllreduceSummary, ComputePhase, MainPhase, RankResult
from dlperf.distributed.predictions import (
    CommReference,
    Measured,
    comm_reference,
    overlap_prediction,
    prediction_error,
    ring_basis,
    ring_prediction,
)

RING = {"alpha_s": 1e-4, "bandwidth_bytes_per_s": 1e9, "rmse_pct": 7.6, "n_points": 12}
MiB = 2**20


@dataclass
class Run:
    id: int
    study_id: int
    status: str
    summary: dict[str, Any]
    ended: str = "2026-11-20 10:00"


def stored(backend: str, workers: int, ring: dict[str, Any] | None = RING) -> dict[str, Any]:
    rows = [{"bytes": 1024.0, "time_s": 0.001}]
    return asdict(AllreduceSummary(backend, workers, rows, ring, [], 0.25))


class FakeStore:
    """list_runs newest first, as the store gives them."""

    def __init__(self, runs: list[Run]) -> None:
        self.runs = runs

    def list_runs(self, kind: str | None = None, study_id: int | None = None) -> list[Run]:
        assert kind == "allreduce"
        return [r for r in self.runs if study_id is None or r.study_id == study_id]


def test_the_newest_finished_study_of_the_backend_is_the_reference() -> None:
    store = FakeStore([
        Run(9, 5, "failed", {}),  # failed before it stored anything
        Run(8, 4, "finished", stored("nccl", 2)),  # another backend
        Run(7, 3, "finished", stored("gloo", 4), ended="2026-11-21 09:00"),
        Run(6, 3, "failed", stored("gloo", 8)),
        Run(5, 3, "finished", stored("gloo", 2)),
        Run(4, 2, "finished", stored("gloo", 2)),  # an older study
    ])  # fmt: skip
    found = comm_reference(store, "gloo")  # type: ignore[arg-type]
    assert found is not None
    assert (found.study_id, found.measured_at, found.ring_model) == (3, "2026-11-21 09:00", RING)
    assert sorted(found.workers) == [2, 4]
    assert found.workers[2] == Measured(5, [{"bytes": 1024.0, "time_s": 0.001}], 0.25)
    assert found.study() == "all-reduce study 3 (2026-11-21 09:00)"
    assert comm_reference(store, "mpi") is None  # type: ignore[arg-type]


def test_the_ring_model_pays_its_latency_once_per_bucket() -> None:
    # 2 workers: T(S) = 2(n-1)a + 2(n-1)/n S/B = 2e-4 s + S / 1e9 s.
    # 5 MiB under DDP's default caps: a first bucket of 1 MiB, then one of 4 MiB (cap 25 MiB).
    expected = 2 * 2e-4 + 5 * MiB / 1e9
    assert ring_prediction(RING, 2, 5 * MiB, None) == pytest.approx(expected)
    # --bucket-mb 2 caps every bucket, the first too: 2 + 2 + 1 MiB, three latencies.
    assert ring_prediction(RING, 2, 5 * MiB, 2.0) == pytest.approx(3 * 2e-4 + 5 * MiB / 1e9)
    # no gradient at all still makes one (empty) all-reduce
    assert ring_prediction(RING, 2, 0, None) == pytest.approx(2e-4)


def test_no_ring_prediction_for_one_worker_or_without_a_model() -> None:
    assert ring_prediction(RING, 1, MiB, None) is None
    assert ring_prediction(None, 2, MiB, None) is None


def test_the_ring_basis_names_the_study_and_the_fit() -> None:
    reference = CommReference(3, "2026-11-21 09:00", RING, {})
    assert ring_basis(reference) == (
        "ring α-β fitted to all-reduce study 3 (2026-11-21 09:00), rms error 8% over 12 sizes"
    )
    assert ring_basis(None) is None
    assert ring_basis(CommReference(3, None, None, {})) is None


def rank(compute: ComputePhase | None) -> RankResult:
    main = MainPhase((0.1,), 0.1, 8, 0.0, 8)
    return RankResult(0, "h", 1, 2, main, compute)


def test_no_overlap_prediction_without_what_it_needs() -> None:
    reference = CommReference(3, "t", RING, {})
    ready = ComputePhase((0.1,), grad_ready_s=(0.01, 0.02), grad_sizes=(4, 4))
    assert overlap_prediction(None, 2, [rank(ready)], None) == (None, None)
    assert overlap_prediction(reference, 1, [rank(ready)], None) == (None, None)
    assert overlap_prediction(reference, 2, [rank(None)], None) == (None, None)  # no replica
    no_times = ComputePhase((0.1,))  # a replica without ready times (not DDP's)
    assert overlap_prediction(reference, 2, [rank(no_times)], None) == (None, None)
    bare = CommReference(3, "t", None, {})  # neither a run at 2 workers nor a ring model
    assert overlap_prediction(bare, 2, [rank(ready)], None) == (None, None)


def test_without_a_run_at_the_worker_count_the_ring_times_are_used_and_said() -> None:
    reference = CommReference(3, "t", RING, {})
    ready = ComputePhase((0.1,), grad_ready_s=(0.01, 0.02), grad_sizes=(4, 4))
    predicted, basis = overlap_prediction(reference, 2, [rank(ready)], None)
    assert predicted is not None and predicted >= 0
    assert basis is not None
    assert "ring α-β times of all-reduce study 3 (t) (no run at 2 workers)" in basis
    assert "overlap cost not measured (taken as 0" in basis


def test_the_error_is_predicted_over_measured_less_one() -> None:
    assert prediction_error(0.012, 0.010) == pytest.approx(0.2)
    assert prediction_error(0.005, 0.010) == pytest.approx(-0.5)
    assert prediction_error(None, 0.01) is None
    assert prediction_error(0.01, None) is None
    assert prediction_error(0.01, 0.0) is None  # nothing exposed was measured
