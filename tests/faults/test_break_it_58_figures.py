"""Break-it round 58, fixer G3: the figures with long text, many runs, one epoch and re-logged
steps (tester T2's causes).

C1: a 200-character run name, a 100-character metric key or 25 runs pushed the legend, the y
label and the title off `runs plot`'s figure (and the report's): the legend of each subplot was
wider or taller than its axes, the label and title were never wrapped. Now a long name is
shortened (--json keeps it whole), a label or title is wrapped to the figure, and the figure
has one legend under its subplots, in as many columns as fit, the figure grown to hold it:
every text lies on the canvas.

C3: a one-epoch run's epoch axis was ticked 0.945 ... 1.050 with no tick at 1 (MaxNLocator's
integer ticks need two whole numbers in view). Every epoch axis is ticked in whole epochs now.

C4: `runs plot` of more than 10 runs drew run 11 in run 1's colour and line. After ten colours
the line style changes, so each of 40 runs has a look of its own (and the sweep's lines too).

C6: the sweep's figures on a study page had no title (the validation curves one only with
seeds). Each has one now.

C7: against wall time a run's points were joined in step order, so a loop that logged steps
again drew a zigzag back in time. A time axis joins them in the order they were logged.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text

import dlperf.report.site.figures as figures
from dlperf.report.runs import draw_runs
from dlperf.report.site.figures import against_time
from dlperf.report.site.html import fit
from dlperf.report.sweep import draw_sweep, draw_val_error
from dlperf.store import RunStore
from dlperf.store.query import TRACKED

LONG_KEY = "val/" + "k" * 96  # the longest key the store keeps
LONG_NAME = "x" * 200  # the longest name
EXPERIMENT = {"model": {"name": "smallcnn"}, "data": {"name": "digits"}, "train": {}, "run": {}}


def _run(
    store: RunStore,
    name: str,
    rows: list[Any],
    kind: str = "track",
    summary: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
) -> int:
    # kind "run" marked as dlperf.track marks its runs, or an experiment's run
    system = {TRACKED: True} if kind == "track" else None
    run_id = store.create_run(name, "run", config or {}, system=system)
    store.log_metrics(run_id, rows)
    store.finish_run(run_id, summary=summary or {})
    return run_id


def _texts_on_canvas(fig: Figure) -> list[str]:
    """What of `fig` reaches past its edges once saved as a PNG: the texts (titles, labels,
    legend entries) that do, and "ticks" where the drawn whole (matplotlib's tight bounding
    box, which holds the tick labels drawn) does; nothing, where everything fits."""
    fig.savefig(io.BytesIO(), format="png")
    renderer = fig._get_renderer()  # type: ignore[attr-defined]
    canvas = fig.bbox

    def out(box: Any) -> bool:
        return bool(box.x0 < canvas.x0 - 1 or box.x1 > canvas.x1 + 1 or box.y0 < canvas.y0 - 1
                    or box.y1 > canvas.y1 + 1)  # fmt: skip

    ticks = {t for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
             for tick in axis.get_major_ticks() + axis.get_minor_ticks()
             for t in (tick.label1, tick.label2)}  # fmt: skip
    found = [
        text.get_text()[:40]
        for text in fig.findobj(Text)
        if text.get_visible() and text.get_text() and text not in ticks
        and out(text.get_window_extent(renderer))
    ]  # fmt: skip
    whole = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)
    return found + (["ticks"] if out(whole) else [])


def _legend_texts(fig: Figure) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def _runs(store: RunStore, case: str) -> tuple[list[int], list[str]]:
    """The runs and keys of a case: two runs, one of a 200-character name; a run of a
    100-character key; 25 runs."""
    if case == "long name":
        return [_run(store, name, [("train/loss", s, 1.0 / s) for s in range(1, 6)])
                for name in ("short", LONG_NAME)], []  # fmt: skip
    if case == "long key":
        rows = [(k, s, 1.0 / s) for s in (1, 2, 3) for k in ("train/loss", LONG_KEY)]
        return [_run(store, "longkey", rows)], ["train/loss", LONG_KEY]
    return [_run(store, f"r{i}", [("train/loss", s, i + 1.0 / s) for s in (1, 2)],
                 config={"i": i}) for i in range(25)], []  # fmt: skip


@pytest.mark.parametrize("case", ["long name", "long key", "25 runs"])
def test_c1_long_names_keys_and_many_runs_stay_on_the_figure(store: RunStore, case: str) -> None:
    ids, keys = _runs(store, case)
    fig, plot = draw_runs(store, ids, keys, "step")
    assert _texts_on_canvas(fig) == []  # was: the legend, a label, the title cut
    shown = _legend_texts(fig)
    assert len(shown) == len(ids)  # every run named in the legend
    for run, text in zip(plot.runs, shown, strict=True):
        assert text.startswith(f"run {run['id']}: ")
        assert run["name"] == store.get_run(run["id"]).name  # --json keeps a name whole
    # The report draws the same figure at the page's width, its margins fitted to its labels.
    page, _ = draw_runs(store, ids, keys, "step", fitted=False)
    fit(page)
    assert _texts_on_canvas(page) == []
    if case == "long key":
        assert "".join(fig.axes[1].get_ylabel().split()) == LONG_KEY  # wrapped, never cut
    if case == "long name":
        assert len(plot.runs[1]["label"]) < 100


@pytest.fixture
def caught(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """The figures the report's figure module turns into PNGs, caught as they are."""
    saved: list[Figure] = []
    real = figures.png
    monkeypatch.setattr(figures, "png", lambda fig: saved.append(fig) or real(fig))
    return saved


def test_c1_the_reports_wall_time_figure_of_a_long_name_fits(
    store: RunStore, caught: list[Figure]
) -> None:
    run_id = _run(store, LONG_NAME, [(k, s, 1.0 / s, 100.0 + s) for s in range(1, 6)
                                     for k in ("train/loss", LONG_KEY)])  # fmt: skip
    against_time(store, store.get_run(run_id), ["train/loss", LONG_KEY])
    assert _texts_on_canvas(caught[0]) == []  # the title was cut at the right edge


def test_c3_a_one_epoch_axis_is_ticked_at_whole_epochs(store: RunStore) -> None:
    run_id = _run(store, "one", [("val/acc1", 1, 0.5), ("train/loss", 4, 1.0)], kind="run",
                  summary={"steps_per_epoch": 4}, config=EXPERIMENT)  # fmt: skip
    fig, _ = draw_runs(store, [run_id], ["val/acc1", "train/loss"], "epoch")
    sweep = draw_val_error([{"params": {"lr": 0.1}, "epochs": [1], "mean": [0.5], "min": [0.5],
                             "max": [0.5], "runs": 1}])  # fmt: skip
    for ax in (fig.axes[-1], sweep.axes[0]):
        ax.figure.savefig(io.BytesIO(), format="png")
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks == [1.0], ticks  # was 0.945, 0.96, ... 1.05


def test_c4_eleven_and_more_runs_each_have_their_own_look(store: RunStore) -> None:
    ids = [_run(store, f"r{i}", [("train/loss", s, i + 1.0 / s) for s in (1, 2)])
           for i in range(12)]  # fmt: skip
    fig, _ = draw_runs(store, ids, ["train/loss"], "step")
    looks = [(line.get_color(), line.get_linestyle()) for line in fig.axes[0].lines]
    assert len(looks) == 12 and len(set(looks)) == 12, looks  # run 11 was run 1's look
    curves = [{"params": {"i": i}, "epochs": [1, 2], "mean": [0.5, 0.6], "min": [0.5, 0.6],
               "max": [0.5, 0.6], "runs": 1} for i in range(12)]  # fmt: skip
    lines = draw_val_error(curves).axes[0].lines
    assert len({(line.get_color(), line.get_linestyle()) for line in lines}) == 12


def test_c6_every_sweep_figure_has_a_title() -> None:
    curves = [({"train.lr": lr}, [(1, 0.5), (2, 0.6)]) for lr in (0.1, 0.01)]
    groups = [{"params": {"train.lr": lr}, "test_accuracy": 0.6, "test_accuracy_std": None,
               "time_to_target_s": 3.0, "rank": i} for i, lr in enumerate((0.1, 0.01))]  # fmt: skip
    figures = draw_sweep(curves, groups, {"train.lr": [0.1, 0.01]}, 0.5)
    assert set(figures) == {"val_error", "accuracy_vs_train_lr", "time_to_target"}
    for name, fig in figures.items():
        assert fig.axes[0].get_title(), name  # was "" for the first two


def test_c7_a_time_axis_joins_the_points_in_the_order_they_were_logged(
    store: RunStore, caught: list[Figure]
) -> None:
    # Steps 1-5, one row a second, then the loop went back to step 3 and logged 3-7.
    rows = [("train/loss", s, 1.0 / s, 100.0 + s) for s in range(1, 6)]
    rows += [("train/loss", s, 2.0 / s, 103.0 + s) for s in range(3, 8)]
    run_id = _run(store, "resumed", rows)
    fig, _ = draw_runs(store, [run_id], ["train/loss"], "time")
    (line,) = fig.axes[0].lines
    xs = list(line.get_xdata())
    assert xs == sorted(xs) and len(xs) == 10, xs  # was 0, 1, 2, 4, 3, 5, 4, 6, ...
    assert list(line.get_ydata())[4:6] == [0.2, 2.0 / 3]  # the restart is one jump
    against_time(store, store.get_run(run_id), ["train/loss"])
    (line,) = caught[0].axes[0].lines
    xs = list(line.get_xdata())
    assert xs == sorted(xs), xs
