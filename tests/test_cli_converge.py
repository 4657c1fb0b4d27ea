"""`dlperf converge ...` and `dlperf staleness` through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from dlperf.converge.speed import SpeedFit
from dlperf.store import Store

POLLUX_128 = str(Path(__file__).parent / "data" / "pollux" / "cifar10_validation-128.csv")
Cli = Callable[..., Any]


def accuracy_run(store: Store, epochs: int = 40, steps_per_epoch: int = 10) -> int:
    """A stored run whose validation accuracy follows 1 − (1/(0.05·k + 1) + 0.05)."""
    run_id = store.create_run(name="synthetic", kind="run", config={})
    rows = [
        ("val/acc1", e, 1.0 - (1.0 / (0.05 * e * steps_per_epoch + 1.0) + 0.05))
        for e in range(1, epochs + 1)
    ]
    store.log_metrics(run_id, rows)
    store.finish_run(run_id, summary={"steps_per_epoch": steps_per_epoch})
    return run_id


def test_fit_csv_json_keys(cli: Cli) -> None:
    r = cli("converge", "fit", "--csv", POLLUX_128, "--y", "metric", "--metric", "accuracy",
            "--upto", "0.3", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert {"beta0", "beta1", "beta2", "ci", "rmse", "form", "n_points"} <= set(doc)
    assert doc["form"] == "optimus" and doc["n_points"] == 30
    assert set(doc["ci"]) == {"beta0", "beta1", "beta2"}
    assert doc["heldout"]["n_points"] == 70 and doc["heldout"]["better"] in ("optimus", "power")


def test_predict_from_stored_run(cli: Cli, store: Store) -> None:
    run_id = accuracy_run(store)
    r = cli("converge", "predict", str(run_id), "--metric", "accuracy", "--upto", "0.5",
            "--target", "0.9", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    # 1/(0.5·k_epoch... ) on the step axis: 1/(0.05·k + 1) = 0.05 at k = 380 steps = epoch 38.
    assert doc["reachable"]
    assert doc["predicted_step"] == pytest.approx(380, abs=2)
    assert doc["predicted_epoch"] == pytest.approx(38, abs=0.2)
    assert doc["actual_step"] == 380
    assert abs(doc["error_pct"]) < 1
    lo, hi = doc["interval"]
    assert lo <= doc["predicted_step"] <= hi


def test_unreachable_target_says_so(cli: Cli, store: Store) -> None:
    run_id = accuracy_run(store)
    r = cli("converge", "predict", str(run_id), "--metric", "accuracy", "--target", "0.99")
    assert r.code == 0
    assert "unreachable" in r.out
    assert "levels off at 0.95 accuracy" in r.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--y", "acc", "--metric", "accuracy", "--target", "0.9"], "has no column 'acc'"),
        (["--y", "metric", "--metric", "accuracy", "--target", "94"], "must lie in [0, 1]"),
        (["--y", "metric", "--metric", "accuracy", "--target", "0.9", "--upto", "0.03"],
         "too few"),
        (["--y", "metric", "--metric", "speed", "--target", "0.9"], "unknown metric"),
    ],
)  # fmt: skip
def test_predict_bad_input_is_one_line(cli: Cli, args: list[str], message: str) -> None:
    r = cli("converge", "predict", "--csv", POLLUX_128, *args)
    assert r.code == 2
    assert r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith("error: ") and message in r.err


def test_speed_fit_on_study_then_plan(cli: Cli, store: Store, tmp_path: Path) -> None:
    # A `dlperf scale` study as speed fit reads it: one finished run per configuration.
    study = store.create_study("scale", "scale")
    for w in (1, 2, 4, 8):
        for p in (1, 2):
            run_id = store.create_run(name=f"w{w}p{p}", kind="scale", config={}, study_id=study)
            t = 0.4 * 64 / w / 64 + 0.1 * w / p  # θ0 per sample of the worker's share, θ2
            summary = {"workers": w, "ps": p, "global_batch": 64, "step_time_s": t}
            store.finish_run(run_id, summary=summary)
    r = cli("converge", "speed", "fit", str(study), "--model", "optimus-sync", "--json")
    assert r.code == 0, r.err
    speed_doc = json.loads(r.out)
    assert speed_doc["params"]["theta0"] == pytest.approx(0.4 / 64, rel=1e-6)
    assert speed_doc["params"]["theta2"] == pytest.approx(0.1, rel=1e-6)
    assert speed_doc["error_pct"] == pytest.approx(0, abs=1e-6)
    (tmp_path / "speed.json").write_text(r.out)

    run_id = accuracy_run(store)
    r = cli("converge", "fit", str(run_id), "--metric", "accuracy", "--upto", "0.5", "--json")
    (tmp_path / "curve.json").write_text(r.out)
    r = cli("converge", "plan", "--curve", "curve.json", "--speed", "speed.json",
            "--target", "0.9", "--ps", "1,2", "--workers", "1-2", "--plot", "plan.png",
            "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    # 380 steps to go from step 200 (the end of the fit window) = 180 steps,
    # at 0.4/w + 0.1·w/p seconds each.
    assert doc["steps"] == pytest.approx(180, abs=2)
    times = {(a["ps"], a["workers"]): a["time_s"] for a in doc["allocations"]}
    assert times[(2, 2)] == pytest.approx(doc["steps"] * 0.3)
    assert [a["workers"] for a in doc["allocations"] if a["fastest"]] == [2]
    assert (tmp_path / "plan.png").stat().st_size > 0

    (tmp_path / "jobs.toml").write_text(
        '[[job]]\nname = "a"\ncurve = "curve.json"\nspeed = "speed.json"\ntarget = 0.9\n'
    )
    r = cli("converge", "plan", "--cluster", "jobs.toml", "--gpus", "4", "--json")
    assert r.code == 0, r.err
    (job,) = json.loads(r.out)["jobs"]
    assert job["workers"] + job["ps"] == 4


def test_plan_bad_inputs(cli: Cli, store: Store, tmp_path: Path) -> None:
    r = cli("converge", "fit", str(accuracy_run(store)), "--metric", "accuracy", "--json")
    (tmp_path / "curve.json").write_text(r.out)
    (tmp_path / "bad.json").write_text("{}")
    speed = SpeedFit("optimus-sync", dict.fromkeys(["theta0", "theta1", "theta2", "theta3",
                     "theta4"], 0.1), 0, 0, 5, True, "")  # fmt: skip
    (tmp_path / "speed.json").write_text(json.dumps(asdict(speed)))
    plan = ("converge", "plan", "--curve", "curve.json", "--target")
    r = cli(*plan, "0.9", "--speed", "bad.json")
    assert r.code == 2 and "bad.json is not a speed fit" in r.err
    r = cli(*plan, "0.99", "--speed", "speed.json")
    assert r.code == 2
    assert "target 0.99 is unreachable: the curve in curve.json levels off at 0.95" in r.err
    r = cli(*plan, "0.9", "--speed", "speed.json", "--workers", "0-4")
    assert r.code == 2 and "--workers needs counts ≥ 1" in r.err


def test_speed_fit_pollux_needs_no_ps(cli: Cli) -> None:
    path = str(Path(__file__).parent / "data" / "pollux" / "cifar10_scalability.csv")
    r = cli("converge", "speed", "fit", "--csv", path, "--model", "optimus-sync")
    assert r.code == 2 and "use --model pollux" in r.err
    r = cli("converge", "speed", "fit", "--csv", path, "--model", "pollux",
            "--predict", "workers=64,nodes=16,batch=4096")  # fmt: skip
    assert r.code == 0, r.err
    assert "step-time error" in r.out and "alpha_inter" in r.out


def test_staleness_table_and_json(cli: Cli) -> None:
    r = cli("staleness", "--learner", "L1=1,2", "--learner", "L2=1.5", "--json")
    assert r.code == 0
    doc = json.loads(r.out)
    assert [g["staleness"] for g in doc["gradients"]] == [0, 1, 1]
    r = cli("staleness", "--speeds", "L1=1.0,L2=0.5", "--horizon", "2")
    assert r.code == 0
    # L1 at 1 and 2, L2 at 2 (after L1, given first) on version 0: staleness 0, 0, 2.
    assert "3 gradients, staleness mean 0.667, max 2; histogram 0: 2, 2: 1" in r.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--learner", "L1=2,1"], "must be positive and increasing"),
        (["--learner", "L1"], "NAME=values"),
        (["--speeds", "L1=1"], "needs --horizon"),
        (["--speeds", "L1"], "NAME=rate"),
        ([], "give --learner"),
    ],
)
def test_staleness_bad_input(cli: Cli, args: list[str], message: str) -> None:
    r = cli("staleness", *args)
    assert r.code == 2
    assert r.err.count("\n") == 1 and message in r.err


@pytest.mark.parametrize(
    "command",
    [
        ["converge"],
        ["converge", "speed"],
        ["converge", "regress"],
        ["converge", "fit"],
        ["converge", "predict"],
        ["converge", "speed", "fit"],
        ["converge", "plan"],
        ["staleness"],
    ],
)
def test_help_ends_with_an_example(cli: Cli, command: list[str]) -> None:
    r = cli(*command, "--help")
    assert r.code == 0
    assert "Example: dlperf " in r.out


def test_staleness_train_stores_both_runs(
    cli: Cli, store: Store, tiny_exp: Callable[..., Path]
) -> None:
    exp = tiny_exp(epochs=2)
    r = cli("staleness", "--train", str(exp), "--learners", "2", "--set", "data.limit=128",
            "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    runs = store.list_runs(study_id=doc["study_id"])
    assert {run["name"] for run in runs} == {"smallcnn sync", "smallcnn async"}
    assert doc["sync"]["mean_staleness"] == 0
    assert doc["async"]["staleness_histogram"] == {"0": 1, "1": 7}  # 2 epochs of 4 updates
    assert len(store.metrics(doc["async"]["run_id"], "val/acc1")) == 2
    assert Path(doc["figure"]).is_file()
    r = cli("staleness", "--train", str(exp))
    assert r.code == 2 and "--learners N or --speeds" in r.err


def test_cli_import_stays_light() -> None:
    code = "import sys, dlperf.cli; print(sorted({'numpy', 'scipy', 'torch'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_fit_that_does_not_converge_warns(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.converge import curve

    real = curve.least_squares

    def stalled(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        result.success, result.message = False, "maximum evaluations reached"
        return result

    monkeypatch.setattr(curve, "least_squares", stalled)
    r = cli("converge", "fit", "--csv", POLLUX_128, "--y", "metric", "--metric", "accuracy")
    assert r.code == 0
    assert (
        "warning: cifar10_validation-128.csv: the optimus fit did not converge "
        "(maximum evaluations reached); showing the best attempt"
    ) in r.err


def test_regress_stored_runs_by_depth(cli: Cli, store: Store) -> None:
    ids = []
    for depth in (20, 32, 44, 56):
        run_id = store.create_run(
            name=f"resnet{depth}", kind="run", config={"model": {"name": f"resnet{depth}"}}
        )
        b0 = 0.1 * (20 / depth)  # deeper: slower per step
        store.log_metrics(run_id, [("val/loss", e, 1 / (b0 * e + 0.5) + 0.2) for e in range(1, 31)])
        store.finish_run(run_id, summary={})
        ids.append(str(run_id))
    r = cli("converge", "regress", *ids, "--features", "depth", "--predict", "depth=110",
            "--target", "0.4", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [run["depth"] for run in doc["runs"]] == [20, 32, 44, 56]
    assert doc["prediction"]["beta2"] == pytest.approx(0.2, rel=0.05)
    assert doc["prediction"]["predicted_step"] > 30  # deeper than any run: later than all
