"""Break-it round 38, the figures (docs/faults.md, the thirty-eighth round).

C4: a `$` pair in a run name, metric key or file name was read as matplotlib's maths markup:
`bad $\\foo{$ name` ended `runs plot` and `report` in a 90-line ParseFatalException traceback
(exit 1, no site at all), `train/a$b$c` was drawn as "train/abc" with b in maths italics.
Every text dlperf puts on a figure is drawn as written now; tick labels that matplotlib
formats from numbers keep their maths (10^3 on a log axis).

C7: `runs plot --key val/error` of a val/acc1 logged in percent drew 1 - 53 = -52 on an axis
labelled as a fraction, with no warning. A value outside [0, 1] on a fraction axis is warned of.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text

import dlperf
from dlperf.report import literal_text
from dlperf.report.runs import draw_runs
from dlperf.report.site.figures import against_time
from dlperf.store import RunStore

NAME = "bad $\\foo{$ name"
KEYS = ("train/a$b$c", "train/$\\foo{$")


def parsed_as_maths(text: Text) -> bool:
    """Whether matplotlib draws `text` as maths markup (its own test, at drawing time)."""
    return bool(text._preprocess_math(text.get_text())[1])


@pytest.fixture
def dollar_run(db: str) -> int:
    with dlperf.track(NAME, config={"model": "$\\bar{$"}, store=db) as run:
        for step in range(1, 4):
            run.log(step=step, **{key: 1.0 / step for key in (*KEYS, "train/loss")})
    return run.id


def test_c4_run_name_and_keys_with_dollars_are_drawn_as_written(
    store: RunStore, dollar_run: int
) -> None:
    fig, _ = draw_runs(store, [dollar_run], list(KEYS), "step")
    fig.savefig(io.BytesIO(), format="png")  # was: ParseFatalException: Unknown symbol: \foo
    shown = [t for t in fig.findobj(Text) if "$" in t.get_text()]
    title = f"{NAME}: {', '.join(KEYS)} against step"
    assert {t.get_text() for t in shown} >= {title, f"run {dollar_run}: {NAME}", *KEYS}
    assert not [t.get_text() for t in shown if parsed_as_maths(t)]


def test_c4_runs_plot_and_report_end_well(
    cli: Callable[..., Any], dollar_run: int, tmp_path: Path
) -> None:
    result = cli("runs", "plot", str(dollar_run), "--key", KEYS[1], "--out", "n.png")
    assert (result.code, result.err) == (0, "saved n.png\n")
    assert (tmp_path / "n.png").stat().st_size > 0
    result = cli("report", "--out", "site")
    assert result.code == 0, result.err
    assert "Traceback" not in result.err
    assert (tmp_path / "site" / "index.html").is_file()


def test_c4_numbers_keep_their_maths_and_tick_labels_given_are_written() -> None:
    fig = Figure()
    logs, names = fig.subplots(1, 2)
    logs.loglog([1, 10, 1000], [1, 100, 1e5])
    names.bar([0, 1], [1, 2])
    names.set_xticks([0, 1], ["a$b$c", "$\\foo{$"])
    literal_text(fig)
    fig.savefig(io.BytesIO(), format="png")
    numbers = [t for t in logs.get_xticklabels() if t.get_text()]
    assert numbers and all("mathdefault" in t.get_text() and parsed_as_maths(t) for t in numbers)
    given = names.get_xticklabels()
    assert [t.get_text() for t in given] == ["a$b$c", "$\\foo{$"]
    assert not any(parsed_as_maths(t) for t in given)


@pytest.mark.usefixtures("fewer_bootstrap_fits")
def test_c4_a_csv_file_name_with_dollars_is_the_fit_figures_title(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    csv = tmp_path / "my$\\foo{$.csv"
    rows = [f"{k},{1 / (0.05 * k + 0.5) + 0.2:.6f}" for k in range(1, 41)]
    csv.write_text("\n".join(["step,loss", *rows]) + "\n")
    result = cli("converge", "fit", "--csv", str(csv), "--x", "step", "--y", "loss",
                 "--plot", "c.png")  # fmt: skip
    assert result.code == 0, result.err
    assert (tmp_path / "c.png").stat().st_size > 0


# C7: `runs plot --key val/error` of a val/acc1 stored in percent (51, 52, 53) drew 1 - 53 = -52
# on an axis labelled "(fraction, 1 - val/acc1)", with no warning; converge refuses the same
# values ("percentages? divide by 100"). A fraction axis now warns of a value outside [0, 1].


def test_c7_an_accuracy_in_percent_is_warned_of_on_a_fraction_axis(
    store: RunStore, db: str
) -> None:
    with dlperf.track("pct", store=db) as pct:
        for step in (1, 2, 3):
            pct.log(step=step, **{"val/acc1": 50.0 + step, "train/loss": 1.0 / step})
    with dlperf.track("fraction", store=db) as fraction:
        for step in (1, 2):
            fraction.log(step=step, **{"val/acc1": step / 2, "train/loss": 1.0 / step})
    _, plot = draw_runs(store, [pct.id, fraction.id], ["val/error", "val/acc1"], "step",
                        fitted=False)  # fmt: skip
    assert plot.warnings == [
        f"run {pct.id}: val/acc1 holds 51 (3 values outside [0, 1]), not a fraction (percent?): "
        "val/error = 1 - val/acc1 is drawn at -50",
        f"run {pct.id}: val/acc1 holds 51 (3 values outside [0, 1]), not a fraction (percent?)",
    ]  # the fraction run (0.5, 1.0: the ends included) is not warned of
    # the report's wall-time figure draws val/acc1 on the same fraction axis: its caption says so
    caption, _ = against_time(store, store.get_run(pct.id), ["val/acc1"])
    assert caption == f"val/acc1 against wall time ({plot.warnings[1]})"
