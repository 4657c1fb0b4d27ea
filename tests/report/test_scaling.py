"""dlperf.report.scaling: the scaling study's figures, from rows written here: the spread
and ideal lines against hand calculations, the notes, and which figures a study gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlperf.report import scaling


def _row(workers: int, throughput: float, **more: Any) -> dict[str, Any]:
    row = {
        "status": "finished", "workers": workers, "nodes": 1, "mode": "weak",
        "per_worker_batch": 32, "global_batch": 32 * workers, "comm": "allreduce",
        "strategy": "ddp", "bucket_mb": None, "throughput": throughput,
        "epoch_time_s": 1000 / throughput, "step_time_s": 32 * workers / throughput,
        "step_time_min_s": None, "step_time_max_s": None, "compute_s": 0.05,
        "comm_exposed_s": 0.01, "speedup": None, "efficiency": None, "cost_per_epoch": None,
        "ranks": [],
    }  # fmt: skip
    return row | more


def test_step_range_is_the_batch_over_the_slowest_and_fastest_step_per_throughput() -> None:
    row = _row(2, 400.0, step_time_min_s=0.1, step_time_max_s=0.2)  # global batch 64
    assert scaling.step_range(row) == pytest.approx((64 / 0.2 / 400, 64 / 0.1 / 400))  # 0.8, 1.6
    assert scaling.step_range(_row(2, 400.0)) is None  # no spread stored


def test_yerr_is_distances_from_the_value_never_negative() -> None:
    assert scaling._yerr([100.0], [(0.8, 1.6)]) == [[pytest.approx(20.0)], [pytest.approx(60.0)]]
    assert scaling._yerr([100.0], [(1.6, 0.8)]) == [[pytest.approx(20.0)], [pytest.approx(60.0)]]
    low, high = scaling._yerr([100.0], [(1.1, 1.2)])  # both factors above the value
    assert low == [0.0] and high == [pytest.approx(20.0)]


def test_shared_host_says_when_every_worker_shared_one_host() -> None:
    one_node = [_row(1, 100.0), _row(2, 180.0)]
    assert scaling.shared_host(one_node) == (
        "single-host emulation: all workers shared one host, its cores and memory bandwidth"
    )
    named = [_row(2, 1.0, nodes=2, ranks=[{"host": "n0"}, {"host": "n0"}])]
    note = scaling.shared_host(named)
    assert note is not None and "one host (n0)," in note
    two_hosts = [_row(2, 1.0, nodes=2, ranks=[{"host": "n0"}, {"host": "n1"}])]
    assert scaling.shared_host(two_hosts) is None
    assert scaling.shared_host([_row(2, 1.0, nodes=2)]) is None  # two nodes, hosts unknown
    assert scaling.shared_host([_row(1, 1.0, status="failed")]) is None


def test_unreliable_note_counts_the_points_and_the_worst_wait() -> None:
    rows = [
        _row(1, 100.0, reliable=True, cpu_wait_share=0.1),
        _row(2, 150.0, reliable=False, cpu_wait_share=0.4),
        _row(4, 150.0, reliable=False, status="failed"),  # not drawn: not counted
    ]
    assert scaling.unreliable_note(rows) == (
        "hollow markers: 1 unreliable point(s), threads waited for a CPU up to 40% of their time"
    )
    assert scaling.unreliable_note([_row(1, 1.0, reliable=True)]) is None


def test_rows_are_grouped_by_series_each_named() -> None:
    rows = [_row(1, 100.0), _row(2, 180.0), _row(1, 90.0, per_worker_batch=64, bucket_mb=4.0),
            _row(4, 1.0, status="failed")]  # fmt: skip
    groups = scaling._groups(rows)
    assert {k: len(v) for k, v in groups.items()} == {
        "weak, 32 per worker: ddp/allreduce": 2,
        "weak, 64 per worker: ddp/allreduce 4MB": 1,
    }


def _lines(fig: Any) -> dict[str, list[float]]:
    return {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].get_lines()}


def test_a_study_with_speedup_and_cost_gets_every_figure_with_its_ideal_lines() -> None:
    rows = [
        _row(1, 100.0, speedup=1.0, efficiency=1.0, cost_per_epoch=0.2),
        _row(2, 150.0, speedup=1.5, efficiency=0.75, cost_per_epoch=0.3),
    ]
    figures = dict(scaling.study_figures(rows, "scale study 1: s"))
    assert list(figures) == ["plot/throughput", "plot/train_time", "plot/speedup",
                             "plot/efficiency", "plot/step_split", "plot/cost"]  # fmt: skip
    series = "weak, 32 per worker: ddp/allreduce"
    assert _lines(figures["plot/throughput"])[f"{series} ideal"] == [100.0, 200.0]
    assert _lines(figures["plot/train_time"])[f"{series} ideal"] == [10.0, 5.0]  # 1000 images
    assert _lines(figures["plot/speedup"])[f"{series} ideal"] == [1.0, 2.0]
    ax = figures["plot/train_time"].axes[0]
    assert ax.get_ylabel() == "s to train one epoch of 1,000 images"
    assert ax.get_title() == "scale study 1: s"
    assert "single-host emulation" in figures["plot/cost"].texts[0].get_text()


def test_a_study_without_speedups_draws_no_speedup_or_efficiency() -> None:
    figures = scaling.study_figures([_row(1, 100.0), _row(2, 150.0)])
    assert [kind for kind, _ in figures] == ["plot/throughput", "plot/train_time",
                                             "plot/step_split"]  # fmt: skip
    assert scaling.study_figures([_row(1, 100.0, status="failed")]) == []


def test_plot_study_saves_one_png_per_figure(tmp_path: Path) -> None:
    saved = scaling.plot_study(tmp_path / "plots", [_row(1, 100.0)], (3, "s"))
    assert [kind for kind, _ in saved] == ["plot/throughput", "plot/train_time", "plot/step_split"]
    for _, path in saved:
        assert path.parent == tmp_path / "plots" and path.read_bytes()[:4] == b"\x89PNG"
    assert scaling.plot_study(tmp_path / "none", [], (4, "s")) == []
    assert not (tmp_path / "none").exists()
