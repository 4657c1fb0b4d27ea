"""dlperf.report.site.figures: what only the report draws (wall-time spreading, phase bars,
predicted against measured), on runs stored by hand, each figure caught before its PNG."""

from __future__ import annotations

from typing import Any

import pytest
from matplotlib.figure import Figure

from dlperf.report.site import figures
from dlperf.store import RunStore


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """The figures made into PNGs (none rendered): each becomes the URI 'png:N'."""
    made: list[Figure] = []

    def png(fig: Figure) -> str:
        made.append(fig)
        return f"png:{len(made) - 1}"

    monkeypatch.setattr(figures, "png", png)
    return made


def test_spread_places_a_first_batch_at_the_second_batchs_pace() -> None:
    # steps 1-3 written together at 10 s, step 4 alone at 12 s: 2 s a step, back from 10 s
    times, moved = figures.spread([(1, 10.0), (2, 10.0), (3, 10.0), (4, 12.0)])
    assert times == pytest.approx([6.0, 8.0, 10.0, 12.0]) and moved


def test_spread_places_a_later_batch_between_the_write_before_and_its_own() -> None:
    # step 0 at 5 s; steps 2 and 4 together at 9 s: step 2 half way, at 7 s
    times, moved = figures.spread([(0, 5.0), (2, 9.0), (4, 9.0)])
    assert times == pytest.approx([5.0, 7.0, 9.0]) and moved


def test_spread_keeps_rows_alone_at_their_time_and_a_lone_batch_as_it_is() -> None:
    assert figures.spread([(0, 1.0), (1, 2.5), (2, 3.0)]) == ([1.0, 2.5, 3.0], False)
    assert figures.spread([(1, 3.0), (2, 3.0)]) == ([3.0, 3.0], True)
    assert figures.spread([]) == ([], False)


def _run(store: RunStore, kind: str = "run", **summary: Any) -> int:
    run_id = store.create_run("r", kind, {})
    store.finish_run(run_id, summary=summary)
    return run_id


def test_phases_stack_per_epoch_in_the_steps_order(store: RunStore, drawn: list[Figure]) -> None:
    run_id = _run(store)
    rows = [("phase/backward_s", 0, 0.003), ("phase/data_s", 0, 0.001),
            ("phase/backward_s", 1, 0.004), ("phase/data_s", 1, 0.002)]  # fmt: skip
    store.log_metrics(run_id, rows)
    [(caption, uri)] = figures.phases(store, store.get_run(run_id))
    assert uri == "png:0" and caption.startswith("phase breakdown, milliseconds per step")
    ax = drawn[0].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["data", "backward"]
    # data at the bottom (1, 2 ms), backward on top of it (3, 4 ms)
    assert [p.get_y() for p in ax.patches] == pytest.approx([0, 0, 1.0, 2.0])
    assert [p.get_height() for p in ax.patches] == pytest.approx([1.0, 2.0, 3.0, 4.0])
    assert ax.get_xlabel() == "epoch"


def test_phases_fall_back_to_the_summary_and_draw_nothing_without_either(
    store: RunStore, drawn: list[Figure]
) -> None:
    timed = _run(store, phases={"forward": 0.002, "data": 0.001})
    assert len(figures.phases(store, store.get_run(timed))) == 1
    ax = drawn[0].axes[0]
    assert ax.get_xlabel() == "run" and [p.get_height() for p in ax.patches] == [1.0, 2.0]
    assert figures.phases(store, store.get_run(_run(store))) == []


def test_predicted_beside_the_measured_median_and_its_range(
    store: RunStore, drawn: list[Figure]
) -> None:
    run = store.get_run(_run(store, "predict", predicted_s=0.010, error_pct=-20.0))
    [(caption, _)] = figures.predicted(run, [0.012, 0.0125, 0.02])
    assert caption == "predicted against measured time per step"
    ax = drawn[0].axes[0]
    assert [p.get_height() for p in ax.patches] == pytest.approx([10.0, 12.5])
    assert ax.get_title() == "r: predicted vs measured (error -20%)"
    assert figures.predicted(run, []) == []
    assert figures.predicted(store.get_run(_run(store, "predict")), [0.1]) == []


def test_run_curves_note_a_run_without_metrics(store: RunStore, drawn: list[Figure]) -> None:
    found, notes = figures.run_curves(store, store.get_run(_run(store)))
    assert found == [] and drawn == []
    assert len(notes) == 1 and notes[0].startswith("no curves against epoch: ")
    assert notes[0].endswith("its metrics: none")


def test_against_time_draws_each_key_from_the_first_step(
    store: RunStore, drawn: list[Figure]
) -> None:
    run_id = _run(store)
    store.log_metrics(run_id, [("train/loss", 0, 2.0, 100.0), ("train/loss", 1, 1.0, 101.0),
                               ("train/loss", 2, 0.5, 103.0)])  # fmt: skip
    caption, _ = figures.against_time(store, store.get_run(run_id), ["train/loss"])
    assert caption == "train/loss against wall time"
    [line] = drawn[0].axes[0].get_lines()
    assert list(line.get_xdata()) == [0.0, 1.0, 3.0]
    assert list(line.get_ydata()) == [2.0, 1.0, 0.5]
