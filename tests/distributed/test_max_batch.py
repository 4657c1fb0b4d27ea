"""dlperf.distributed.max_batch's search with a fake Study (no worker runs): the batches it
tries (x4 from 32), the steps of its two epochs, why it stops (memory, the memory cap, the
data set, another failure, the last size) and how its last line says so; and what it
refuses before any point runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dlperf.config import Experiment, ScaleConfig, ScaleJob
from dlperf.distributed import max_batch
from dlperf.distributed.contracts import PointRow
from dlperf.distributed.max_batch import BATCH_SIZES, STOPS, find_max_batch
from dlperf.distributed.planning import Point
from dlperf.distributed.study import StudyResult
from dlperf.errors import UserError

EXP = Experiment.model_validate({"model": {"name": "smallcnn"}, "data": {"name": "digits"}})


@dataclass
class Outcome:
    """What the fake study's point does at a batch: finish, or fail (for memory or not)."""

    error: str | None = None
    out_of_memory: bool = False


class FakeStudy:
    """The parts of Study the search uses; `outcomes` by per-worker batch (default: fits)."""

    outcomes: ClassVar[dict[int, Outcome]] = {}
    train_images = 10_000_000
    made: ClassVar[list[FakeStudy]] = []

    def __init__(self, job: ScaleJob, store: Any, out_dir: Path, reporter: Any,
                 compare: bool = True) -> None:  # fmt: skip
        self.opts, self.exp, self.compare = job.scale, job.experiment, compare
        self.backend = job.scale.backend if job.scale.backend != "auto" else "gloo"
        self.warnings: list[str] = []
        self.ran: list[tuple[int, int, dict[str, Any]]] = []  # batch, steps, extra
        self.opened = self.entered = False
        FakeStudy.made.append(self)

    def open(self) -> None:
        self.opened = True

    def __enter__(self) -> FakeStudy:
        self.entered = True
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def shard_error(self, point: Point) -> UserError | None:
        shard = self.train_images // point.workers
        if point.per_worker_batch <= shard:
            return None
        return UserError(f"per-worker batch {point.per_worker_batch} is larger than {shard}")

    def run_point(self, index: int, total: int, point: Point, steps: int,
                  extra: dict[str, Any]) -> PointRow:  # fmt: skip
        self.ran.append((point.per_worker_batch, steps, extra))
        outcome = self.outcomes.get(point.per_worker_batch, Outcome())
        status = "finished" if outcome.error is None else "failed"
        return PointRow(None, point.workers, 1, None, point.per_worker_batch, point.global_batch,
                        point.comm, point.strategy, point.bucket_mb, (), status,
                        error=outcome.error, out_of_memory=outcome.out_of_memory)  # fmt: skip

    def result(self) -> StudyResult:
        return StudyResult(1, [], self.warnings, "fake")


@pytest.fixture(autouse=True)
def fake_study(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(max_batch, "Study", FakeStudy)
    monkeypatch.setattr(FakeStudy, "outcomes", {})
    monkeypatch.setattr(FakeStudy, "made", [])
    monkeypatch.setattr(FakeStudy, "train_images", 10_000_000)


def search(**scale: Any) -> max_batch.MaxBatchResult:
    opts = ScaleConfig.model_validate({"workers": [2], "memory_cap_gb": 1.0, "steps": 9} | scale)
    return find_max_batch(ScaleJob(experiment=EXP, scale=opts), None, Path("."))  # type: ignore[arg-type]


def test_batches_grow_x4_each_trains_two_epochs_and_out_of_memory_stops_it() -> None:
    FakeStudy.train_images = 100_000
    FakeStudy.outcomes = {2048: Outcome("CUDA out of memory. Tried ...\nmore", out_of_memory=True)}
    found = search()
    [study] = FakeStudy.made
    assert study.opened and study.entered and not study.compare
    assert study.opts.mode == "weak" and study.opts.steps == 1 and not study.opts.comm_split
    # an epoch of 100,000 images at a global batch of 2 x 32 = 64: 1562 steps
    assert study.ran[0] == (32, 1562, {"memory_cap_bytes": 2**30, "warmup_steps": 1562})
    assert [batch for batch, _, _ in study.ran] == [32, 128, 512, 2048]
    assert (found.reason, found.per_worker_batch) == ("out_of_memory", 2048)
    assert found.study.max_per_worker_batch == 512
    assert found.stopped() == {"reason": "out_of_memory", "per_worker_batch": 2048,
                               "detail": "CUDA out of memory. Tried ..."}  # fmt: skip
    assert found.answer() == (
        "largest per-worker batch that fits: 512; stopped by memory: CUDA out of memory. Tried ..."
    )


def test_a_peak_above_the_cap_is_the_caps_stop() -> None:
    above = "peak resident memory 1.3 GB above the cap of 1 GB"
    FakeStudy.outcomes = {128: Outcome(above, out_of_memory=True)}
    found = search()
    assert (found.reason, found.study.max_per_worker_batch) == ("memory_cap", 32)
    assert found.answer().endswith(f"{STOPS['memory_cap']}: {above}")


def test_the_data_set_stops_it_before_a_batch_larger_than_a_workers_share() -> None:
    FakeStudy.train_images = 2 * 600  # 600 images a worker: 512 fits, 2048 does not
    found = search()
    assert [b for b, _, _ in FakeStudy.made[0].ran] == [32, 128, 512]
    assert (found.reason, found.per_worker_batch, found.detail) == (
        "data_set",
        2048,
        "per-worker batch 2048 is larger than 600",
    )
    assert found.study.warnings == ["per-worker batch 2048 exceeds the data set: stopped there"]


def test_a_failure_not_for_memory_stops_it_and_says_a_larger_batch_may_fit() -> None:
    FakeStudy.outcomes = {32: Outcome("")}  # failed without a word
    found = search()
    assert (found.reason, found.detail, found.study.max_per_worker_batch) == (
        "failed",
        "failed",
        None,
    )
    assert "a larger batch may still fit" in found.study.warnings[0]


def test_every_size_fitting_is_the_last_sizes_stop() -> None:
    found = search()
    largest = 32 * 4 ** (BATCH_SIZES - 1)
    assert (found.reason, found.study.max_per_worker_batch) == ("last_size", largest)
    assert found.detail == f"every size from 32 to {largest} fitted"


@pytest.mark.parametrize(
    ("scale", "message"),
    [
        ({"workers": [1, 2]}, r"scale max-batch takes one worker count \(e.g. --workers 2\)"),
        ({"framework": "tensorflow"}, "scale max-batch measures the torch path"),
        ({"memory_cap_gb": None}, "scale max-batch on CPU needs --memory-cap-gb"),
    ],
)
def test_refused_before_any_point_runs(scale: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        search(**scale)
    assert all(not s.ran and not s.opened for s in FakeStudy.made)
