"""dlperf.report.sweep: a sweep's figures read back from their Figures (error = 1 - accuracy,
the seeds' band, accuracy against a numeric axis with its error bars and a log scale for
rates, time to target with the points that missed it), which figures plot_sweep makes, and
sweep_figures on a result whose runs are stored by hand."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dlperf.report import sweep
from dlperf.report.sweep import (
    draw_accuracy_vs_axis,
    draw_time_to_target,
    draw_val_error,
    plot_sweep,
    sweep_figures,
)
from dlperf.store import RunStore


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The paths figures are saved to (no PNG rendered)."""
    paths: list[Path] = []
    monkeypatch.setattr(sweep, "save_figure", lambda fig, path, **kw: paths.append(Path(path)))
    return paths


def _group(rank: int, params: dict[str, Any], acc: float | None, std: float | None = None,
           time: float | None = None) -> dict[str, Any]:  # fmt: skip
    return {"rank": rank, "params": params, "test_accuracy": acc, "test_accuracy_std": std,
            "time_to_target_s": time}  # fmt: skip


def test_val_error_is_1_minus_the_mean_with_the_seeds_band() -> None:
    curves = [
        {"params": {"lr": 0.1}, "runs": 2, "epochs": [1, 2], "mean": [0.6, 0.8],
         "min": [0.5, 0.7], "max": [0.7, 0.9]},
        {"params": {"lr": 1.0}, "runs": 1, "epochs": [1], "mean": [0.4], "min": [0.4],
         "max": [0.4]},
    ]  # fmt: skip
    ax = draw_val_error(curves).axes[0]
    two, _ = ax.get_lines()
    assert list(two.get_xdata()) == [1, 2]
    assert list(two.get_ydata()) == pytest.approx([0.4, 0.2])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["lr=0.1 (mean of 2 seeds)",
                                                                   "lr=1.0"]  # fmt: skip
    [band] = ax.collections  # only the point with two seeds has one: error 0.3..0.5, 0.1..0.3
    ys = band.get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(0.1) and max(ys) == pytest.approx(0.5)
    assert ax.get_title() == (
        "validation error against epoch: each point's mean over its seeds; band: the seeds' range"
    )
    assert ax.get_ylabel() == "validation error (1 - top-1)"


def test_a_sweep_of_one_seed_has_no_band_and_a_title_of_no_seeds() -> None:
    ax = draw_val_error([{"params": {}, "runs": 1, "epochs": [1], "mean": [0.5], "min": [0.5],
                          "max": [0.5]}]).axes[0]  # fmt: skip
    # No title before round 58, though every figure has one.
    assert len(ax.collections) == 0 and ax.get_title() == "validation error against epoch"
    assert ax.get_legend().get_texts()[0].get_text() == "all"  # a point of no axis values


def test_accuracy_against_an_axis_one_line_per_other_axes_values() -> None:
    groups = [
        _group(1, {"lr": 0.1, "mode": "ft"}, 0.9, 0.01),
        _group(2, {"lr": 0.01, "mode": "ft"}, 0.8, 0.02),
        _group(3, {"lr": 0.1, "mode": "fe"}, 0.7),
        _group(4, {"lr": 0.01, "mode": "fe"}, None),  # failed: no point
    ]
    ax = draw_accuracy_vs_axis("lr", groups).axes[0]
    ft, fe = (container.lines[0] for container in ax.containers)  # each line's data
    assert list(ft.get_xdata()) == [0.01, 0.1] and list(ft.get_ydata()) == [0.8, 0.9]
    assert list(fe.get_xdata()) == [0.1] and list(fe.get_ydata()) == [0.7]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["mode=ft", "mode=fe"]
    assert ax.get_xscale() == "log"  # 0.01..0.1 spans a factor of ten
    bars = ax.containers[0].lines[2][0].get_segments()  # ft's error bars: 0.8 ± 0.02, 0.9 ± 0.01
    assert [tuple(seg[:, 1].round(6)) for seg in bars] == [(0.78, 0.82), (0.89, 0.91)]
    assert not ax.containers[1].has_yerr  # fe: one repeat, no spread: no bars (per line)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("lr", "final test accuracy")


def test_a_narrow_axis_stays_linear_and_without_spread_has_no_error_bars() -> None:
    groups = [_group(1, {"m": 1}, 0.5), _group(2, {"m": 8}, 0.6)]
    ax = draw_accuracy_vs_axis("m", groups).axes[0]
    assert ax.get_xscale() == "linear"
    assert len(ax.containers) == 1 and ax.containers[0].has_yerr is False


def test_time_to_target_marks_the_points_that_missed_it() -> None:
    groups = [_group(1, {"lr": 0.1}, 0.9, time=12.5), _group(2, {"lr": 1.0}, 0.5)]
    ax = draw_time_to_target(groups, 0.95).axes[0]
    assert [b.get_width() for b in ax.patches] == [12.5, 0.0]
    assert [t.get_text() for t in ax.texts] == [" target not reached"]
    assert ax.texts[0].get_position()[1] == 1  # on the second point's row
    assert [t.get_text() for t in ax.get_yticklabels()] == ["lr=0.1", "lr=1.0"]
    assert ax.yaxis_inverted()  # best point on top
    assert ax.get_xlabel() == "seconds to 95% validation accuracy"


def test_plot_sweep_draws_numeric_axes_that_vary_and_time_only_when_reached(
    saved: list[Path], tmp_path: Path
) -> None:
    curves = [({"train.lr": 0.1, "mode": "a"}, [(1, 0.5)]),
              ({"train.lr": 0.2, "mode": "b"}, [(1, 0.6)])]  # fmt: skip
    groups = [_group(1, {"train.lr": 0.2, "mode": "b"}, 0.6, time=3.0),
              _group(2, {"train.lr": 0.1, "mode": "a"}, 0.5)]  # fmt: skip
    axes = {"train.lr": [0.1, 0.2], "mode": ["a", "b"], "seed": [1, 1], "flag": [True, False]}
    paths = plot_sweep(tmp_path, curves, groups, axes, 0.9)
    names = ["val_error.png", "accuracy_vs_train_lr.png", "time_to_target.png"]
    assert paths == saved == [tmp_path / n for n in names]
    assert plot_sweep(tmp_path, curves, [g | {"time_to_target_s": None} for g in groups], axes,
                      0.9) == [tmp_path / n for n in names[:2]]  # fmt: skip
    assert plot_sweep(tmp_path, curves, groups, axes, None)[-1].name == names[1]


def test_sweep_figures_reads_the_finished_points_curves(
    store: RunStore, saved: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished = store.create_run("p", "sweep", {})
    store.log_metrics(finished, [("val/acc1", 1, 0.4), ("val/acc1", 2, 0.7)])
    point = SimpleNamespace(params={"lr": 0.1}, run_id=finished, status="finished")
    failed = SimpleNamespace(params={"lr": 9.0}, run_id=finished, status="failed")
    groups = [_group(1, {"lr": 0.1}, 0.7)]
    result: Any = SimpleNamespace(points=[point, failed], groups=groups, directory=str(tmp_path),
                                  axes={"lr": [0.1, 9.0]}, target=None)  # fmt: skip
    drawn: list[Any] = []
    real = sweep.draw_val_error
    monkeypatch.setattr(sweep, "draw_val_error", lambda c: drawn.append(c) or real(c))
    assert sweep_figures(store, result)[0] == tmp_path / "val_error.png"
    [[curve]] = drawn
    assert curve["params"] == {"lr": 0.1} and curve["epochs"] == [1, 2]
    assert np.allclose(curve["mean"], [0.4, 0.7])
    result.points = [failed]
    assert sweep_figures(store, result) == []  # nothing finished: no figure
