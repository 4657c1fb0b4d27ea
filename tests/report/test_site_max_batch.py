"""dlperf.report.site.pages: a largest-batch search's page draws the figures `dlperf scale
max-batch` draws (dlperf.report.max_batch), time per step and throughput against the batch."""

from __future__ import annotations

from typing import Any

import pytest

from dlperf.report.site import pages
from dlperf.store import RunStore


def _point(batch: int, status: str = "finished") -> dict[str, Any]:
    if status != "finished":
        return {"workers": 1, "per_worker_batch": batch, "out_of_memory": True}
    step = 0.01 * batch / 32
    return {"workers": 1, "per_worker_batch": batch, "step_time_s": step,
            "step_time_min_s": step * 0.9, "step_time_max_s": step * 1.2,
            "throughput": batch / step}  # fmt: skip


def test_a_search_page_shows_the_commands_two_figures_against_the_batch(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[Any] = []
    monkeypatch.setattr(pages, "png", lambda fig: drawn.append(fig) or "data:image/png;base64,")
    study = store.create_study("search", "scale")
    for batch, status in ((32, "finished"), (64, "finished"), (128, "failed")):
        run = store.create_run(f"b{batch}", "scale", {}, study_id=study)
        store.finish_run(run, status, summary=_point(batch, status))
    html = pages._scale(store.get_study(study), store.list_runs(study_id=study))
    assert "step time against the per-worker batch (the largest that fits: 64)" in html
    assert "throughput against the per-worker batch (the largest that fits: 64)" in html
    step_ax, throughput_ax = (fig.axes[0] for fig in drawn)
    assert list(step_ax.lines[0].get_xdata()) == [32, 64]
    assert list(step_ax.lines[0].get_ydata()) == pytest.approx([10.0, 20.0])  # ms
    assert list(throughput_ax.lines[0].get_ydata()) == pytest.approx([3200.0, 3200.0])
    # The size that did not fit is marked on each axis, as the command marks it.
    assert any("128 per worker: out of memory" in ln.get_label() for ln in step_ax.lines)
