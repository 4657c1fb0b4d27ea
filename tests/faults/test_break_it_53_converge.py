"""Break-it round 53, fixer G4: T3 causes C1, C2 and C3, `converge plan` of a curve whose steps
pass what a float counts, of a minimal curve with "last_step": 0, and `converge predict`'s
step columns.

C1. A curve that falls to 0.3 loss with beta0 = 1e-308 reaches 0.31 after about 1e+310 steps,
past what a float holds; `converge plan --target 0.31` said "unreachable: the curve ... levels
off at 0.3 loss", 0.3 < 0.31: the reason contradicted the target it refused (so did the curve
`converge regress --predict` extrapolated to depth=14820, "levels off at 0 loss" for 0.5). Now
it says how many steps that is, that a float does not count them, and that beta0 makes it so;
"levels off" stays for targets at or below the floor. `converge regress --target` printed
"unreachable" for the same curve; now "more steps than a float counts".
C2. A minimal curve with "last_step": 0 (docs/converge.md's own example) was "the Optimus fit
of FILE up to step 0", the same curve without the key "the Optimus curve in FILE". Now both
are "the Optimus curve in FILE"; a minimal curve with steps done says "(N steps done)", and
only `converge fit --json` (its n_points) is called a fit.
C3. `converge predict --form optimus` printed the predicted step 738971604054 beside its
interval 738,971,604,054 (an int and floats, formatted apart); the ensemble's table printed an
interval of 9000 beside an actual step of 10,000, and `converge regress` its step 20126 beside
the measured 19,000. Now every step cell is formatted alike (formatting.fmt of a float).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.converge.plan import remaining_steps
from dlperf.converge.results import EnsembleStepPrediction, StepPrediction
from dlperf.converge.views import ensemble_blocks, form_blocks
from dlperf.errors import UserError
from dlperf.formatting import fmt
from dlperf.table import Table
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

SPEED = ("--speed-params", "theta0=0.01,theta1=0.1,theta2=0.2,theta3=0.01,theta4=0.01",
         "--batch", "256", "--ps", "1", "--workers", "1")  # fmt: skip


def _write(tmp_path: Path, name: str, document: dict[str, object]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


# --- C1: a crossing past what a float counts ---------------------------------------------------


def test_plan_says_the_steps_overflow_not_that_the_curve_levels_off(
    cli: Cli, tmp_path: Path
) -> None:
    _write(tmp_path, "c9.json", {"metric": "loss", "beta0": 1e-308, "beta1": 0, "beta2": 0.3})
    r = cli("converge", "plan", "--curve", "c9.json", *SPEED, "--target", "0.31")
    # before: "target 0.31 is unreachable: the curve in c9.json levels off at 0.3 loss"
    one_line(r, 2, "target 0.31 takes about 1e+310 steps by the curve in c9.json (beta0 = 1e-308)",
             "more than a float counts")  # fmt: skip
    assert "unreachable" not in r.err
    # At or below the floor it still levels off there.
    r = cli("converge", "plan", "--curve", "c9.json", *SPEED, "--target", "0.3")
    one_line(r, 2, "target 0.3 is unreachable: the curve in c9.json levels off at 0.3 loss")


def test_plan_of_a_regress_prediction_past_a_float(cli: Cli, tmp_path: Path) -> None:
    """The coefficients `converge regress --predict depth=14820` extrapolated (T3's rg.json)."""
    prediction = {"features": {"depth": 14820}, "basis": "extrapolated", "beta0": 1.04e-310,
                  "beta1": 1.01e-146, "beta2": 0.0}  # fmt: skip
    _write(tmp_path, "rg.json", {"metric": "loss", "coef": {}, "prediction": prediction})
    r = cli("converge", "plan", "--curve", "rg.json", *SPEED, "--target", "0.5")
    # before: "target 0.5 is unreachable: the curve in rg.json levels off at 0 loss"
    one_line(
        r, 2, "target 0.5 takes about 1.9e+310 steps by the curve in rg.json (beta0 = 1.04e-310)"
    )
    assert "unreachable" not in r.err


def test_an_accuracy_target_past_a_float_in_accuracy(tmp_path: Path) -> None:
    path = _write(tmp_path, "acc.json", {"metric": "accuracy", "beta0": 1e-308, "beta1": 0,
                                         "beta2": 0.05})  # fmt: skip
    with pytest.raises(UserError) as caught:
        remaining_steps(path, 0.9)  # error 0.1, above the floor 0.05 (accuracy 0.95)
    assert "target 0.9 takes about 2e+309 steps" in str(caught.value)
    assert "the 0.95 accuracy it levels off at" in (caught.value.hint or "")


def test_a_target_a_hair_above_the_floor_names_the_gap(tmp_path: Path) -> None:
    """1/(target − beta2) itself overflows: beta0 is no culprit there."""
    path = _write(tmp_path, "gap.json", {"metric": "loss", "beta0": 1, "beta1": 0, "beta2": 0})
    with pytest.raises(UserError) as caught:
        remaining_steps(path, 1e-310)
    assert "(within 1e-310 loss of where it levels off)" in str(caught.value)
    assert "beta0 =" not in str(caught.value)


# --- C2: "last_step": 0 is no fit ------------------------------------------------------------


def test_last_step_0_is_the_curve_without_it(tmp_path: Path) -> None:
    coefficients = {"metric": "loss", "beta0": 0.01, "beta1": 1, "beta2": 0.3}
    without = _write(tmp_path, "without.json", coefficients)
    with_0 = _write(tmp_path, "with.json", {**coefficients, "last_step": 0})
    done = _write(tmp_path, "done.json", {**coefficients, "last_step": 50})
    # before: "the Optimus fit of with.json up to step 0"
    assert remaining_steps(with_0, 0.5).basis == "the Optimus curve in with.json"
    assert remaining_steps(without, 0.5).basis == "the Optimus curve in without.json"
    assert remaining_steps(done, 0.5).basis == "the Optimus curve in done.json (50 steps done)"
    assert remaining_steps(done, 0.5).steps == remaining_steps(with_0, 0.5).steps - 50
    fitted = _write(tmp_path, "fit.json", {**coefficients, "source": "run 3", "n_points": 20,
                                           "last_step": 200})  # fmt: skip
    assert (
        remaining_steps(fitted, 0.5).basis == "the Optimus fit of run 3 to 20 points up to step 200"
    )


# --- C3: the step columns formatted alike -----------------------------------------------------


def _cells(table: Table) -> list[str]:
    """The first row of `table` as the console prints it."""
    return [fmt(value) for value in table.rows[0]]


def test_predict_formats_the_step_as_its_interval() -> None:
    big = StepPrediction(source="clean.csv", form="optimus", target=0.3, reachable=True,
                         predicted_step=738971604054, interval=(738971604054.0, 738971604054.0),
                         predicted_epoch=None, actual_step=None, error_pct=None, asymptote=0.3,
                         plateau=0.3, n_points=40, basis="")  # fmt: skip
    table = form_blocks([big], "optimus", 0.3, "loss")[0]
    assert isinstance(table, Table)
    # before: 738971604054 │ 738,971,604,054 │ 738,971,604,054
    assert _cells(table)[1:4] == ["738,971,604,054"] * 3


def test_ensemble_formats_its_steps_alike() -> None:
    d = EnsembleStepPrediction(source="long.csv", form="ensemble", target=0.8, verdict="answer",
                               reason=None, reachable=True, p_reachable=1.0, predicted_step=10000,
                               interval=(9000, 10000), predicted_epoch=None, actual_step=10000.0,
                               error_pct=0.0, asymptote=0.3, plateau=0.3,
                               plateau_interval=(0.29, 0.31), val_size=None, family_weights={},
                               n_points=20, basis="")  # fmt: skip
    table = ensemble_blocks([d], 0.8, "loss")[0]
    assert isinstance(table, Table)
    cells = _cells(table)
    # before: 10000 │ 9000 │ 10000 │ ... │ 10,000
    assert cells[1:4] == ["10,000", "9000", "10,000"] and cells[6] == "10,000"


def _optimus_csv(tmp_path: Path, name: str, beta0: float, last: int) -> str:
    rows = "".join(f"{k},{1 / (beta0 * k + 1) + 0.3!r}\n" for k in range(100, last + 1, 100))
    (tmp_path / name).write_text("step,loss\n" + rows)
    return name


@pytest.mark.usefixtures("fewer_bootstrap_fits")
def test_regress_prints_its_steps_alike_and_says_why_none(cli: Cli, tmp_path: Path) -> None:
    runs = (f"{_optimus_csv(tmp_path, 'd20.csv', 2e-4, 4000)}:depth=20",
            f"{_optimus_csv(tmp_path, 'd32.csv', 1e-4, 4000)}:depth=32")  # fmt: skip
    measured = f"{_optimus_csv(tmp_path, 'd26.csv', 1.5e-4, 20000)}:depth=26"
    regress = ("converge", "regress", *runs, "--features", "depth", "--x", "step", "--y", "loss")
    r = cli(*regress, "--predict", "depth=26", "--target", "0.56", "--compare", measured)
    assert r.code == 0, r.err
    rows = {line.split("│")[0].strip(): line.split("│")[1].strip() for line in r.out.splitlines()
            if "│" in line}  # fmt: skip
    # before: 20126 beside the measured 19,000
    assert re.fullmatch(r"\d\d,\d\d\d", rows["step reaching 0.56"]), rows
    assert rows["measured step reaching 0.56"] == "19,000"
    # Extrapolated to depth=12300, beta0 is 1e-312: the curve passes 0.5 past a float's count.
    r = cli(*regress, "--predict", "depth=12300", "--target", "0.5")
    assert r.code == 0, r.err
    assert "step reaching 0.5 │ more steps than a float counts" in r.out  # before: unreachable
