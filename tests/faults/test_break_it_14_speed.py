"""The fourteenth break-it round (issue 41), converge speed, plan and regress: every mistake
one line, every count right.

C2: `converge speed fit --fix theta2=1e308` (Optimus) ended in scipy's "array must not contain
infs or NaNs", `--fix gamma=1e308` (Pollux) in "Residuals are not finite in the initial
point", both tracebacks; a fixed value whose step time overflows the fit's arithmetic leaked
numpy's overflow warnings and printed a 200-digit table. C3: `converge plan --speed-params`
with every θ 0 planned 0 hours ("fastest, cheapest") after numpy's divide-by-zero warning.
C4: `converge regress` took a feature of nan or inf (nan β, "unreachable"; a traceback from
the SVD for a source's), and overflowed exp at depth=1e308 (β = inf). C6: `converge plan
--price-per-hour inf` priced every allocation at inf. C9: a speed table of 1.5 workers was
fitted, though `--predict workers=1.5` is refused. Each is now one line and exit 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.converge import plan, speed
from dlperf.errors import UserError
from tests.cli.test_app import one_line_error
from tests.cli.test_speed import _step
from tests.conftest import CliResult
from tests.converge.test_plan import sync_fit
from tests.converge.test_regress import betas

Cli = Callable[..., CliResult]


@pytest.fixture
def optimus_table(tmp_path: Path) -> Path:
    """Optimus-sync step times (tests.cli.test_speed's θ) at 1-8 workers, 1-2 servers,
    batches 64 and 128: the slowest 8 workers on 1 server, 0.395 s at batch 64."""
    rows = ["workers,ps,global_batch,step_time_s"]
    rows += [f"{w},{p},{m},{_step(w, p, m)!r}" for w in (1, 2, 4, 8) for p in (1, 2)
             for m in (64, 128)]  # fmt: skip
    path = tmp_path / "speeds.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture
def pollux_table(tmp_path: Path) -> Path:
    """Pollux step and sync times (γ = 2) at 1-4 workers on one node and 2-8 nodes of 4,
    batches of 32, 64 and 128 per worker, in dlperf's columns."""
    theta = np.array([0.02, 5e-4, 0.03, 0.004, 0.12, 0.002, 2.0])
    rows = [(1, k) for k in (1, 2, 3, 4)] + [(n, 4 * n) for n in (2, 4, 8)]
    n = np.array([r[0] for r in rows for _ in range(3)], float)
    w = np.array([r[1] for r in rows for _ in range(3)], float)
    local = np.tile([32.0, 64.0, 128.0], len(rows))
    t_grad, t_iter = speed._pollux_time(theta, n, w, local)
    lines = ["workers,nodes,global_batch,step_time_s,sync_time_s"]
    lines += [f"{a:g},{b:g},{c:g},{float(d)!r},{float(e)!r}" for a, b, c, d, e in
              zip(w, n, local * w, t_iter, t_iter - t_grad, strict=True)]  # fmt: skip
    path = tmp_path / "pollux.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _speed_fit(cli: Cli, table: Path, model: str, *args: str) -> CliResult:
    return cli("converge", "speed", "fit", "--model", model, "--csv", str(table), *args)


# --- C2: a fixed coefficient whose step time cannot be computed ---------------------------------


@pytest.mark.parametrize("value", ["1e308", "1e200"])
def test_a_fixed_optimus_coefficient_too_large_to_fit_is_one_line(
    cli: Cli, optimus_table: Path, value: str
) -> None:
    """θ2·w/p: 2e308 at 2 workers on 1 server is inf (scipy refused it with a traceback);
    8e200 at 8 squares past a float (numpy warned of overflow, the table printed 200 digits).
    The line names the measured configuration furthest off."""
    r = _speed_fit(cli, optimus_table, "optimus-sync", "--fix", f"theta2={value}")
    at, t, measured = ("2", "inf", "0.5") if value == "1e308" else ("8", "8e+200", "0.41")
    one_line_error(
        r,
        f"--fix theta2={float(value):g}: the optimus-sync step time at workers={at}, ps=1, "
        f"batch=64 comes out {t} s against a measured {measured} s: too large to fit",
    )


def test_a_large_but_computable_fixed_coefficient_is_fitted(cli: Cli, optimus_table: Path) -> None:
    """The check refuses what cannot be computed, not a value merely far from the data's."""
    r = _speed_fit(cli, optimus_table, "optimus-sync", "--fix", "theta2=1e6", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["params"]["theta2"] == 1e6
    assert "Warning" not in r.err


@pytest.mark.parametrize(
    ("fix", "said"),
    [("gamma=1e308", "comes out 0 s"), ("alpha_g=1e308", "too large to fit")],
)
def test_a_fixed_pollux_coefficient_whose_step_time_is_not_finite_is_one_line(
    cli: Cli, pollux_table: Path, fix: str, said: str
) -> None:
    """T_iter = (T_grad^γ + T_sync^γ)^(1/γ) is 0 at γ = 1e308 (each time < 1 s underflows);
    α_g = 1e308 makes T_grad over the measured gradient time overflow. Both were scipy's
    "Residuals are not finite in the initial point", a traceback."""
    r = _speed_fit(cli, pollux_table, "pollux", "--fix", fix)
    name, _, value = fix.partition("=")
    one_line_error(r, f"--fix {name}={float(value):g}: the pollux step time at workers=1, nodes=1")
    assert said in r.err, r.err


def test_a_gamma_beyond_10_is_told_where_overlap_is_already_near_perfect(
    cli: Cli, pollux_table: Path
) -> None:
    r = _speed_fit(cli, pollux_table, "pollux", "--fix", "gamma=1000")
    one_line_error(r, "--fix gamma=1000: the pollux step time at workers=1, nodes=1")
    assert "fix gamma in 1-10" in r.err, r.err


def test_a_fixed_gamma_within_reach_is_fitted(cli: Cli, pollux_table: Path) -> None:
    r = _speed_fit(cli, pollux_table, "pollux", "--fix", "gamma=2", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["params"]["gamma"] == 2.0 and doc["error_pct"] < 0.5


# --- C3: a speed model whose step time is 0 (or not finite) where the plan asks ------------------

CURVE = {"metric": "loss", "beta0": 0.05, "beta1": 1.0, "beta2": 0.2, "last_step": 0}


def _plan(cli: Cli, tmp_path: Path, *args: str) -> CliResult:
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps(CURVE))
    return cli("converge", "plan", "--target", "0.5", "--ps", "1", "--workers", "1-2",
               "--curve", str(curve), "--batch", "64", *args)  # fmt: skip


def test_speed_params_of_all_zeros_are_one_line_not_a_plan_of_0_hours(
    cli: Cli, tmp_path: Path
) -> None:
    zeros = ",".join(f"theta{i}=0" for i in range(5))
    r = _plan(cli, tmp_path, "--speed-params", zeros)
    one_line_error(r, "the optimus-sync step time at ps=1, workers=1, batch=64 is 0 s")
    assert "infinitely fast" in r.err and r.out == "", (r.out, r.err)


def test_a_speed_file_whose_step_time_overflows_is_one_line(cli: Cli, tmp_path: Path) -> None:
    """θ0·M/w = 1e308·64: inf s a step, which planned inf hours."""
    path = tmp_path / "speed.json"
    params = {"theta0": 1e308, "theta1": 0, "theta2": 0, "theta3": 0, "theta4": 0}
    path.write_text(json.dumps({"model": "optimus-sync", "params": params}))
    r = _plan(cli, tmp_path, "--speed", str(path))
    one_line_error(r, "the optimus-sync step time at ps=1, workers=1, batch=64 is inf s")


def test_the_allocator_refuses_a_step_time_of_0_naming_the_job() -> None:
    jobs = [plan.Job("a", 100, sync_fit([0.0] * 5), batch=1)]
    with pytest.raises(UserError, match=r"^job a: the optimus-sync step time at ps=1, workers=1"):
        plan.allocate(jobs, 4)


def test_an_async_model_of_all_zeros_is_refused_too(cli: Cli, tmp_path: Path) -> None:
    zeros = "model=optimus-async," + ",".join(f"theta{i}=0" for i in range(4))
    r = _plan(cli, tmp_path, "--speed-params", zeros)
    one_line_error(r, "the optimus-async step time at ps=1, workers=1, batch=64 is 0 s")


# --- C6: a price that is not a finite number -----------------------------------------------------


def test_an_infinite_price_is_refused_as_scale_refuses_it(cli: Cli, tmp_path: Path) -> None:
    params = "theta0=0.01,theta1=0.1,theta2=0.2,theta3=0.01,theta4=0.01"
    r = _plan(cli, tmp_path, "--speed-params", params, "--price-per-hour", "inf")
    one_line_error(r, "--price-per-hour: must be a finite number (got inf)")


def test_a_price_whose_cost_overflows_is_refused(cli: Cli, tmp_path: Path) -> None:
    """1e308 per device-hour for 8 hours on 2 devices: each allocation's cost is inf, every
    one "cheapest" (θ0 = 10 s per sample: 640 s a step, 46.67 steps)."""
    params = "theta0=10,theta1=0.1,theta2=0.2,theta3=0.01,theta4=0.01"
    r = _plan(cli, tmp_path, "--speed-params", params, "--price-per-hour", "1e308")
    one_line_error(r, "--price-per-hour 1e+308: the cost at ps=1, workers=1 overflows")


# --- C4: regress on feature values that are not finite -------------------------------------------


@pytest.fixture
def sources(tmp_path: Path) -> list[str]:
    """Two Optimus loss curves of depths 20 and 32 (tests.converge.test_regress's β)."""
    k = np.arange(1.0, 41.0) * 10
    found = []
    for depth in (20, 32):
        b = betas(depth)
        loss = 1.0 / (b[0] * k + b[1]) + b[2]
        path = tmp_path / f"resnet{depth}.csv"
        lines = [f"{s:g},{float(v)!r}\n" for s, v in zip(k, loss, strict=True)]
        path.write_text("step,loss\n" + "".join(lines))
        found.append(f"{path}:depth={depth}")
    return found


def _regress(cli: Cli, sources: list[str], *args: str) -> CliResult:
    return cli("converge", "regress", *sources, "--features", "depth", "--x", "step", "--y",
               "loss", *args)  # fmt: skip


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_prediction_at_a_non_finite_feature_is_one_line(
    cli: Cli, sources: list[str], value: str
) -> None:
    r = _regress(cli, sources, "--predict", f"depth={value}", "--target", "0.3")
    one_line_error(r, f"--predict depth={value}: a feature's value must be a finite number")


def test_a_source_with_a_non_finite_feature_is_one_line(cli: Cli, sources: list[str]) -> None:
    """A source of depth=nan reached numpy's SVD: "SVD did not converge", a traceback."""
    bad = sources[0].replace("depth=20", "depth=nan")
    r = _regress(cli, [bad, sources[1]])
    one_line_error(r, "source 1 has depth=nan: a feature's value must be a finite number")


def test_a_prediction_whose_beta_overflows_is_one_line(cli: Cli, sources: list[str]) -> None:
    """depth=1e308: log β0 = −3 − 0.02·1e308 is fine, log β1 and log β2 overflow exp."""
    r = _regress(cli, sources, "--predict", "depth=1e308")
    one_line_error(r, "--predict depth=1e308: the predicted beta1 overflows")


def test_a_prediction_far_out_but_finite_still_answers(cli: Cli, sources: list[str]) -> None:
    r = _regress(cli, sources, "--predict", "depth=110", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["prediction"]["beta0"] == pytest.approx(betas(110)[0], rel=1e-6)


# --- C9: workers, servers and nodes are whole numbers in a speed table too ------------------------


@pytest.mark.parametrize(("column", "at", "least"), [("workers", 0, 1), ("ps", 1, 0)])
def test_a_speed_table_of_fractional_counts_is_refused_naming_the_row(
    cli: Cli, optimus_table: Path, column: str, at: int, least: int
) -> None:
    lines = optimus_table.read_text().splitlines()
    fields = lines[3].split(",")
    fields[at] = "1.5"
    lines[3] = ",".join(fields)
    optimus_table.write_text("\n".join(lines) + "\n")
    r = _speed_fit(cli, optimus_table, "optimus-sync")
    one_line_error(r, f"speeds.csv:4: {column} must be a whole number ≥ {least}, got 1.5")


def test_a_study_summary_of_fractional_workers_is_refused_naming_the_row() -> None:
    rows = [{"workers": w, "global_batch": 64, "step_time_s": 0.1, "ps": 1} for w in (1, 2.5)]
    with pytest.raises(UserError, match=r"^study 3: row 2: workers must be a whole number"):
        speed.from_rows(rows, "study 3")
