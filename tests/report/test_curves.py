"""dlperf.report.curves: the fit, band, plan and regression figures (pyplot, closed after
each), with the figure caught at savefig; and check_path, which fails before the work."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from dlperf.converge.plan import Allocation
from dlperf.errors import UserError
from dlperf.report import curves


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Figure]:
    monkeypatch.chdir(tmp_path)  # the tests' relative names: each gets an empty file
    saved: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: saved.append(fig))
    return saved


def _lines(fig: Figure) -> dict[str, Any]:
    return {line.get_label(): line for line in fig.axes[0].get_lines()}


def test_check_path_refuses_a_format_or_a_directory_that_cannot_be_written(
    tmp_path: Path,
) -> None:
    curves.check_path(tmp_path / "f.svg")
    assert list(tmp_path.iterdir()) == []  # checked, nothing left behind
    with pytest.raises(UserError, match=r"f\.txt: not a figure format matplotlib writes"):
        curves.check_path(tmp_path / "f.txt")
    with pytest.raises(FileNotFoundError):
        curves.check_path(tmp_path / "missing" / "f.png")  # never made: a typo is not a tree


def test_plot_curves_draws_each_form_back_in_accuracy_and_closes_its_figure(
    drawn: list[Figure],
) -> None:
    steps = np.array([1.0, 2.0, 3.0, 4.0])
    curve = SimpleNamespace(legend="run 1", steps=steps, values=np.array([0.5, 0.7, 0.8, 0.85]))
    report = SimpleNamespace(curve=curve, n_fit=3, params={"power": np.array([0.5, 1.0, 0.1])})
    curves.plot_curves(Path("c.png"), [report], "accuracy")  # type: ignore[list-item]
    assert plt.get_fignums() == []
    lines = _lines(drawn[0])
    assert list(lines["run 1 measured"].get_xdata()) == [1.0, 2.0, 3.0]  # the fit window
    fitted = lines["run 1 power"]
    k = fitted.get_xdata()
    assert k[0] == 1.0 and k[-1] == 4.0 and len(k) == 400
    # error 0.5 k^-1 + 0.1, back to accuracy: 1 - 0.6 at step 1, 1 - 0.225 at step 4
    assert fitted.get_ydata()[[0, -1]] == pytest.approx([0.4, 0.775])
    assert drawn[0].axes[0].get_ylabel() == "accuracy"


def test_plot_bands_draws_the_median_band_and_target(drawn: list[Figure]) -> None:
    k = np.array([1.0, 2.0, 3.0])
    grid = np.linspace(1, 10, 5)
    band = (grid, grid * 0.0, grid * 0.0 + 0.5, grid * 0.0 + 1.0)
    curves.plot_bands(Path("b.png"), [("r", k, k, 2, band)], "loss", 0.25)
    assert plt.get_fignums() == []
    lines = _lines(drawn[0])
    assert list(lines["r ensemble median"].get_ydata()) == [0.5] * 5
    assert list(lines["target 0.25"].get_ydata()) == [0.25, 0.25]
    assert [c.get_label() for c in drawn[0].axes[0].collections] == ["r 90% band"]


def test_plot_plan_draws_hours_per_server_count_and_marks_the_best(
    drawn: list[Figure],
) -> None:
    rows = [
        Allocation(1, 2, 7200.0, 4.0, cheapest=True),
        Allocation(1, 4, 3600.0, 5.0),
        Allocation(2, 4, 1800.0, 6.0, fastest=True),
    ]
    curves.plot_plan(Path("p.png"), rows)
    lines = _lines(drawn[0])
    assert list(lines["1 PS"].get_ydata()) == [2.0, 1.0]  # hours
    assert list(lines["2 PS"].get_xdata()) == [4]
    assert list(lines["fastest: 4 workers, 2 PS"].get_ydata()) == [0.5]
    assert list(lines["cheapest: 2 workers, 1 PS"].get_xdata()) == [2]
    assert drawn[0].axes[0].get_ylabel() == "time to target (h)"


def test_plot_regression_draws_each_run_the_unseen_and_the_compared(
    drawn: list[Figure],
) -> None:
    run = SimpleNamespace(label="lr=0.1", steps=[1, 2], values=[1.0, 0.5], grid=[1, 2],
                          predicted=[0.9, 0.6])  # fmt: skip
    compared = SimpleNamespace(legend="run 9", steps=[1, 2], values=[0.8, 0.4])
    curves.plot_regression(
        Path("r.png"), [run], (np.array([1, 2]), np.array([0.7, 0.3])), "loss",  # type: ignore[list-item]
        "lr=0.2", compared,  # type: ignore[arg-type]
    )  # fmt: skip
    assert set(_lines(drawn[0])) == {
        "lr=0.1 measured", "lr=0.1 fitted", "lr=0.2 predicted", "run 9 measured",
    }  # fmt: skip
    assert plt.get_fignums() == []
