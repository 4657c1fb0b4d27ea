"""Break-it round 26: converge's window of too few points, and the report's lone points.

P2 C13. `converge fit --csv csv/base.csv --x step --y loss --upto 0.05` said only "2 points
     are too few to fit a 3-parameter curve (need ≥ 4)": neither the file nor the --upto that
     cut 40 points to 2, nor a window that would do. fit, predict and regress (and
     dlperf.fit_curve, in its own argument names) now name the curve (file, or run and key),
     the window and what it kept, and suggest the smallest window of 4 points.
Report. The report's wall-time figure drew "-" with no marker: a key of one point, or a point
     between NaN values (which break a line), drew nothing; NaN values were left in with no
     word. Lone points are marked now (`dlperf.report.runs.lone`, as `runs plot` does), NaN
     values are counted out in the caption, and a subplot with nothing to draw says so. The
     phase bars left every phase above a NaN one out of its epoch's stack; NaN is left out of
     the stack now, and the caption says so. The all-reduce figure's α-β model at a single
     message size (a line of one point) drew nothing; it is a marker now.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.figure import Figure

import dlperf
from dlperf.errors import UserError
from dlperf.report.site import figures
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line as one_error_line
from tests.report.test_figures import drawn  # noqa: F401 (a fixture: the figures, as PNG URIs)

Cli = Callable[..., CliResult]


def _csv(path: Path, n: int = 40) -> Path:
    k = np.arange(1, n + 1)
    loss = 1 / (0.05 * k + 0.8) + 0.3
    path.write_text("step,loss\n" + "".join(f"{s},{v:.6f}\n" for s, v in zip(k, loss, strict=True)))
    return path


# C13


def test_a_window_of_too_few_points_names_the_curve_the_window_and_one_that_fits(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    base = str(_csv(tmp_path / "base.csv"))
    read = ("--x", "step", "--y", "loss")
    result = cli("converge", "fit", "--csv", base, *read, "--upto", "0.05")
    one_error_line(result, 2, base, "--upto 0.05 keeps 2 of its 40 points", "need ≥ 4",
                   "e.g. --upto 0.1")  # fmt: skip
    result = cli("converge", "predict", "--csv", base, *read, "--upto-step", "2.5",
                 "--target", "0.5")  # fmt: skip
    one_error_line(result, 2, base, "--upto-step 2.5 keeps 2 of its 40 points",
                   "e.g. --upto-step 4")  # fmt: skip
    other = str(_csv(tmp_path / "other.csv"))  # one curve given twice is refused (round 29)
    result = cli("converge", "regress", f"{base}:depth=20", f"{other}:depth=56", "--features",
                 "depth", *read, "--upto", "0.05")  # fmt: skip
    one_error_line(result, 2, base, "--upto 0.05 keeps 2 of its 40 points", "e.g. --upto 0.1")
    # A whole curve of 3 points: no window helps; the file (or run and key) is named.
    three = str(_csv(tmp_path / "three.csv", 3))
    result = cli("converge", "fit", "--csv", three, *read, "--upto", "0.5")
    one_error_line(result, 2, f"{three} holds 3 points", "need ≥ 4")
    assert "--upto" not in result.err
    run_id = store.create_run("r", "run", {})
    store.log_metrics(run_id, [("val/loss", e, 1.0 / e, float(e)) for e in (1, 2, 3)])
    store.finish_run(run_id, summary={})
    one_error_line(cli("converge", "fit", str(run_id)), 2, f"run {run_id}'s val/loss holds 3")
    # dlperf.fit_curve names its own arguments, not the command's flags.
    k = np.arange(1.0, 41.0)
    with pytest.raises(UserError) as e:
        dlperf.fit_curve(k, 1 / (0.05 * k + 0.8) + 0.3, upto=0.05)
    assert "upto=0.05 keeps 2 of its 40 points" in e.value.message
    assert e.value.hint is not None and "upto=0.1" in e.value.hint and "--" not in str(e.value)


# The report's figures


def _marked(line: Any) -> list[int]:
    """The indices of `line`'s points that get a marker."""
    if line.get_marker() in (None, "None", "", " "):
        return []
    every = line.get_markevery()
    return list(range(len(line.get_ydata()))) if every is None else list(every)


def test_report_figures_mark_lone_points_and_count_nan_out(
    store: RunStore,
    drawn: list[Figure],  # noqa: F811 (the fixture imported above)
) -> None:
    run_id = store.create_run("r", "run", {})
    store.log_metrics(run_id, [
        ("train/loss", 1, 2.0, 100.0),  # one point
        ("train/acc1", 1, math.nan, 100.0), ("train/acc1", 2, 0.4, 101.0),
        ("train/acc1", 3, math.nan, 102.0), ("train/acc1", 4, 0.5, 103.0),
        ("train/acc1", 5, 0.6, 104.0),
        ("train/special", 1, math.nan, 100.0),  # nothing to draw
        ("phase/data_s", 0, 0.001, 100.0), ("phase/forward_s", 0, math.nan, 100.0),
        ("phase/backward_s", 0, 0.003, 100.0),
    ])  # fmt: skip
    store.finish_run(run_id, summary={})
    run = store.get_run(run_id)
    keys = ["train/loss", "train/acc1", "train/special"]
    caption, _ = figures.against_time(store, run, keys)
    loss, acc, special = drawn[0].axes
    [line] = loss.get_lines()
    assert _marked(line) == [0]
    [line] = acc.get_lines()
    assert _marked(line) == [1]  # alone between NaNs; 4 and 5 are a line
    assert "3 values are NaN (not a number), left out" in caption
    assert "train/special" in caption
    assert [t.get_text() for t in special.texts] == ["no value to draw"]
    # The phase bars: data 1 ms, forward NaN left out, backward stacked on data.
    [(caption, _)] = figures.phases(store, run)
    ax = drawn[1].axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert all(math.isfinite(h) for h in heights)
    assert [p.get_y() for p in ax.patches][-1] == pytest.approx(1.0)
    assert "1 phase value is NaN (not a number), left out" in caption
    # The all-reduce figure's model at one message size.
    ring = {"alpha_s": 1e-5, "bandwidth_bytes_per_s": 1e9, "rmse_pct": 5.0}
    row = {"workers": 2, "bytes": 1024, "time_s": 1e-4, "busbw_gbps": 1.0}
    summary = {"backend": "gloo", "workers": 2, "ring_model": ring, "rows": [row]}
    allreduce_id = store.create_run("a", "allreduce", {})
    store.finish_run(allreduce_id, summary=summary)
    assert len(figures.allreduce([store.get_run(allreduce_id)], "t")) == 1
    for ax in drawn[2].axes:
        assert [len(_marked(line)) for line in ax.get_lines()] == [1, 1]
