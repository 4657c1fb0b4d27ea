"""The CUDA code paths on a real GPU (issue 25), through the real commands: runs at fp16 and
bf16 with their phases timed by CUDA events, GPU memory and utilisation per run, a scaling
study and the all-reduce benchmark over NCCL, the largest batch found by a real CUDA
out-of-memory error, calibration and PALEO's per-layer error on the GPU, export through ONNX
Runtime's CUDA provider, and the doctor's cpu-not-gpu on a run forced onto the CPU.

Marked `gpu` (`make test-gpu`); every test skips without CUDA, so they cost nothing in CI."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.analytic.devices import KINDS
from dlperf.engine.timers import PHASES
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.hooks import hook_env

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: no GPU visible"),
]

Cli = Callable[..., CliResult]
NVML = importlib.util.find_spec("pynvml") is not None  # the `gpu` extra


def gpu_names() -> list[str]:
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def ok(result: CliResult) -> dict:
    assert result.code == 0, (result.out, result.err)
    return json.loads(result.out)


# --- dlperf run --------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_run_on_the_gpu_at_mixed_precision(
    cli: Cli, store: RunStore, tiny_exp: Callable[..., Path], precision: str
) -> None:
    if precision == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        pytest.skip("bf16 needs a GPU of compute capability 8.0 or later")
    args = ["--set", "run.device=cuda", "--set", f"run.precision={precision}"]
    doc = ok(cli("run", str(tiny_exp(epochs=2)), *args, "--timing", "phases", "--json"))
    assert doc["status"] == "finished" and doc["device"] == "cuda:0"
    assert doc["test_accuracy"] > 0.5
    record = store.get_run(doc["run_id"])
    assert record.config["run"]["precision"] == precision
    assert record.system["device"] == "cuda:0" and record.system["gpus"] == gpu_names()
    assert record.system["cuda"] and record.system["cudnn"]

    # fp16 trains through the gradient scaler, bf16 (fp32's exponent) without one.
    checkpoint = torch.load(store.artifacts(doc["run_id"])[0]["path"], weights_only=True)
    if precision == "fp16":
        assert checkpoint["scaler"]["scale"] > 0 and checkpoint["scaler"]["_growth_tracker"] >= 0
    else:
        assert checkpoint["scaler"] == {}

    # The phases come from CUDA events, and together they span the steps the host clock saw.
    assert doc["phase_clock"] == "cuda_events"
    phases = doc["phases"]
    assert set(phases) == set(PHASES) and min(phases.values()) >= 0
    assert phases["forward"] > 0 and phases["backward"] > 0 and phases["optimizer"] > 0
    timed_steps = doc["steps"] - 2  # the experiment's warm-up
    assert sum(phases.values()) == pytest.approx(doc["train_time_s"] / timed_steps, rel=0.25)
    spread = doc["step_time_spread"]
    assert 0 < spread["min"] <= spread["median"] <= spread["max"]
    assert len(store.metrics(doc["run_id"], "phase/forward_s")) == 2

    memory = doc["gpu_memory"]
    assert 0 < memory["max_allocated_bytes"] <= memory["max_reserved_bytes"]
    assert doc["peak_memory_bytes"] == memory["max_allocated_bytes"]
    utilization = doc["gpu_utilization_pct"]
    if NVML:
        assert 0 <= utilization["min"] <= utilization["max"] <= 100
        assert [e for e, _ in store.metrics(doc["run_id"], "gpu/utilization_pct")] == [1, 2]
        assert record.system["visible_gpus"]
    else:
        assert utilization is None and record.system["visible_gpus"] is None


def test_each_run_reports_its_own_peak_memory(cli: Cli, tiny_exp: Callable[..., Path]) -> None:
    """Two runs in one process (as in a sweep): the small one after the large one reports its
    own peak, not the process's."""
    exp = str(tiny_exp(epochs=1))
    on_gpu = ["--set", "run.device=cuda", "--json"]
    large = ok(cli("run", exp, *on_gpu, "--set", "train.batch_size=512"))
    small = ok(cli("run", exp, *on_gpu, "--set", "train.batch_size=16"))
    assert small["gpu_memory"]["max_allocated_bytes"] < large["gpu_memory"]["max_allocated_bytes"]


def test_a_gpu_run_resumes_on_the_gpu(
    cli: Cli, db: str, store: RunStore, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """A real `dlperf run` on CUDA interrupted in its second epoch resumes from a checkpoint
    read onto the CPU: weights, optimizer state and fp16 scaler go back to the GPU, and the
    CUDA generator's state is restored."""
    path = tiny_exp(epochs=2, extra='device = "cuda"\nprecision = "fp16"\nlog_every = 5\n')
    marker = tmp_path / "paused"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlperf", "--db", db, "run", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **hook_env("pause_at_step", f"45:{marker}")},  # 40 steps an epoch
    )
    deadline = time.monotonic() + 300
    try:
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the run never reached step 45"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=300) == 130
    finally:
        proc.kill()
        proc.wait()
    (run,) = store.list_runs()
    assert run.status == "killed"
    resumed = ok(cli("run", "--resume", str(run.id), "--json"))
    assert resumed["status"] == "finished" and resumed["device"] == "cuda:0"
    assert resumed["steps"] == 2 * resumed["steps_per_epoch"]
    steps = [s for s, _ in store.metrics(run.id, "train/loss")]
    assert steps == list(range(1, resumed["steps"] + 1))


def test_a_run_trained_on_the_gpu_exports(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """The checkpoint of a CUDA run loads into the CPU model that export traces."""
    run = ok(cli("run", str(tiny_exp(epochs=1)), "--set", "run.device=cuda", "--json"))
    out = tmp_path / "run.onnx"
    doc = ok(cli("export", str(run["run_id"]), "--out", str(out), "--json"))
    assert doc["run_id"] == run["run_id"] and doc["parity"] is True
    assert {s["input"] for s in doc["parity_sets"]} == {"random", "test images"}


# --- dlperf scale over NCCL ----------------------------------------------------------------

SCALE_EXPERIMENT = """
[model]
name = "smallcnn"
[data]
name = "synthetic"
shape = [1, 8, 8]
size = 256
[train]
lr = 0.05
[run]
out_dir = "{out}"
"""


def worker_counts() -> str:
    """1, and 2 where the host has a second GPU (one GPU per NCCL worker)."""
    return ",".join(str(n) for n in range(1, min(2, torch.cuda.device_count()) + 1))


def test_a_scaling_study_over_nccl(cli: Cli, store: RunStore, tmp_path: Path) -> None:
    path = tmp_path / "scale.toml"
    path.write_text(SCALE_EXPERIMENT.format(out=tmp_path / "dlperf_runs"))
    weak = ["--mode", "weak", "--per-worker-batch", "16", "--warmup-steps", "2", "--steps", "5"]
    args = ["--workers", worker_counts(), "--backend", "nccl", *weak, "--no-plots", "--json"]
    doc = ok(cli("scale", str(path), *args))
    assert doc["rows"]
    for row in doc["rows"]:
        assert row["status"] == "finished" and row["backend"] == "nccl"
        assert row["throughput"] > 0 and row["replica_max_diff"] == 0.0
        run = store.get_run(row["run_id"])
        assert run.system["backend"] == "nccl" and run.summary["backend"] == "nccl"


def test_the_allreduce_benchmark_over_nccl(cli: Cli, store: RunStore) -> None:
    workers = worker_counts()
    bench = ["allreduce", "--workers", workers, "--backend", "nccl"]
    doc = ok(cli("scale", *bench, "--sizes", "4KB,16MB", "--iters", "3", "--json"))
    assert doc["backend"] == "nccl" and not doc["failures"]
    assert {row["bytes"] for row in doc["rows"]} == {4096, 16 * 2**20}
    assert all(row["time_s"] > 0 for row in doc["rows"])
    if workers.endswith("2"):  # the ring model needs an all-reduce between 2 or more GPUs
        assert doc["ring_model"]["bandwidth_bytes_per_s"] > 0
    runs = store.list_runs(kind="allreduce")
    assert runs and all(store.get_run(r.id).system["backend"] == "nccl" for r in runs)


FIND_MAX_EXPERIMENT = """
[model]
name = "resnet50"
[data]
name = "synthetic"
shape = [3, 224, 224]
size = 2048
[train]
lr = 0.05
[run]
out_dir = "{out}"
"""


def test_find_max_batch_recovers_from_a_real_cuda_out_of_memory(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    """ResNet-50 at 224x224 on random images: the batch grows x4 from 32 until a worker runs
    out of GPU memory (fp32 training takes tens of MB an image: 8192 images are several
    hundred GB), and the study reports the last size that fitted."""
    path = tmp_path / "big.toml"
    path.write_text(FIND_MAX_EXPERIMENT.format(out=tmp_path / "dlperf_runs"))
    args = ["--workers", "1", "--synthetic", "--no-plots", "--json"]
    doc = ok(cli("scale", "max-batch", str(path), *args))
    *fitted, failed = doc["rows"]
    assert fitted and all(row["status"] == "finished" for row in fitted)
    assert failed["out_of_memory"] is True and failed["status"] == "failed"
    batch = failed["per_worker_batch"]
    assert failed["error"].startswith(f"out of memory at per-worker batch {batch}: ")
    assert "CUDA out of memory" in failed["error"]
    assert doc["max_per_worker_batch"] == fitted[-1]["per_worker_batch"]
    assert batch == 4 * doc["max_per_worker_batch"]
    assert doc["stopped"] == {"reason": "out_of_memory", "per_worker_batch": batch,
                              "detail": failed["error"].splitlines()[0]}  # fmt: skip
    statuses = [run.status for run in store.list_runs(kind="scale")]
    assert sorted(statuses) == sorted(["finished"] * len(fitted) + ["failed"])


# --- calibrate and predict --measure ------------------------------------------------------


def test_calibrate_and_predict_measure_on_the_gpu(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLPERF_DEVICES", str(tmp_path / "devices.toml"))
    device = ok(cli("calibrate", "--name", "this-gpu", "--json"))
    assert device["kind"] == "gpu" and torch.cuda.get_device_name() in device["description"]
    assert device["peak_tflops"]["fp32"] > 0 and device["memory_bandwidth_gbs"] > 0
    assert device["threads"] is None  # a GPU's rates do not depend on the host's threads
    kinds = device["ppp_by_kind"]  # a kind calibrate could not solve is left out, and named
    assert list(kinds) == [k for k in KINDS if k not in device["unsolved"]]
    assert all(0 < v < math.inf for v in kinds.values())
    assert store.get_run(device["run_id"]).system["device"] == "cuda:0"

    args = ["--device", "this-gpu", "--input", "3,32,32", "--batch", "64", "--reps", "3"]
    doc = ok(cli("predict", "resnet20", *args, "--measure", "--json"))
    measured = doc["measured"]
    assert measured["measured_s"]["min"] > 0 and math.isfinite(measured["error_pct"])
    # PALEO's error per operator kind: every measured layer, grouped by its module type.
    errors: dict[str, list[float]] = defaultdict(list)
    for row in measured["layers"]:
        assert row["measured_s"] > 0, row
        errors[row["type"]].append(row["error_pct"])
    assert {"Conv2d", "BatchNorm2d", "Linear"} <= set(errors)
    assert all(math.isfinite(statistics.median(e)) for e in errors.values())
    run = store.get_run(measured["run_id"])
    assert (run.kind, run.status) == ("predict", "finished")
    assert run.system["device"] == "cuda:0"


# --- export through ONNX Runtime's CUDA provider ------------------------------------------


def test_export_with_onnx_runtimes_cuda_provider(cli: Cli, tmp_path: Path) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("needs onnxruntime-gpu: this ONNX Runtime has no CUDA provider")
    from dlperf.deploy import runtime

    out = tmp_path / "resnet20.onnx"
    doc = ok(cli("export", "resnet20", "--input", "3,32,32", "--out", str(out), "--json"))
    assert doc["parity"] is True and doc["top1_agreement"] == 1.0
    # The session export compared with is the one every inference path opens: CUDA first.
    assert runtime.session(out).get_providers()[0] == "CUDAExecutionProvider"


# --- the doctor ------------------------------------------------------------------------------


def test_the_doctor_flags_a_run_forced_onto_the_cpu(
    cli: Cli, tiny_exp: Callable[..., Path]
) -> None:
    run = ok(cli("run", str(tiny_exp(epochs=1)), "--set", "run.device=cpu", "--json"))
    assert run["device"] == "cpu" and run["gpu_memory"] is None
    doc = ok(cli("doctor", str(run["run_id"]), "--json"))
    (finding,) = [f for f in doc["findings"] if f["rule"] == "cpu-not-gpu"]
    assert finding["severity"] == "warning"
    assert finding["figures"] == {"device": "cpu", "gpus": gpu_names()}
    assert 'run.device = "auto" or "cuda" (now "cpu")' in finding["fix"]
