"""The sixteenth break-it round (converge, part C: A and B).

A: a target the curve is already at by its first point. `curve.steps_to` clamped such a
crossing to step 0: `converge regress --predict depth=56 --target 0.5` on exact Optimus curves
(the predicted curve is at 0.473 at step 1, its asymptote 0.278) printed "step reaching 0.5 │
unreachable" (the table tested the step's truth: 0 is false) while its JSON said 0, and scored
the compared run −100 %; `converge predict --form optimus` said step 0, interval [0, 0], error
−100 %, and `--form ensemble` gave the interval [0, 1] ([0, 40] on an axis measured every 40
steps). Step 0 is no measured step. Now a crossing at or before the first step of the fit
window (of the regressed runs, for `regress`) is reached at that step, no interval bound lies
below it, and the text says the curve is already at or below the target there (JSON:
`at_first_step`).

B: `converge plan` planned the fractional k* − last_step (JSON `steps` 1416.67, its time and
cost for that many steps; the text said 1417). Now the steps to go are whole, k* rounded up as
`predict` rounds it, and the time and cost are for that whole count.

C (inconclusive in the report, a bug): `converge speed fit --model pollux` counted α_g and β_g
as two coefficients the measurements determine even at one batch per worker, where only their
sum α_g + β_g·m is (its own `undetermined` says so). A weak-scaling study of 1-4 workers on one
node, whose 4 measurements determine that sum, α_intra, β_intra and γ exactly, was refused as
"4 measurements are too few for the 5 coefficients". Now that pair counts once; a study of 1
and 2 workers is still refused, rightly: its one 2-worker step time cannot tell the sync
constant from the overlap γ ("2 measurements are too few for the 3 coefficients").
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CliResult

pytestmark = pytest.mark.usefixtures("fewer_bootstrap_fits")  # 20 refits, not 200

Cli = Callable[..., CliResult]
STEPS = np.arange(1.0, 61.0)


def _betas(depth: int) -> tuple[float, float, float]:
    """The break-it report's exact Optimus curves: log β linear in the depth."""
    return math.exp(-2 - 0.01 * depth), math.exp(0.5 + 0.02 * depth), math.exp(-1 - 0.005 * depth)


def _write(path: Path, steps: np.ndarray, values: np.ndarray) -> Path:
    rows = "".join(f"{k:g},{float(v)!r}\n" for k, v in zip(steps, values, strict=True))
    path.write_text("step,loss\n" + rows)
    return path


def _optimus_csv(tmp_path: Path, depth: int) -> Path:
    b0, b1, b2 = _betas(depth)
    return _write(tmp_path / f"reg{depth}.csv", STEPS, 1.0 / (b0 * STEPS + b1) + b2)


def _ok(r: CliResult) -> CliResult:
    assert r.code == 0, (r.code, r.err)
    assert "Traceback" not in r.err, r.err
    return r


def _regress(cli: Cli, tmp_path: Path, *extra: str) -> CliResult:
    sources = [f"{_optimus_csv(tmp_path, d)}:depth={d}" for d in (20, 32, 44)]
    compare = f"{_optimus_csv(tmp_path, 56)}:depth=56"
    return _ok(cli("converge", "regress", *sources, "--features", "depth", "--x", "step",
                   "--y", "loss", "--predict", "depth=56", "--target", "0.5",
                   "--compare", compare, *extra))  # fmt: skip


def test_regress_reaches_a_target_at_its_first_step_not_unreachable(
    cli: Cli, tmp_path: Path
) -> None:
    """The repro: the predicted curve is at 0.473 ≤ 0.5 at step 1, the runs' first step (its
    crossing k* lies before step 0, which steps_to clamped to 0)."""
    b0, b1, b2 = _betas(56)
    assert 1.0 / (b0 + b1) + b2 == pytest.approx(0.473, abs=5e-4)
    assert (1.0 / (0.5 - b2) - b1) / b0 < 0.0
    doc = json.loads(_regress(cli, tmp_path, "--json").out)
    prediction = doc["prediction"]
    assert prediction["predicted_step"] == 1 and prediction["at_first_step"] is True
    assert prediction["compare"]["actual_step"] == 1.0
    assert prediction["compare"]["error_pct"] == 0.0  # was −100
    out = _regress(cli, tmp_path).out
    assert "unreachable" not in out
    rows = {line.split("│")[0].strip(): line.split("│")[1].strip() for line in out.splitlines()
            if "│" in line}  # fmt: skip
    assert rows["step reaching 0.5"] == "1"
    assert rows["error % on the steps (and epochs) to the target"] == "0"
    assert (
        "the predicted curve is already at or below the target 0.5 loss at the runs' first step 1"
        in out.splitlines()
    )


def test_predict_optimus_at_the_target_by_the_first_point_says_that_step(
    cli: Cli, tmp_path: Path
) -> None:
    path = _optimus_csv(tmp_path, 56)
    args = ("converge", "predict", "--csv", str(path), "--x", "step", "--y", "loss",
            "--upto", "0.5", "--target", "0.5", "--form", "optimus")  # fmt: skip
    doc = json.loads(_ok(cli(*args, "--json")).out)
    assert doc["reachable"] is True and doc["at_first_step"] is True
    assert doc["predicted_step"] == 1 and doc["interval"] == [1.0, 1.0], doc  # was 0, [0, 0]
    assert doc["actual_step"] == 1.0 and doc["error_pct"] == 0.0  # was −100
    out = _ok(cli(*args)).out
    assert (
        "reg56.csv: the fitted curve is already at or below the target 0.5 loss at its first "
        "step 1" in out.splitlines()
    )


def test_predict_optimus_puts_a_crossing_before_a_later_first_step_at_it(
    cli: Cli, tmp_path: Path
) -> None:
    """Steps measured every 40 (an epoch axis): the fitted curve crosses 0.9 at step 1.52,
    before the first measured step 40, which is where it is reached."""
    steps = 40.0 * STEPS[:30]
    path = _write(tmp_path / "e.csv", steps, 1.0 / (0.012 * steps + 1.8) + 0.35)
    doc = json.loads(_ok(cli("converge", "predict", "--csv", str(path), "--x", "step",
                             "--y", "loss", "--target", "0.9", "--form", "optimus",
                             "--json")).out)  # fmt: skip
    assert doc["predicted_step"] == 40 and doc["at_first_step"] is True, doc
    assert doc["interval"][0] == 40.0, doc
    later = json.loads(_ok(cli("converge", "predict", "--csv", str(path), "--x", "step",
                               "--y", "loss", "--target", "0.5", "--form", "optimus",
                               "--json")).out)  # fmt: skip
    # ... and 0.5 at k = 405.56, inside the window: step 406 as before.
    assert later["predicted_step"] == 406 and later["at_first_step"] is False, later


def test_ensemble_interval_starts_at_the_first_measured_step(cli: Cli, tmp_path: Path) -> None:
    """Measured every 40 steps from step 40, already below the target there: [40, 40], not
    [0, 40]."""
    steps = 40.0 * STEPS[:30]
    path = _write(tmp_path / "e.csv", steps, 1.0 / (0.012 * steps + 1.8) + 0.35)
    args = ("converge", "predict", "--csv", str(path), "--x", "step", "--y", "loss",
            "--target", "0.9")  # fmt: skip
    doc = json.loads(_ok(cli(*args, "--json")).out)
    assert doc["verdict"] == "answer" and doc["predicted_step"] == 40, doc
    assert doc["interval"] == [40.0, 40.0] and doc["at_first_step"] is True, doc
    assert doc["actual_step"] == 40.0 and doc["error_pct"] == 0.0
    out = _ok(cli(*args)).out
    assert (
        "e.csv: the measured curve is already at or below the target 0.9 loss at its first "
        "step 40" in out.splitlines()
    )


SPEED = "theta0=0.001,theta1=0.1,theta2=0.2,theta3=0.01,theta4=0.02"


def test_plan_counts_whole_steps_to_go(cli: Cli, tmp_path: Path) -> None:
    """k* = (1/(0.4 − 0.35) − 1.8)/0.012 = 1516.67: reached at step 1517, 1417 steps after the
    100 done; each takes 0.256 + 0.1 + 0.2 + 0.01 + 0.02 = 0.586 s at w = p = 1, M = 256."""
    path = tmp_path / "curve1.json"
    path.write_text('{"metric": "loss", "beta0": 0.012, "beta1": 1.8, "beta2": 0.35, '
                    '"last_step": 100}')  # fmt: skip
    args = ("converge", "plan", "--curve", str(path), "--target", "0.4", "--batch", "256",
            "--ps", "1", "--workers", "1", "--speed-params", SPEED,
            "--price-per-hour", "2.5")  # fmt: skip
    doc = json.loads(_ok(cli(*args, "--json")).out)
    assert doc["steps"] == 1417, doc  # was 1416.6666666666652
    (row,) = doc["allocations"]
    assert row["time_s"] == pytest.approx(1417 * 0.586, rel=1e-12)  # 830.362, was 830.167
    assert row["cost"] == pytest.approx(1417 * 0.586 / 3600 * 2 * 2.5, rel=1e-12)
    assert "1417 steps to 0.4" in _ok(cli(*args)).out


# Pollux's model on one node at local batch 32: T_grad = 0.01 + 0.001·32, T_sync = 0.02 +
# 0.005·(K − 2) for K ≥ 2, overlapped with γ = 1.5.
POLLUX = {"alpha_intra": 0.02, "beta_intra": 0.005, "gamma": 1.5}


def _weak_study(tmp_path: Path, workers: range) -> Path:
    rows = []
    for k in workers:
        t_grad = 0.01 + 0.001 * 32
        t_sync = 0.0 if k == 1 else POLLUX["alpha_intra"] + POLLUX["beta_intra"] * (k - 2)
        gamma = POLLUX["gamma"]
        t_iter = (t_grad**gamma + t_sync**gamma) ** (1 / gamma)
        rows.append(f"{k},1,{32 * k},{t_iter!r},{t_iter - t_grad!r}\n")
    path = tmp_path / "weak.csv"
    path.write_text("workers,nodes,global_batch,step_time_s,sync_time_s\n" + "".join(rows))
    return path


def test_pollux_at_one_local_batch_counts_the_gradient_pair_once(cli: Cli, tmp_path: Path) -> None:
    """1-4 workers at one batch per worker: 4 measured times (T_grad at 32, the step at 2, 3
    and 4 workers) for 4 determined coefficients (α_g + 32·β_g, α_intra, β_intra, γ)."""
    path = _weak_study(tmp_path, range(1, 5))
    doc = json.loads(_ok(cli("converge", "speed", "fit", "--csv", str(path), "--model",
                             "pollux", "--json")).out)  # fmt: skip
    for name, value in POLLUX.items():
        assert doc["params"][name] == pytest.approx(value, rel=1e-4), (name, doc["params"])
    assert doc["params"]["alpha_g"] + 32 * doc["params"]["beta_g"] == pytest.approx(0.042)
    assert {"alpha_g", "beta_g"} <= set(doc["undetermined"]) and "gamma" not in doc["undetermined"]


def test_pollux_on_one_and_two_workers_at_one_local_batch_is_refused(
    cli: Cli, tmp_path: Path
) -> None:
    """The report's study: the 2-worker step time is all that informs α_intra and γ together."""
    path = _weak_study(tmp_path, range(1, 3))
    r = cli("converge", "speed", "fit", "--csv", str(path), "--model", "pollux")
    assert (r.code, r.out) == (2, "")
    assert r.err == (
        "error: 2 measurements are too few for the 3 coefficients of pollux they determine "
        "(measure more worker counts or batch sizes)\n"
    )
