"""dlperf.distributed.trace_split: the ranks' traces found in rank order, their split
averaged over ranks into the point's summary with each estimate's error against the
trace's communication-only time (worked by hand), and the table of profiled points. The
traces are fakes: `traces.summarise` is replaced."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from dlperf.distributed import trace_split
from dlperf.distributed.contracts import PointRow, PointSummary
from dlperf.distributed.trace_split import COLUMNS, rank_traces, table, with_trace_split


def summary(**figures: Any) -> PointSummary:
    return PointSummary(**{f.name: None for f in fields(PointSummary)} | {"ranks": ()} | figures)


def row(s: PointSummary | None) -> PointRow:
    return PointRow(None, 2, 1, "weak", 32, 64, "allreduce", "ddp", None, (), "finished", s)


def test_rank_traces_are_in_rank_order_not_name_order(tmp_path: Path) -> None:
    for name in ("rank10", "rank2", "rank0", "rank1"):
        (tmp_path / f"{name}.pt.trace.json.gz").write_bytes(b"")
    (tmp_path / "torchrun.log").write_text("")
    assert [p.name.split(".")[0] for p in rank_traces(tmp_path)] == [
        "rank0", "rank1", "rank2", "rank10"
    ]  # fmt: skip


class FakeTrace:
    def __init__(self, split: dict[str, float]) -> None:
        self.split = split

    def mean_overlap(self) -> dict[str, float]:
        return self.split


SPLITS = {  # ms per step of each rank's trace
    "r0.json": {"compute_only_ms": 10.0, "comm_only_ms": 4.0, "both_ms": 2.0, "idle_ms": 1.0},
    "r1.json": {"compute_only_ms": 12.0, "comm_only_ms": 6.0, "both_ms": 0.0, "idle_ms": 3.0},
}


def test_the_split_is_the_mean_over_ranks_and_each_estimate_is_judged_by_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace_split.traces, "summarise", lambda p: FakeTrace(SPLITS[p.name]))
    point = summary(comm_exposed_s=0.006, ring_predicted_s=0.0025, overlap_predicted_s=None)
    traced, metrics = with_trace_split(point, [Path("r0.json"), Path("r1.json")])
    assert traced.trace_compute_only_s == pytest.approx(0.011)
    assert traced.trace_comm_only_s == pytest.approx(0.005)
    assert (traced.trace_both_s, traced.trace_idle_s) == (
        pytest.approx(0.001),
        pytest.approx(0.002),
    )
    assert traced.comm_error_vs_trace == pytest.approx(0.006 / 0.005 - 1)  # +20%
    assert traced.ring_error_vs_trace == pytest.approx(0.0025 / 0.005 - 1)  # -50%
    assert traced.overlap_error_vs_trace is None  # no estimate, no error
    assert ("rank1/trace_comm_only_s", 1, pytest.approx(0.006)) in metrics
    assert len(metrics) == 2 * 4


def test_no_table_without_a_profiled_point() -> None:
    assert table([row(summary()), row(None)]) is None


def test_the_table_gives_ms_and_each_estimates_error() -> None:
    s = summary(workers=2, comm="allreduce", per_worker_batch=32, trace_compute_only_s=0.011,
                trace_comm_only_s=0.005, trace_both_s=0.001, trace_idle_s=0.002,
                comm_exposed_s=0.006, comm_error_vs_trace=0.2, ring_predicted_s=0.0025,
                ring_error_vs_trace=-0.5)  # fmt: skip
    found = table([row(summary()), row(s)])
    assert found is not None and found.columns == COLUMNS
    [cells] = found.rows
    assert cells[:3] == [2, "allreduce", 32]
    assert cells[3:7] == pytest.approx([11.0, 5.0, 1.0, 2.0])
    assert cells[7:] == ["6 (+20%)", "2.5 (-50%)", None]
