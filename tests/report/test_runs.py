"""dlperf.report.runs: the pieces of `dlperf runs plot` on runs stored by hand: the checks of
--out and --x, axis labels, default keys, legends naming the keys that differ, error keys as
1 - accuracy, steps and epochs placed through steps_per_epoch, points past ±1e307 left out,
and the one-line refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlperf.errors import UserError
from dlperf.report.runs import (
    MAX_DRAWN,
    check_out,
    check_x,
    default_keys,
    draw_runs,
    drawable,
    legend_labels,
    plot_runs,
    rows_of,
    tracked,
    ylabel,
)
from dlperf.store import RunStore

EXPERIMENT = {"model": {"name": "smallcnn"}, "data": {"name": "digits"}, "train": {"lr": 0.1},
              "run": {"out_dir": "runs"}}  # fmt: skip


def _run(store: RunStore, rows: list[Any], config: dict[str, Any] | None = None,
         spe: int | None = 4, name: str = "digits") -> int:  # fmt: skip
    run_id = store.create_run(name, "run", config if config is not None else EXPERIMENT)
    store.log_metrics(run_id, rows)
    store.finish_run(run_id, summary={"steps_per_epoch": spe} if spe else {})
    return run_id


@pytest.mark.parametrize("name", ["f.png", "f.SVG", "f.pdf"])
def test_check_out_takes_the_three_formats(name: str) -> None:
    check_out(Path(name))


@pytest.mark.parametrize(("name", "said"), [("f.jpg", "'.jpg'"), ("f", "'(no suffix)'")])
def test_check_out_refuses_other_names_in_one_line(name: str, said: str) -> None:
    with pytest.raises(UserError) as e:
        check_out(Path(name))
    assert e.value.message == f"--out {name}: unknown figure format {said}"
    assert e.value.hint == "end the name in .png, .svg or .pdf"


def test_check_x_names_the_axes() -> None:
    for x in ("step", "epoch", "time"):
        check_x(x)
    with pytest.raises(UserError) as e:
        check_x("wall")
    assert str(e.value) == "--x 'wall': not an axis (choose one of step, epoch, time)"


def test_ylabels_carry_the_unit() -> None:
    assert ylabel("val/error") == "val/error (fraction, 1 - val/acc1)"
    assert ylabel("epoch/throughput") == "epoch/throughput (samples/s)"
    assert ylabel("phase/forward_s") == "phase/forward_s (s)"
    assert ylabel("train/loss") == "train/loss"


def test_default_keys_prefer_the_axis_own_loss_and_skip_what_none_stored() -> None:
    both = {"train/loss", "epoch/train_loss", "val/acc1", "train/lr", "epoch/lr"}
    assert default_keys("step", both) == ["train/loss", "val/acc1", "train/lr"]
    assert default_keys("epoch", both) == ["epoch/train_loss", "val/acc1", "train/lr"]
    assert default_keys("step", {"epoch/train_loss", "epoch/lr"}) == ["epoch/train_loss",
                                                                      "epoch/lr"]  # fmt: skip
    assert default_keys("time", set()) == []


def test_drawable_leaves_out_values_past_the_limit_and_keeps_nan() -> None:
    points = drawable([1.0, 2.0, 3.0, 4.0], [1.0, 2e307, -MAX_DRAWN, float("nan")])
    assert points[0] == (1.0, 1.0) and points[1] == (3.0, -1e307)
    assert len(points) == 3 and points[2][0] == 4.0  # a gap in the line, not left out


def test_legends_name_the_differing_keys_shortened(store: RunStore) -> None:
    long_name = {"name": "a-very-long-data-set-name"}
    other = {**EXPERIMENT, "train": {"lr": 0.01}, "run": {"out_dir": "x"}, "data": long_name}
    runs = [store.get_run(_run(store, [], EXPERIMENT)), store.get_run(_run(store, [], other))]
    first, second = legend_labels(runs)
    # run.out_dir differs too but says nothing of training; values past 16 characters end in …
    assert first == f"run {runs[0].id}: digits (data.name=digits, train.lr=0.1)"
    assert second == f"run {runs[1].id}: digits (data.name=a-very-long-dat…, train.lr=0.01)"
    assert legend_labels(runs[:1]) == [f"run {runs[0].id}: digits"]
    # a path keeps its tail: the file's name is what tells two apart
    paths = [
        store.get_run(_run(store, [], {"w": p})) for p in ("/data/models/run-7/weights.pt", "short")
    ]
    assert legend_labels(paths)[0].endswith("(w=…un-7/weights.pt)")


def test_legends_name_six_keys_then_how_many_more(store: RunStore) -> None:
    a = {f"k{i}": 0 for i in range(8)}
    b = {f"k{i}": 1 for i in range(8)}
    runs = [store.get_run(_run(store, [], a)), store.get_run(_run(store, [], b))]
    label = legend_labels(runs)[0]
    assert label.replace("\n", " ").endswith("k4=0, k5=0, +2 more)")
    assert all(len(line) <= 72 for line in label.splitlines())


def test_error_keys_are_1_minus_the_stored_accuracy(store: RunStore) -> None:
    run_id = _run(store, [("val/acc1", 1, 0.75, 100.0), ("val/acc1", 2, 0.9, 101.0),
                          ("train/loss", 1, 2.0, 99.5)])  # fmt: skip
    rows, origin = rows_of(store, run_id, ["val/error", "val/acc1"])
    assert [(s, round(v, 9), w) for s, v, w in rows["val/error"]] == [(1, 0.25, 100.0),
                                                                       (2, 0.1, 101.0)]  # fmt: skip
    assert rows["val/acc1"] == [(1, 0.75, 100.0), (2, 0.9, 101.0)]
    assert origin == 99.5  # the first row of any key


def test_tracked_runs_are_runs_without_an_experiments_sections(store: RunStore) -> None:
    assert not tracked(store.get_run(_run(store, [])))
    assert tracked(store.get_run(_run(store, [], {"lr": 0.1})))


def test_steps_and_epochs_meet_through_steps_per_epoch(store: RunStore) -> None:
    rows = [("train/loss", 4, 1.0, 10.0), ("train/loss", 8, 0.5, 11.0),
            ("val/acc1", 1, 0.6, 10.0), ("val/acc1", 2, 0.8, 11.0)]  # fmt: skip
    run_id = _run(store, rows, spe=4)
    fig, plot = draw_runs(store, [run_id], ["train/loss", "val/acc1"], "epoch", fitted=False)
    loss, acc = (ax.get_lines()[0] for ax in fig.axes)
    assert list(loss.get_xdata()) == [1.0, 2.0]  # steps 4 and 8 at 4 steps an epoch
    assert list(acc.get_xdata()) == [1.0, 2.0]
    fig, _ = draw_runs(store, [run_id], ["val/acc1"], "step", fitted=False)
    assert list(fig.axes[0].get_lines()[0].get_xdata()) == [4.0, 8.0]  # epochs end at 4, 8
    fig, _ = draw_runs(store, [run_id], ["val/acc1"], "time", fitted=False)
    assert list(fig.axes[0].get_lines()[0].get_xdata()) == [0.0, 1.0]
    assert plot.runs[0]["points"] == {"train/loss": 2, "val/acc1": 2} and plot.warnings == []


def test_a_run_without_steps_per_epoch_is_left_out_of_the_other_axis_saying_so(
    store: RunStore,
) -> None:
    placed = _run(store, [("val/acc1", 1, 0.5, 1.0)], spe=4)
    unplaced = _run(store, [("train/loss", 3, 1.0, 1.0)], spe=None)
    _, plot = draw_runs(store, [placed, unplaced], ["train/loss", "val/acc1"], "epoch")
    # Each run lacks the other's key: said too (break-it round 26, C9).
    assert plot.warnings == [f"run {placed} has no train/loss",
                             f"run {unplaced}: train/loss left out: no steps_per_epoch in its "
                             "summary to put it on the epoch axis",
                             f"run {unplaced} has no val/acc1"]  # fmt: skip
    with pytest.raises(UserError, match=r"^nothing to draw: run \d+: train/loss left out"):
        draw_runs(store, [unplaced], ["train/loss"], "epoch")


def test_refusals_name_the_runs_and_the_keys(store: RunStore) -> None:
    empty = _run(store, [])
    with pytest.raises(UserError) as e:
        draw_runs(store, [empty], [], "step")
    assert e.value.message == f"run(s) {empty} stored no metrics"
    run_id = _run(store, [("val/acc1", 1, 0.5)])
    with pytest.raises(UserError) as e:
        draw_runs(store, [run_id], ["val/acc"], "step")
    assert e.value.message == f"no metric 'val/acc' in run(s) {run_id}"
    assert "val/acc1" in str(e.value.hint)


def test_plot_runs_saves_the_figure_and_says_what_it_drew(store: RunStore, tmp_path: Path) -> None:
    run_id = _run(store, [("train/loss", 1, 2.0), ("train/loss", 2, 1e308)])
    plot = plot_runs(store, [run_id], [], "step", tmp_path / "r.svg")
    assert (tmp_path / "r.svg").read_text().lstrip().startswith("<?xml")
    doc = plot.to_dict()
    assert doc["path"] == str(tmp_path / "r.svg") and doc["keys"] == ["train/loss"]
    assert [r["id"] for r in doc["runs"]] == [run_id]
    assert doc["runs"][0]["points"] == {"train/loss": 1}
    assert doc["warnings"] == [f"run {run_id}: 1 train/loss point beyond ±1e+307 left out: a "
                               "figure's axis cannot span them"]  # fmt: skip
