"""dlperf.report.max_batch: the largest-batch search's figures, from rows written here."""

from __future__ import annotations

from typing import Any

import pytest

from dlperf.report import max_batch


def _row(batch: int, status: str = "finished", **more: Any) -> dict[str, Any]:
    row = {"per_worker_batch": batch, "global_batch": batch, "status": status,
           "step_time_s": batch / 1000, "step_time_min_s": batch / 2000,
           "step_time_max_s": batch / 500, "throughput": 1000.0, "nodes": 1,
           "ranks": []}  # fmt: skip
    return row | more


def test_value_is_milliseconds_per_step_or_throughput_with_their_spread() -> None:
    row = _row(32)  # 32 ms per step, 16..64 ms
    value, spread = max_batch._value(row, "step_time")
    assert value == pytest.approx(32.0) and spread == pytest.approx((16.0, 64.0))
    value, spread = max_batch._value(row, "throughput")
    # the batch over the slowest and fastest step: 32/0.064 = 500, 32/0.016 = 2000 samples/s
    assert value == 1000.0 and spread == pytest.approx((500.0, 2000.0))
    bare = _row(32, step_time_min_s=None)
    assert max_batch._value(bare, "step_time")[1] is None
    assert max_batch._value(bare, "throughput")[1] is None


def test_the_figures_mark_sizes_that_did_not_fit_and_say_why_the_search_stopped() -> None:
    rows = [_row(32), _row(128), _row(512, "failed", out_of_memory=True)]
    figures = max_batch.max_batch_figures(rows, "search", "stopped: 512 did not fit")
    assert [kind for kind, _ in figures] == ["plot/step_time", "plot/throughput"]
    for _, fig in figures:
        ax = fig.axes[0]
        labels = [line.get_label() for line in ax.get_lines()]
        assert "512 per worker: out of memory" in labels
        measured = next(line for line in ax.get_lines() if line.get_label() == "measured")
        assert list(measured.get_xdata()) == [32, 128]  # finished sizes, in order
        assert [t.get_text() for t in ax.get_xticklabels()] == ["32", "128", "512"]
        notes = [t.get_text() for t in fig.texts]
        assert "stopped: 512 did not fit" in notes
        assert any(n.startswith("single-host emulation") for n in notes)
    step_time = figures[0][1].axes[0]
    measured = next(line for line in step_time.get_lines() if line.get_label() == "measured")
    assert list(measured.get_ydata()) == pytest.approx([32.0, 128.0])


def test_a_failure_that_is_not_memory_is_marked_failed() -> None:
    figures = max_batch.max_batch_figures([_row(32), _row(128, "failed")], "t")
    labels = [line.get_label() for line in figures[0][1].axes[0].get_lines()]
    assert "128 per worker: failed" in labels


def test_no_size_that_fitted_draws_nothing() -> None:
    assert max_batch.max_batch_figures([_row(32, "failed", out_of_memory=True)], "t") == []
