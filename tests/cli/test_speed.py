"""dlperf.cli.speed: `converge speed fit` recovering the Optimus coefficients a hand-made
table was built from, its prediction and --fix; `converge plan` reading that fit back (its
documented contract) with times and costs checked by hand, --cluster, the --plot warnings,
and bad input as one line, exit 2."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.report import curves
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult

# optimus-sync: step = θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p (M the global batch)
THETA = {"theta0": 0.01, "theta1": 0.1, "theta2": 0.02, "theta3": 0.005, "theta4": 0.03}


def _step(w: int, p: int, m: int) -> float:
    t = THETA
    return (
        t["theta0"] * m / w + t["theta1"] + t["theta2"] * w / p + t["theta3"] * w + t["theta4"] * p
    )


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """Step times made by THETA at 1-8 workers, 1-2 servers, batches 64 and 128."""
    rows = ["workers,ps,global_batch,step_time_s"]
    rows += [f"{w},{p},{m},{_step(w, p, m)!r}" for w in (1, 2, 4, 8) for p in (1, 2)
             for m in (64, 128)]  # fmt: skip
    path = tmp_path / "speeds.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture
def curve(tmp_path: Path) -> Path:
    """An Optimus loss curve 1 / (β0·k + β1) + β2 = 100 / k: 0.5 at step 200."""
    path = tmp_path / "curve.json"
    path.write_text(json.dumps({"metric": "loss", "beta0": 0.01, "beta1": 0, "beta2": 0}))
    return path


@pytest.mark.parametrize(
    ("command", "example"),
    [(["converge", "speed", "fit"], "Example: dlperf converge speed fit --csv"),
     (["converge", "plan"], "Example: dlperf converge plan --curve curve.json")],
)  # fmt: skip
def test_help_ends_with_an_example(command: list[str], example: str) -> None:
    done = CliRunner().invoke(app, [*command, "--help"])
    assert done.exit_code == 0 and example in done.output


def _fit(cli: Callable[..., CliResult], table: Path, *args: str) -> CliResult:
    return cli("converge", "speed", "fit", "--csv", str(table), "--model", "optimus-sync", *args)


def test_speed_fit_recovers_the_coefficients_and_predicts(
    cli: Callable[..., CliResult], table: Path
) -> None:
    result = _fit(cli, table, "--predict", "workers=4,ps=2,batch=128", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["model"] == "optimus-sync" and doc["n_points"] == 16
    assert doc["params"] == pytest.approx(THETA)
    [prediction] = doc["predictions"]
    # 0.01·32 + 0.1 + 0.02·2 + 0.005·4 + 0.03·2 = 0.54 s; 128 / 0.54 samples/s
    assert prediction["step_time_s"] == pytest.approx(0.54)
    assert prediction["samples_per_s"] == pytest.approx(128 / 0.54)
    assert prediction["measured_step_time_s"] == pytest.approx(0.54)


def test_speed_fit_holds_fixed_coefficients(cli: Callable[..., CliResult], table: Path) -> None:
    result = _fit(cli, table, "--fix", "theta1=0.1", "--predict", "workers=4,ps=2,batch=128")
    assert result.code == 0, result.err
    assert "basis: optimus-sync fitted to 16 measured step times of speeds.csv" in result.out
    assert result.out.rstrip().endswith("; fixed: theta1=0.1")
    theta1 = next(line for line in result.out.splitlines() if line.startswith("theta1"))
    assert [c.strip() for c in theta1.split("│")][1:4] == ["0.1", "fixed", "fixed"]


def test_plan_reads_the_fit_back_and_prices_each_allocation(
    cli: Callable[..., CliResult], table: Path, curve: Path, tmp_path: Path
) -> None:
    fit = tmp_path / "fit.json"
    fit.write_text(_fit(cli, table, "--json").out)
    result = cli("converge", "plan", "--curve", str(curve), "--speed", str(fit), "--batch",
                 "128", "--target", "0.5", "--ps", "1,2", "--workers", "4",
                 "--price-per-hour", "3.6", "--json")  # fmt: skip
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["steps"] == pytest.approx(200.0) and doc["reached_at_step"] is None
    one, two = doc["allocations"]
    # 200 steps of 0.55 s (1 server) and 0.54 s (2); devices: 4 workers + the servers
    assert one["time_s"] == pytest.approx(110.0) and two["time_s"] == pytest.approx(108.0)
    assert one["cost"] == pytest.approx(110 * 5 / 3600 * 3.6)  # 0.55
    assert two["cost"] == pytest.approx(108 * 6 / 3600 * 3.6)  # 0.648
    assert (one["cheapest"], one["fastest"], two["cheapest"], two["fastest"]) == (
        True, False, False, True)  # fmt: skip


def test_plan_with_speed_params_draws_the_plot(
    cli: Callable[..., CliResult], curve: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[tuple[Path, list[Any]]] = []
    monkeypatch.setattr(curves, "plot_plan", lambda path, allocations: drawn.append(
        (path, allocations)))  # fmt: skip
    params = ",".join(f"{k}={v}" for k, v in THETA.items())
    result = cli("converge", "plan", "--curve", str(curve), "--speed-params", params, "--batch",
                 "128", "--target", "0.5", "--ps", "1", "--workers", "1-2",
                 "--plot", "p.png")  # fmt: skip
    assert result.code == 0, result.err
    assert result.out.startswith("200 steps to 0.5")
    assert result.err.splitlines()[-1] == "saved p.png"
    [(path, allocations)] = drawn
    assert path == Path("p.png") and [a.workers for a in allocations] == [1, 2]


def test_cluster_shares_the_devices_and_draws_nothing(
    cli: Callable[..., CliResult], table: Path, curve: Path, tmp_path: Path
) -> None:
    fit = tmp_path / "fit.json"
    fit.write_text(_fit(cli, table, "--json").out)
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(f'[[job]]\nname = "a"\ncurve = "{curve}"\nspeed = "{fit}"\ntarget = 0.5\n'
                    "batch = 128\n")  # fmt: skip
    result = cli("converge", "plan", "--cluster", str(jobs), "--gpus", "4", "--json",
                 "--plot", "x.png")  # fmt: skip
    assert result.code == 0, result.err
    [job] = json.loads(result.out)["jobs"]
    # one job on 4 devices: 3 workers and 1 server, 200 steps of 0.01·128/3 + 0.1 + 0.06 +
    # 0.015 + 0.03 s
    assert (job["name"], job["workers"], job["ps"]) == ("a", 3, 1)
    assert job["time_s"] == pytest.approx(200 * _step(3, 1, 128))
    assert "warning: --plot x.png: nothing drawn, --cluster has no figure" in result.err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["plan", "--cluster", "jobs.toml"], "--cluster needs --gpus N"),
        (["plan", "--curve", "c.json", "--target", "1"],
         "plan needs --curve, --speed and --target (or --cluster and --gpus)"),
        (["plan", "--curve", "c.json", "--target", "1", "--speed", "s.json", "--speed-params",
          "theta0=1"], "give --speed FILE or --speed-params theta0=...,..., not both"),
        (["speed", "fit", "--model", "optimus-sync"], "give STUDY_ID or --csv FILE (not both)"),
        (["speed", "fit", "1", "--csv", "x.csv", "--model", "optimus-sync"], "(not both)"),
        (["speed", "fit", "--csv", "x.csv", "--model", "optimus-sync", "--where", "comm=fp16"],
         "--where selects runs of a study: give STUDY_ID"),
        (["speed", "fit", "--csv", "x.csv", "--model", "optimus-sync", "--fix", "theta1"],
         "--fix takes NAME=VALUE,..., got 'theta1' (e.g. --fix beta_intra=0.004)"),
        (["plan", "--gpus", "x"], "Invalid value for '--gpus'"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    cli: Callable[..., CliResult], args: list[str], text: str
) -> None:
    one_line_error(cli("converge", *args), text)


def test_an_unknown_speed_model_is_one_line(cli: Callable[..., CliResult], table: Path) -> None:
    result = cli("converge", "speed", "fit", "--csv", str(table), "--model", "optimus")
    one_line_error(result, "unknown speed model 'optimus' (choose one of optimus-sync, ")
