"""Break-it round 30, P2 causes C6, C7 and C11: converge's curves of values far apart, CSVs
with no header, speed tables of huge step times.

C6. A curve whose values fell below about 1e-155 of its largest (2, 1, 0.5, then 1e-200), or a
steep one (10^(−20k), k^−150), was a traceback (ValueError from scipy: 1/(l − β2) overflowed
in the Optimus grid, the power form's Jacobian in least squares). Now values below 1e-100 of
the largest are fitted as 0 (`curve.in_units`) and the power form's steps are scaled by the
first step (`curve.step_scale`). A value of 1e308 among values near 1 was refused with "divide
it by 1e308", which led to the same traceback: now it is named by its line and called a typo;
divided anyway, the curve is refused as one point to fit.
C7. A CSV with no header line: "has no column 'step' (columns: 1, 2.118...)". Now its first
line is named as numbers, and the fix is a line naming the columns.
C11. `converge speed fit` of a step time of 1e308 blamed "--fix :", which was not given
(Optimus), or was scipy's "Residuals are not finite" (Pollux). Now the file, line and value.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
XY = ["--x", "step", "--y", "loss"]
SPEED = ["converge", "speed", "fit", "--csv"]


def _csv(path: Path, values: list[float]) -> str:
    path.write_text("step,loss\n" + "".join(f"{k},{v!r}\n" for k, v in enumerate(values, 1)))
    return str(path)


# --- C6: values far below the curve's largest ------------------------------------------------


CURVES = {
    "tail-1e-200": [2.0, 1.0, 0.5] + [1e-200] * 27,
    "tail-1e-310": [2.0, 1.0, 0.5] + [1e-310] * 27,
    "geometric": [10.0 ** (-20 * k) for k in range(1, 31)],
    "steep-power": [float(k) ** -150 for k in range(1, 31)],
}


def test_a_curve_of_values_far_below_its_largest_is_fitted(cli: Cli, tmp_path: Path) -> None:
    """The report's curve, by the command. Before: a traceback, ValueError "array must not
    contain infs or NaNs" from least squares' SVD."""
    r = cli("--db", str(tmp_path / "c.db"), "converge", "fit", "--csv",
            _csv(tmp_path / "c.csv", CURVES["tail-1e-200"]), *XY)  # fmt: skip
    assert r.code == 0, r.err
    assert "optimus" in r.out and "power" in r.out


@pytest.mark.parametrize("name", list(CURVES))
def test_every_fit_takes_values_far_below_the_largest(name: str) -> None:
    """Both forms, their bootstrap and the ensemble, on each curve (the command's 200 refits
    each cost seconds). Before: ValueError from nnls in the grid (1e-310), or from least
    squares (the others, the power form of the steep ones)."""
    from dlperf.converge import curve, ensemble

    y = np.array(CURVES[name])
    k = np.arange(1.0, len(y) + 1)
    for form in curve.PARAMS:
        _, p = curve.fit(k, y, form)
        assert np.all(np.isfinite(curve.bootstrap(k, y, form, p, n=5)))
    ensemble.fit(k, y)


def test_a_value_of_1e308_is_named_and_its_fix_works(cli: Cli, tmp_path: Path) -> None:
    """Line 4 holds 1e308 among values near 1. Before: "divide it by 1e308", and the curve so
    divided was a traceback. Now: a typo, to correct or leave out; divided anyway, one point to
    fit."""
    db = ["--db", str(tmp_path / "c.db")]
    curve = [1 / (0.05 * k + 0.5) + 0.3 for k in range(1, 31)]
    big = _csv(tmp_path / "big.csv", [*curve[:2], 1e308, *curve[3:]])
    one_line(
        cli(*db, "converge", "fit", "--csv", big, *XY),
        2,
        f"error: {big}: line 4: the curve's values reach 1e+308; a fit squares them, past what "
        "a float holds (every other value is below 1e-100 of it, which a fit reads as 0: a "
        "typo? correct it, or leave it out)",
    )
    divided = _csv(tmp_path / "divided.csv", [v / 1e308 for v in curve[:2]] + [1.0]
                   + [v / 1e308 for v in curve[3:]])  # fmt: skip
    for command in (["fit"], ["predict", "--target", "0.1"]):
        one_line(
            cli(*db, "converge", *command, "--csv", divided, *XY),
            2,
            f"error: {divided}: line 4 holds loss 1, and the 29 other values fitted lie below "
            "1e-100 of it, which a fit reads as 0: one point to fit (a typo? correct it;",
        )


def test_values_near_1e200_are_told_to_be_divided(cli: Cli, tmp_path: Path) -> None:
    """Every value near 1e200: dividing the column is the fix, and so divided it fits."""
    from dlperf.converge import curve

    values = [(1 / (0.05 * k + 0.5) + 0.3) * 1e200 for k in range(1, 31)]
    path = _csv(tmp_path / "c.csv", values)
    one_line(cli("--db", str(tmp_path / "c.db"), "converge", "fit", "--csv", path, *XY), 2,
             f"error: {path}: line 2: the curve's values reach 2.12e+200",
             "(scale the column, e.g. divide it by 1e200)")  # fmt: skip
    fitted, _ = curve.fit(np.arange(1.0, 31.0), np.array(values) / 1e200)
    assert fitted.converged


def test_the_power_form_of_a_curve_starting_at_step_1_is_unchanged() -> None:
    """The power form's steps are now divided by the first step, not the last: the fit of
    a·k^−b + c is the same curve either way."""
    from dlperf.converge import curve

    k = np.arange(1.0, 41.0)
    y = 2.0 * k**-0.7 + 0.25 + 0.002 * np.sin(k)
    fitted, p = curve.fit(k, y, "power")
    assert fitted.converged
    np.testing.assert_allclose(curve.model("power")(k, p), y, atol=0.01)
    np.testing.assert_allclose(p, [2.0, 0.7, 0.25], rtol=0.05)


# --- C7: a CSV with no header ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "fix"),
    [(XY, "add a first line naming the columns: step,loss"),
     (["--y", "loss"], "add a first line naming its 2 columns, loss among them")],
)  # fmt: skip
def test_a_csv_without_a_header_is_said_to_have_none(
    cli: Cli, tmp_path: Path, given: list[str], fix: str
) -> None:
    """Before: "nohdr.csv has no column 'step' (columns: 1, 2.118181818181818)", no fix."""
    path = tmp_path / "nohdr.csv"
    path.write_text("".join(f"{k},{1 / (0.05 * k + 0.5) + 0.3!r}\n" for k in range(1, 41)))
    one_line(
        cli("--db", str(tmp_path / "c.db"), "converge", "fit", "--csv", str(path), *given),
        2,
        f"error: {path}:1: the first line '1,2.118181818181818' is numbers: the file has no "
        f"header ({fix})",
    )


# --- C11: a huge step time in a speed table --------------------------------------------------


@pytest.mark.parametrize("value", ["1e308", "1e200"])
def test_a_huge_step_time_is_named_by_its_line(cli: Cli, tmp_path: Path, value: str) -> None:
    """Before: "--fix : the optimus-async step time ... comes out 0 s against a measured
    1e+308 s", no --fix given."""
    path = tmp_path / "sp.csv"
    path.write_text("workers,ps,global_batch,step_time_s\n1,1,64,0.5\n2,1,128,0.3\n"
                    f"4,2,256,0.2\n8,2,512,{value}\n")  # fmt: skip
    one_line(
        cli("--db", str(tmp_path / "c.db"), *SPEED, str(path), "--model", "optimus-async"),
        2,
        f"error: {path}:5: step_time_s {float(value):g} is too large to fit: a fit squares the "
        "times, past what a float holds (the column is seconds: a typo, or another unit?)",
    )


def test_a_huge_step_time_in_a_pollux_trace_is_named_by_its_line(cli: Cli, tmp_path: Path) -> None:
    """Before: a traceback, scipy's "Residuals are not finite in the initial point"."""
    source = Path(__file__).parents[2] / "examples" / "pollux" / "cifar10_placements.csv"
    lines = source.read_text().splitlines()
    placement, bsz, _, sync = lines[4].split(",")
    lines[4] = f"{placement},{bsz},1e308,{sync}"
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines) + "\n")
    one_line(
        cli("--db", str(tmp_path / "c.db"), *SPEED, str(path), "--model", "pollux"),
        2,
        f"error: {path}:5: step_time 1e+308 is too large to fit",
    )
