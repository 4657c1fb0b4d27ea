"""`dlperf converge ...` and `dlperf staleness` through the real entry point."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.converge import curve, speed
from dlperf.converge.speed import SpeedFit
from dlperf.store import RunStore

POLLUX_128 = str(Path(__file__).parents[1] / "fixtures" / "pollux" / "cifar10_validation-128.csv")
Cli = Callable[..., Any]


pytestmark = pytest.mark.usefixtures("fewer_bootstrap_fits")  # 20 refits, not 200


def accuracy_run(store: RunStore, epochs: int = 40, steps_per_epoch: int = 10) -> int:
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


def test_predict_from_stored_run(cli: Cli, store: RunStore) -> None:
    run_id = accuracy_run(store)
    r = cli("converge", "predict", str(run_id), "--metric", "accuracy", "--upto", "0.5",
            "--target", "0.9", "--form", "optimus", "--json")  # fmt: skip
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


def test_predict_defaults_to_the_ensemble(cli: Cli, store: RunStore) -> None:
    """The default form is the distribution over curve families; on the same exact Optimus
    curve its median lands on the measured step and its interval holds it."""
    run_id = accuracy_run(store)
    r = cli("converge", "predict", str(run_id), "--metric", "accuracy", "--upto", "0.5",
            "--target", "0.9", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["form"] == "ensemble" and doc["actual_step"] == 380
    assert doc["predicted_step"] == pytest.approx(380, rel=0.05)
    lo, hi = doc["interval"]
    assert lo <= 380 and (hi is None or hi >= 380)
    assert "log prior on the plateau" in doc["basis"]


def test_predict_reads_converge_from_a_file(cli: Cli, store: RunStore, tmp_path: Path) -> None:
    """[converge] holds what the flags say; --set and the flags go over it."""
    run_id = accuracy_run(store)
    path = tmp_path / "curve.toml"
    path.write_text('[converge]\nmetric = "accuracy"\nupto = 0.5\ntarget = 0.9\nform = "power"\n')
    doc = json.loads(
        cli("converge", "predict", str(run_id), "--config", str(path), "--set",
            "converge.form='optimus'", "--json").out
    )  # fmt: skip
    assert (doc["form"], doc["actual_step"]) == ("optimus", 380)
    assert doc["predicted_step"] == pytest.approx(380, abs=2)
    r = cli("converge", "fit", str(run_id), "--config", str(path), "--upto", "0.25", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["n_points"] == 10  # 0.25 of the 40 points


def test_unreachable_target_says_so(cli: Cli, store: RunStore) -> None:
    run_id = accuracy_run(store)
    r = cli("converge", "predict", str(run_id), "--metric", "accuracy", "--target", "0.99",
            "--form", "optimus")  # fmt: skip
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
        (["--y", "metric", "--metric", "speed", "--target", "0.9"], "converge.metric: Input"),
    ],
)  # fmt: skip
def test_predict_bad_input_is_one_line(cli: Cli, args: list[str], message: str) -> None:
    r = cli("converge", "predict", "--csv", POLLUX_128, *args)
    assert r.code == 2
    assert r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith("error: ") and message in r.err


def test_speed_fit_on_study_then_plan(cli: Cli, store: RunStore, tmp_path: Path) -> None:
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
    # The basis names the study, its kind and when it was made (the speed data's moment).
    created = store.get_study(study)["created"]
    basis = speed_doc["basis"]
    assert f"fitted to 8 measured step times of study {study} (scale, {created})" in basis
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
    basis = doc["basis"]
    assert basis.startswith(f"steps: the Optimus fit of run {run_id}")
    assert f"step times: optimus-sync fitted to 8 measured step times of study {study}" in basis
    assert (tmp_path / "plan.png").stat().st_size > 0
    assert "saved plan.png" in r.err  # the path also outside the JSON

    (tmp_path / "jobs.toml").write_text(
        '[[job]]\nname = "a"\ncurve = "curve.json"\nspeed = "speed.json"\ntarget = 0.9\n'
    )
    r = cli("converge", "plan", "--cluster", "jobs.toml", "--gpus", "4", "--json")
    assert r.code == 0, r.err
    (job,) = json.loads(r.out)["jobs"]
    assert job["workers"] + job["ps"] == 4


def test_plan_bad_inputs(cli: Cli, store: RunStore, tmp_path: Path) -> None:
    r = cli("converge", "fit", str(accuracy_run(store)), "--metric", "accuracy", "--json")
    (tmp_path / "curve.json").write_text(r.out)
    (tmp_path / "bad.json").write_text("{}")
    speed_fit = SpeedFit("optimus-sync", dict.fromkeys(["theta0", "theta1", "theta2", "theta3",
                     "theta4"], 0.1), 0, 0, 5, True, "")  # fmt: skip
    (tmp_path / "speed.json").write_text(json.dumps(asdict(speed_fit)))
    plan = ("converge", "plan", "--curve", "curve.json", "--target")
    r = cli(*plan, "0.9", "--speed", "bad.json")
    assert r.code == 2 and "bad.json is not a speed fit" in r.err
    r = cli(*plan, "0.99", "--speed", "speed.json")
    assert r.code == 2
    assert "target 0.99 is unreachable: the curve in curve.json levels off at 0.95" in r.err
    r = cli(*plan, "0.9", "--speed", "speed.json", "--workers", "0-4")
    assert r.code == 2 and "--workers needs counts ≥ 1" in r.err


def test_speed_fit_pollux_needs_no_ps(cli: Cli) -> None:
    path = str(Path(__file__).parents[1] / "fixtures" / "pollux" / "cifar10_scalability.csv")
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
        (["--learner", "L1"], "--learner takes NAME=times, got 'L1'"),
        (["--learner", "L1=1", "--learner", " L1=2"], "learner L1 is given twice"),
        (["--speeds", "L1=1"], "needs --horizon"),
        (["--speeds", "L1", "--horizon", "2"], "--speeds takes NAME=VALUE,..., got 'L1'"),
        (["--speeds", "L1=1,L1=2", "--horizon", "2"], "--speeds: L1 is given twice"),
        (["--speeds", "L1=fast", "--horizon", "2"], "--speeds: every value must be a number"),
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
    cli: Cli, store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    exp = tiny_exp(epochs=2)
    r = cli("staleness", "--train", str(exp), "--learners", "2", "--set", "data.limit=128",
            "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    runs = store.list_runs(study_id=doc["study_id"])
    assert {run.name for run in runs} == {"smallcnn sync", "smallcnn async"}
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


def test_untrusted_fits_warn(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    fit = ("converge", "fit", "--csv", POLLUX_128, "--y", "metric")
    warning = "warning: cifar10_validation-128.csv: the optimus fit {}; showing the best attempt"
    # An accuracy curve fitted as a loss: the best decreasing curve is a constant.
    r = cli(*fit, "--upto", "0.3")
    assert r.code == 0
    assert warning.format("is flat: the values do not decrease (is the metric right?)") in r.err

    real = curve.least_squares

    def stalled(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        result.success, result.message = False, "maximum evaluations reached"
        return result

    monkeypatch.setattr(curve, "least_squares", stalled)
    r = cli(*fit, "--metric", "accuracy")
    assert r.code == 0
    assert warning.format("did not converge (maximum evaluations reached)") in r.err


def test_regress_stored_runs_by_depth(cli: Cli, store: RunStore) -> None:
    ids = []
    for depth in (20, 32, 44, 56):
        run_id = store.create_run(
            name=f"resnet{depth}", kind="run", config={"model": {"name": f"resnet{depth}"}}
        )
        b0 = 0.2 * math.exp(-0.02 * depth)  # per epoch; log β0 linear in depth
        store.log_metrics(run_id, [("val/loss", e, 1 / (b0 * e + 0.5) + 0.2) for e in range(1, 31)])
        store.finish_run(run_id, summary={"steps_per_epoch": 10})
        ids.append(str(run_id))
    r = cli("converge", "regress", *ids, "--features", "depth", "--predict", "depth=110",
            "--target", "0.4", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [run["depth"] for run in doc["runs"]] == [20, 32, 44, 56]
    assert doc["prediction"]["beta2"] == pytest.approx(0.2, rel=0.01)
    # 1/(β0·k + 0.5) = 0.2 with β0 = 0.02·e^−2.2 per step: k = 4.5/β0 = 2030.6 steps.
    assert doc["prediction"]["predicted_step"] == pytest.approx(2031, rel=0.01)
    assert doc["prediction"]["predicted_epoch"] == pytest.approx(203.1, rel=0.01)


def test_metric_error_is_derived_from_val_acc1(cli: Cli, store: RunStore) -> None:
    run_id = str(accuracy_run(store))
    docs = {}
    for metric in ("accuracy", "error"):
        r = cli("converge", "fit", run_id, "--metric", metric, "--upto", "0.5", "--json")
        assert r.code == 0, r.err
        docs[metric] = json.loads(r.out)
    assert docs["error"]["metric"] == "error"
    for beta in ("beta0", "beta1", "beta2"):
        assert docs["error"][beta] == pytest.approx(docs["accuracy"][beta])
    r = cli("converge", "predict", run_id, "--metric", "error", "--upto", "0.5",
            "--target", "0.1", "--json")  # fmt: skip
    assert r.code == 0, r.err
    assert json.loads(r.out)["actual_step"] == 380  # error 0.1 = accuracy 0.9


POLLUX_THETA = np.array([0.01, 2e-3, 0.02, 0.005, 0.08, 0.01, 1.5])


def scale_point(
    store: RunStore, study: int, nodes: int, workers: int, local: int, comm: str = "allreduce"
) -> None:
    """One point of a `dlperf scale` study, as that command writes it, timed by Pollux's
    model with POLLUX_THETA (one worker has no compute split: its sync time is null)."""
    t_grad, t_iter = speed._pollux_time(
        POLLUX_THETA, np.array([nodes]), np.array([workers]), np.array([local])
    )
    step = float(t_iter[0])
    compute = float(t_grad[0]) if workers > 1 else None
    exposed = step - compute if compute is not None else None
    run_id = store.create_run(name=f"{workers} workers", kind="scale", config={}, study_id=study)
    store.finish_run(run_id, summary={
        "workers": workers, "nodes": nodes, "ps": 0, "per_worker_batch": local,
        "global_batch": local * workers, "step_time_s": step, "compute_s": compute,
        "comm_exposed_s": exposed, "sync_time_s": exposed,
        "throughput": local * workers / step, "comm": comm, "strategy": "ddp",
        "bucket_mb": None,
    })  # fmt: skip


def test_speed_fit_on_a_scale_study(cli: Cli, store: RunStore) -> None:
    study = store.create_study("scale resnet20", kind="scale")
    for nodes, workers in [(1, 1), (1, 2), (1, 3), (1, 4), (2, 2), (2, 4), (2, 6), (2, 8)]:
        for local in (16, 32, 64):
            scale_point(store, study, nodes, workers, local)
    # Failed and unfinished points are left out: either would spoil the fit.
    failed = store.create_run(name="8 workers", kind="scale", config={}, study_id=study)
    store.finish_run(failed, "failed", summary={"workers": 8, "nodes": 2, "ps": 0,
                     "global_batch": 512, "step_time_s": 100.0, "sync_time_s": 99.0},
                     error="worker 3 exited with code 1")  # fmt: skip
    store.finish_run(
        store.create_run(name="4 workers", kind="scale", config={}, study_id=study),
        "failed",
        summary={"workers": 4},
    )
    store.create_run(name="6 workers", kind="scale", config={}, study_id=study)  # running

    r = cli("converge", "speed", "fit", str(study), "--model", "pollux", "--json",
            "--predict", "workers=16,nodes=4,batch=512")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["n_points"] == 24 and doc["converged"] and not doc["notes"]
    assert doc["error_pct"] < 0.5
    assert doc["params"]["gamma"] == pytest.approx(1.5, rel=0.05)
    assert doc["params"]["alpha_inter"] == pytest.approx(0.08, rel=0.05)
    (prediction,) = doc["predictions"]
    truth = speed._pollux_time(POLLUX_THETA, np.array([4]), np.array([16]), np.array([32]))
    assert prediction["step_time_s"] == pytest.approx(truth[1][0], rel=0.05)

    r = cli("converge", "speed", "fit", str(study), "--model", "optimus-sync")
    assert r.code == 2
    assert r.err == (
        "error: optimus-sync needs parameter servers, but 24 measurements have ps = 0 "
        "(all-reduce) (use --model pollux)\n"
    )

    scale_point(store, study, 1, 2, 16, comm="fp16")
    r = cli("converge", "speed", "fit", str(study), "--model", "pollux")
    assert r.code == 2
    assert f"study {study} mixes 2 settings of comm/strategy/bucket_mb" in r.err
    assert "--where comm=allreduce" in r.err
    r = cli("converge", "speed", "fit", str(study), "--model", "pollux", "--where",
            "comm=allreduce", "--json")  # fmt: skip
    assert r.code == 0, r.err
    assert json.loads(r.out)["n_points"] == 24
    r = cli("converge", "speed", "fit", str(study), "--model", "pollux", "--where", "comm=x")
    assert r.code == 2 and f"study {study} has no finished runs that match --where" in r.err


REPO = Path(__file__).resolve().parents[2]


def help_example(cli: Cli, *command: str) -> list[str]:
    """The arguments of the example that ends `dlperf COMMAND --help`, without `dlperf`."""
    r = cli(*command, "--help")
    assert r.code == 0, r.err
    example = r.out.split("Example: ", 1)[1].split("\n\n", 1)[0]
    argv = example.split()
    assert argv[0] == "dlperf"
    return argv[1:]


@pytest.mark.parametrize(
    "command",
    [["converge"], ["converge", "fit"], ["converge", "predict"], ["converge", "speed"],
     ["converge", "speed", "fit"]],
)  # fmt: skip
def test_help_examples_run_inside_the_checkout(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """The examples read the Pollux traces shipped in examples/pollux/, not files beside the
    repository, so they run from a fresh checkout."""
    args = help_example(cli, *command)
    assert not any(a.startswith("../") for a in args), args
    monkeypatch.chdir(REPO)
    r = cli(*args)
    assert r.code == 0, r.err
    assert r.out


def loss_csv(path: Path, beta: tuple[float, float, float], metric: str = "loss") -> Path:
    """A noise-free Optimus curve 1/(β0·k + β1) + β2 at steps 10, 20, ..., 400 (as accuracy,
    1 minus that, for metric accuracy)."""
    k = np.arange(1.0, 41.0) * 10
    loss = 1.0 / (beta[0] * k + beta[1]) + beta[2]
    values = 1.0 - loss if metric == "accuracy" else loss
    rows = "".join(f"{s:g},{float(v)!r}\n" for s, v in zip(k, values, strict=True))
    path.write_text(f"step,{metric}\n{rows}")
    return path


def depth_betas(depth: float) -> tuple[float, float, float]:
    """β log-linear in depth: what regress recovers exactly from noise-free curves."""
    return 0.02 * math.exp(-0.01 * depth), 0.5 * math.exp(0.005 * depth), 0.1


SPEED_PARAMS = "theta0=0.4,theta1=0,theta2=0.1,theta3=0,theta4=0"


def test_plan_reads_a_regress_prediction_and_paper_coefficients(cli: Cli, tmp_path: Path) -> None:
    """Issue 22: the Optimus chain of HW4 P4 without hand work: regress predicts the curve of
    an unseen depth, and plan takes it with the speed model's coefficients as given."""
    sources = [
        f"{loss_csv(tmp_path / f'd{d}.csv', depth_betas(d))}:depth={d}" for d in (20, 32, 44, 56)
    ]
    r = cli("converge", "regress", *sources, "--features", "depth", "--x", "step", "--y",
            "loss", "--predict", "depth=110", "--json")  # fmt: skip
    assert r.code == 0, r.err
    (tmp_path / "regress.json").write_text(r.out)
    b0, b1, b2 = depth_betas(110)
    # Nothing of the unseen configuration has run: all the steps to 0.3 are still to go.
    steps = (1 / (0.3 - b2) - b1) / b0
    plan = ("converge", "plan", "--curve", "regress.json", "--target", "0.3", "--ps", "1,2",
            "--workers", "1-2", "--batch", "2", "--json")  # fmt: skip
    r = cli(*plan, "--speed-params", SPEED_PARAMS.replace("0.4", "0.2"))
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["steps"] == pytest.approx(steps, rel=0.02)
    times = {(a["ps"], a["workers"]): a["time_s"] for a in doc["allocations"]}
    assert times[(2, 2)] == pytest.approx(doc["steps"] * 0.3)  # 0.2·2/2 + 0.1·2/2 s a step
    assert doc["basis"].startswith("steps: the Optimus curve regress predicted for depth=110")
    assert "step times: optimus-sync with the coefficients given" in doc["basis"]

    # The same speed model as the documented minimal JSON, its θ in any order.
    minimal = {"model": "optimus-sync", "params": {"theta4": 0, "theta3": 0, "theta2": 0.1,
               "theta1": 0, "theta0": 0.2}, "typical_batch": 2}  # fmt: skip
    (tmp_path / "speed.json").write_text(json.dumps(minimal))
    r = cli(*plan[:-3], "--speed", "speed.json", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["allocations"] == doc["allocations"]

    # And the curve as the minimal JSON: the metric and β; no step done unless last_step.
    curve_doc = {"metric": "loss", "beta0": b0, "beta1": b1, "beta2": b2, "last_step": 100}
    (tmp_path / "curve.json").write_text(json.dumps(curve_doc))
    r = cli("converge", "plan", "--curve", "curve.json", "--target", "0.3", "--speed-params",
            SPEED_PARAMS, "--batch", "16", "--json")  # fmt: skip
    assert r.code == 0, r.err
    assert json.loads(r.out)["steps"] == math.ceil(steps) - 100  # whole steps to go


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--speed-params", "theta0=1,theta1=0"],
         "--speed-params: optimus-sync needs theta2, theta3, theta4"),
        (["--speed-params", SPEED_PARAMS + ",theta5=1"],
         "--speed-params: optimus-sync has no theta5"),
        (["--speed-params", "model=optimus-async," + SPEED_PARAMS],
         "--speed-params: optimus-async has no theta4"),
        (["--speed-params", SPEED_PARAMS.replace("0.4", "fast")],
         "--speed-params: theta0 must be a number ≥ 0, got 'fast'"),
        (["--speed-params", SPEED_PARAMS.replace("0.4", "-1")],
         "--speed-params: theta0 must be a number ≥ 0, got '-1'"),
        (["--speed-params", "model=pollux,alpha_g=1"], "planning needs an Optimus speed model"),
        (["--speed-params", SPEED_PARAMS, "--speed", "speed.json"],
         "give --speed FILE or --speed-params"),
        (["--speed-params", SPEED_PARAMS, "--batch", "0"], "global batch must be a positive"),
        (["--speed-params", SPEED_PARAMS], "the speed model gives no global batch"),
        (["--speed", "speed.json"], "the speed model gives no global batch"),
        (["--speed", "nothing.json"], "nothing.json is not a speed fit"),
    ],
)  # fmt: skip
def test_plan_speed_model_bad_inputs(
    cli: Cli, tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "curve.json").write_text(
        json.dumps({"metric": "loss", "beta0": 0.01, "beta1": 1.0, "beta2": 0.1})
    )
    thetas = ["theta0", "theta1", "theta2", "theta3"]
    minimal = {"model": "optimus-async", "params": dict.fromkeys(thetas, 0.1)}
    (tmp_path / "speed.json").write_text(json.dumps(minimal))
    (tmp_path / "nothing.json").write_text(json.dumps({"params": {}}))
    r = cli("converge", "plan", "--curve", "curve.json", "--target", "0.2", *args)
    assert r.code == 2
    assert r.err.count("\n") == 1 and r.err.startswith("error: ") and message in r.err, r.err


def weak_optimus_csv(path: Path) -> Path:
    """A weak-scaling study of 1 and 2 workers, one parameter server: step time
    0.0001·M/w + 0.002 + 0.001·w. It cannot tell θ2 (×w/p) from θ3 (×w), nor θ1 from θ4."""
    rows = [f"{w},1,{m * w},{0.0001 * m + 0.002 + 0.001 * w}" for w in (1, 2) for m in (16, 32, 64)]
    path.write_text("workers,ps,global_batch,step_time_s\n" + "\n".join(rows) + "\n")
    return path


def test_plan_refuses_allocations_its_speed_fit_cannot_tell(cli: Cli, tmp_path: Path) -> None:
    """Issue 29: plan took a speed fit's bare coefficients, so a 1- and 2-worker study with
    one server planned 2 servers as if the fit knew what they do."""
    fit = ("converge", "speed", "fit", "--csv", str(weak_optimus_csv(tmp_path / "weak.csv")),
           "--model", "optimus-sync", "--json")  # fmt: skip
    r = cli(*fit)
    assert r.code == 0, r.err
    assert {"theta2", "theta3"} <= set(json.loads(r.out)["undetermined"])
    (tmp_path / "speed.json").write_text(r.out)
    (tmp_path / "curve.json").write_text(
        json.dumps({"metric": "loss", "beta0": 0.01, "beta1": 1.0, "beta2": 0.1})
    )
    plan = ("converge", "plan", "--curve", "curve.json", "--speed", "speed.json", "--target",
            "0.2", "--batch", "64", "--workers", "1-4")  # fmt: skip
    r = cli(*plan, "--ps", "1,2")
    assert r.code == 2 and r.out == "", r.out
    assert r.err.count("\n") == 1 and r.err.startswith("error: ps=2, workers=1 rests on ")
    assert "theta2" in r.err and "not identifiable from these points" in r.err
    assert "--fix theta" in r.err and "--speed-params" in r.err

    # One server: the fit determines every allocation, beyond 2 workers as extrapolations.
    r = cli(*plan, "--ps", "1", "--json")
    assert r.code == 0, r.err
    outside = {a["workers"]: a["outside"] for a in json.loads(r.out)["allocations"]}
    assert outside[1] == outside[2] == {}
    assert outside[4] == {"workers": 2.0}  # 2× the most measured
    r = cli(*plan, "--ps", "1")
    assert r.code == 0, r.err
    assert "workers 2×" in r.out
    assert "workers beyond the measured 1–2 assume that each θ term stays linear" in r.out

    # The coefficients fixed (e.g. to a paper's values), two servers can be planned.
    r = cli(*fit, "--fix", "theta3=0.001,theta4=0")
    (tmp_path / "speed.json").write_text(r.out)
    r = cli(*plan, "--ps", "1,2", "--json")
    assert r.code == 0, r.err
    (a,) = [a for a in json.loads(r.out)["allocations"] if (a["ps"], a["workers"]) == (2, 1)]
    assert a["outside"] == {"ps": 2.0}

    # The cluster allocator weighs a second server for each job: refused the same way.
    r = cli(*fit)
    (tmp_path / "speed.json").write_text(r.out)
    (tmp_path / "jobs.toml").write_text(
        '[[job]]\nname = "a"\ncurve = "curve.json"\nspeed = "speed.json"\ntarget = 0.2\n'
    )
    r = cli("converge", "plan", "--cluster", "jobs.toml", "--gpus", "4")
    assert r.code == 2 and r.err.startswith("error: job a: ps=2, workers=1 rests on "), r.err


def test_plan_for_a_curve_already_past_the_target_says_so(cli: Cli, store: RunStore) -> None:
    r = cli("converge", "fit", str(accuracy_run(store)), "--metric", "accuracy", "--upto",
            "0.5", "--json")  # fmt: skip
    Path("curve.json").write_text(r.out)
    plan = ("converge", "plan", "--curve", "curve.json", "--speed-params", SPEED_PARAMS,
            "--batch", "1", "--target", "0.8")  # fmt: skip
    # 1 − (1/(0.05·k + 1) + 0.05) = 0.8 at k = 113.3, inside the window (to step 200).
    r = cli(*plan, "--plot", "plan.png")
    assert r.code == 0, r.err
    assert r.out == (
        "the curve is already at or above the target 0.8 accuracy at step 114 (its fit window "
        "ends at step 200): no steps to go\n"
    )
    assert "warning: --plot plan.png: nothing drawn, there is nothing to plan" in r.err
    assert not Path("plan.png").exists()
    r = cli(*plan, "--json")
    doc = json.loads(r.out)
    assert (doc["steps"], doc["reached_at_step"], doc["allocations"]) == (0, 114, [])


def test_regress_says_which_features_it_dropped(cli: Cli, tmp_path: Path) -> None:
    """A feature with one value in every run cannot be told from the intercept."""
    sources = [f"{loss_csv(tmp_path / f'd{d}.csv', depth_betas(d))}:depth={d},gpu=T4,width=16"
               for d in (20, 32, 44)]  # fmt: skip
    r = cli("converge", "regress", *sources, "--features", "depth,gpu,width", "--x", "step",
            "--y", "loss", "--predict", "depth=110,gpu=T4,width=16", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["columns"] == ["intercept", "depth"]
    assert doc["dropped_features"] == {"gpu": "T4", "width": "16"}
    assert r.err == (
        "warning: gpu has one value in every run (T4): left out of the regression\n"
        "warning: width has one value in every run (16): left out of the regression\n"
    )
    assert doc["prediction"]["beta0"] == pytest.approx(depth_betas(110)[0], rel=0.02)
    r = cli("converge", "regress", *sources, "--features", "depth,width", "--x", "step",
            "--y", "loss", "--predict", "depth=110,width=32")  # fmt: skip
    assert r.code == 2
    assert "every run has width=16: the regression cannot predict width=32" in r.err


def test_regress_plot_draws_only_the_fitted_range(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The predicted curves stay on the steps each fit saw: before the first point an
    accuracy curve with a small β1 dives far below 0, and it once set the y axis to −45..1."""
    import matplotlib.pyplot as plt

    drawn: list[tuple[tuple[float, float], tuple[float, float]]] = []
    close = plt.close

    def spy(fig: Any) -> None:
        ax = fig.axes[0]
        drawn.append((ax.get_xlim(), ax.get_ylim()))
        close(fig)

    monkeypatch.setattr(plt, "close", spy)
    sources = [
        f"{loss_csv(tmp_path / f'd{d}.csv', (0.15 * d / 20, 0.04, 0.05), 'accuracy')}:depth={d}"
        for d in (20, 32, 44)
    ]
    r = cli("converge", "regress", *sources, "--features", "depth", "--x", "step", "--y",
            "accuracy", "--metric", "accuracy", "--upto", "0.5", "--predict", "depth=38",
            "--plot", "r.png")  # fmt: skip
    assert r.code == 0, r.err
    (((x0, x1), (y0, y1)),) = drawn
    # The window: steps 10..200, accuracy from 0.30 up to 0.93.
    assert x0 >= 0 and x1 <= 210
    assert y0 >= 0.2 and y1 <= 1.0


def test_fit_and_single_form_predict_draw_the_fits(cli: Cli) -> None:
    fit = ("--csv", POLLUX_128, "--y", "metric", "--metric", "accuracy", "--upto", "0.3")
    for args in (["fit", *fit], ["predict", *fit, "--target", "0.9", "--form", "power"]):
        r = cli("converge", *args, "--plot", "fit.png")
        assert r.code == 0, r.err
        assert r.err.endswith("saved fit.png\n")
        assert Path("fit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        Path("fit.png").unlink()


def test_speed_fit_refuses_what_its_points_cannot_tell(cli: Cli, tmp_path: Path) -> None:
    """Issue 29: a 1- and 2-worker weak study predicted 76 s a step at 4 workers (8 ms
    measured). The fit now names what it cannot determine; the prediction is refused (one
    line, exit 2) until --fix gives the coefficient."""
    (tmp_path / "weak.csv").write_text(
        "workers,nodes,global_batch,step_time_s,sync_time_s\n"
        "1,1,16,0.003,0\n1,1,32,0.004,0\n1,1,64,0.006,0\n"
        "2,1,32,0.0045,0.0015\n2,1,64,0.0056,0.0015\n2,1,128,0.0076,0.0016\n"
    )
    fit = ("converge", "speed", "fit", "--csv", "weak.csv", "--model", "pollux")
    r = cli(*fit, "--predict", "workers=4,nodes=1")
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1
    assert "error: --predict workers=4,nodes=1: rests on beta_intra, not identifiable" in r.err
    r = cli(*fit, "--predict", "workers=4,nodes=1", "--fix", "beta_intra=0.0005", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["fixed"] == {"beta_intra": 0.0005}
    assert set(doc["undetermined"]) == {"alpha_inter", "beta_inter"}
    assert (
        doc["intervals"]["alpha_g"][0] <= doc["params"]["alpha_g"] <= doc["intervals"]["alpha_g"][1]
    )
    (p,) = doc["predictions"]
    assert p["step_time_s"] < 0.02
    assert (
        "prediction at workers=4,nodes=1,batch=64: workers 4 is outside the measured 1–2" in r.err
    )
    r = cli(*fit)
    assert r.code == 0
    assert "beta_intra: not identifiable from these points: needs runs with 3 or more" in r.out
    r = cli(*fit, "--fix", "beta_intra=-1")
    assert r.code == 2 and "--fix: beta_intra must be ≥ 0, got -1" in r.err


def resnet_run(store: RunStore, depth: int, device: str = "cpu") -> int:
    """A stored ResNet run whose validation loss follows the Optimus curve of `depth_betas`
    (per step, 10 steps an epoch, 40 epochs), on `device`."""
    run_id = store.create_run(
        name=f"resnet{depth}", kind="run", config={"model": {"name": f"resnet{depth}"}},
        system={"device": device, "gpus": []},
    )  # fmt: skip
    b0, b1, b2 = depth_betas(depth)
    rows = [("val/loss", e, 1 / (b0 * e * 10 + b1) + b2) for e in range(1, 41)]
    store.log_metrics(run_id, rows)
    store.finish_run(run_id, summary={"steps_per_epoch": 10})
    return run_id


def test_fit_of_several_runs_is_one_beta_table(cli: Cli, store: RunStore, tmp_path: Path) -> None:
    """Issue 29: `converge fit` over fifteen runs printed fifteen blocks; now one table of
    run, model, depth, device, β with intervals and fit error (JSON and CSV alike)."""
    ids = [str(resnet_run(store, d)) for d in (20, 32, 44)]
    r = cli("converge", "fit", *ids, "--to-csv", "betas.csv")
    assert r.code == 0, r.err
    assert r.out.startswith("Optimus fits of 3 curves, loss (90% intervals)\n")
    header, _, *lines = r.out.splitlines()[1:]
    assert [c.strip() for c in header.split("┃")] == [
        "run", "model", "depth", "device", "β0", "β0 5–95%", "β1", "β1 5–95%", "β2",
        "β2 5–95%", "rmse fit", "rmse held out",
    ]  # fmt: skip
    assert [line.split("│")[1].strip() for line in lines] == ["resnet20", "resnet32", "resnet44"]
    assert "fit error (held out" not in r.out  # not one block per run
    assert "saved betas.csv" in r.err
    rows = (tmp_path / "betas.csv").read_text().splitlines()
    assert rows[0].startswith("source,model,depth,device,beta0,beta0_5%,beta0_95%,beta1")
    assert rows[1].startswith(f"run {ids[0]},resnet20,20,cpu,")
    assert len(rows) == 4
    r = cli("converge", "fit", *ids, "--json")
    docs = json.loads(r.out)
    assert [d["configuration"] for d in docs] == [
        {"model": f"resnet{d}", "depth": d, "device": "cpu"} for d in (20, 32, 44)
    ]
    assert docs[0]["beta0"] == pytest.approx(depth_betas(20)[0], rel=1e-3)
    r = cli("converge", "fit", *ids, "--to-csv", "nodir/betas.csv")
    assert r.code == 2 and r.out == "" and r.err.count("\n") == 1 and "nodir/betas.csv" in r.err


def test_regress_compares_the_prediction_with_the_real_run(
    cli: Cli, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29 (HW4 P4.2): regress predicted depth 56 but drew no real depth-56 run beside
    it and gave no error. --compare overlays the run and prints the curve's error and the
    error on the epochs to the target; legends name the configuration, not "run 4"."""
    import matplotlib.pyplot as plt

    legends: list[list[str]] = []
    close = plt.close

    def spy(fig: Any) -> None:
        legends.append(fig.axes[0].get_legend_handles_labels()[1])
        close(fig)

    monkeypatch.setattr(plt, "close", spy)
    ids = [str(resnet_run(store, d)) for d in (20, 32, 44)]
    real = resnet_run(store, 56)
    r = cli("converge", "regress", *ids, "--features", "depth", "--predict", "depth=56",
            "--target", "0.35", "--compare", str(real), "--plot", "r.png", "--json")  # fmt: skip
    assert r.code == 0, r.err
    compared = json.loads(r.out)["prediction"]["compare"]
    assert compared["source"] == f"run {real}" and compared["n_points"] == 40
    # β log-linear in depth, curves noise-free: the prediction is the real curve.
    assert compared["curve_error_pct"] == pytest.approx(0, abs=0.1)
    b0, b1, b2 = depth_betas(56)
    actual = math.ceil(((1 / (0.35 - b2) - b1) / b0) / 10) * 10  # logged every 10 steps
    assert compared["actual_step"] == actual and compared["actual_epoch"] == actual / 10
    assert abs(compared["error_pct"]) < 10  # predicted between two logged epochs
    (labels,) = legends
    assert labels == [
        *(f"resnet{d} on cpu (run {i}) {kind}" for d, i in zip((20, 32, 44), ids, strict=True)
          for kind in ("measured", "fitted")),
        "depth=56 predicted",
        f"resnet56 on cpu (run {real}) measured",
    ]  # fmt: skip
    r = cli("converge", "regress", *ids, "--features", "depth", "--predict", "depth=56",
            "--target", "0.35", "--compare", str(real))  # fmt: skip
    assert r.code == 0, r.err
    assert f"compared with resnet56 on cpu (run {real}): curve error %" in r.out
    assert "error % on the steps (and epochs) to the target" in r.out
    r = cli("converge", "regress", *ids, "--features", "depth", "--predict", "depth=50",
            "--compare", str(real), "--json")  # fmt: skip
    assert r.code == 0 and "--compare " + str(real) + " has depth=56, not the predicted" in r.err
    r = cli("converge", "regress", *ids, "--features", "depth", "--compare", str(real))
    assert r.code == 2 and "--compare needs --predict" in r.err
