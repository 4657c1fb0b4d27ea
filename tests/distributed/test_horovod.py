"""`dlperf scale --framework horovod`: horovodrun with Horovod's torch and TensorFlow bindings
on loopback, measured as the DDP path is. The option checks run everywhere; the studies are
marked `horovod` (make test-horovod, a CI step of its own) and skip without a Horovod build
(`make horovod`)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.config import ScaleConfig
from dlperf.distributed import hvd_launch
from dlperf.distributed.contracts import read_ranks
from dlperf.distributed.planning import plan
from dlperf.errors import UserError
from dlperf.procs import alive
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.distributed.test_tensorflow import DDP_ROW_KEYS, on_digits, tf_opts
from tests.distributed.test_tensorflow import write_study as write_tf_study

HAS_HOROVOD = hvd_launch.horovodrun() is not None
HAS_TF = importlib.util.find_spec("tensorflow") is not None
needs_horovod = pytest.mark.skipif(not HAS_HOROVOD, reason="Horovod is not built (make horovod)")
EVENT_S = 600  # generous: TensorFlow's start on a busy 2-core host takes a minute or more


def write_study(root: Path) -> Path:
    """The tf.distribute tests' study, on Horovod."""
    path = write_tf_study(root)
    path.write_text(path.read_text().replace('framework = "tensorflow"', 'framework = "horovod"'))
    return path


def hvd_opts(**changes: object) -> ScaleConfig:
    return tf_opts(**{"framework": "horovod", **changes})


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if horovodrun and TensorFlow were installed."""
    monkeypatch.setattr(hvd_launch, "horovodrun", lambda: "/usr/bin/horovodrun")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())


def test_the_points_are_the_ddp_paths_per_binding(installed: None) -> None:
    common = {"workers": [1, 2], "mode": "weak", "per_worker_batch": 32, "steps": 2}
    ddp = plan(ScaleConfig.model_validate(common), "gloo")
    hvd = plan(hvd_opts(strategy=["torch", "tensorflow"], comm=["allreduce", "fp16"],
                        bucket_mb=[1.0], **common), "horovod", "smallcnn")  # fmt: skip
    split = {(p.workers, p.per_worker_batch, p.global_batch) for p in ddp}
    assert {(p.workers, p.per_worker_batch, p.global_batch) for p in hvd} == split
    assert [(p.strategy, p.comm, p.bucket_mb) for p in hvd[:4]] == [
        ("torch", "allreduce", 1.0), ("torch", "fp16", 1.0),
        ("tensorflow", "allreduce", 1.0), ("tensorflow", "fp16", 1.0)]  # fmt: skip
    # The torch binding takes any model of dlperf's registry, TensorFlow's only its own.
    assert plan(hvd_opts(), "horovod", "resnet18")


@pytest.mark.parametrize(
    ("changes", "model", "message"),
    [
        ({"strategy": ["ddp"]}, "smallcnn", "--strategy ddp is not a horovod strategy (use torch "
                                            "| tensorflow)"),
        ({"comm": ["powersgd"]}, "smallcnn", "--comm powersgd is DDP's (horovod takes allreduce "
                                             "| fp16)"),
        ({"allreduce": ["ring"]}, "smallcnn", "--allreduce goes with --framework tensorflow"),
        ({"strategy": ["tensorflow"]}, "resnet20", "model 'resnet20' has no TensorFlow version"),
        ({"nnodes": 2, "rdzv": "h:1"}, "smallcnn", "--framework horovod runs on one node here"),
        ({"workers": [64], "global_batch": 64}, "smallcnn", "64 workers per node but this host"),
    ],
)  # fmt: skip
def test_options_the_horovod_path_refuses(
    changes: dict[str, object], model: str, message: str, installed: None
) -> None:
    with pytest.raises(UserError) as e:
        plan(hvd_opts(**changes), "horovod", model)
    assert message in str(e.value)


def test_without_horovod_the_build_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hvd_launch, "horovodrun", lambda: None)
    with pytest.raises(UserError, match=r"needs Horovod, which is not installed.*make horovod"):
        plan(hvd_opts(), "horovod", "smallcnn")


@pytest.mark.parametrize(
    ("strategy", "comm", "data"),
    [("torch", "allreduce", "synthetic"), ("torch", "fp16", "digits"),
     ("tensorflow", "allreduce", "digits")],
)  # fmt: skip
@pytest.mark.horovod
@needs_horovod
def test_one_and_two_workers_train_in_step(
    strategy: str,
    comm: str,
    data: str,
    tmp_path: Path,
    store: RunStore,
    cli: Callable[..., CliResult],
) -> None:
    """Synthetic images, or the digits' training split: each rank its shard, as DDP's ranks
    take theirs (torch: the DDP workers' own batches; TensorFlow: the file dlperf writes)."""
    if strategy == "tensorflow" and not HAS_TF:
        pytest.skip("TensorFlow is not installed (the extra)")
    path = write_study(tmp_path)
    if data == "digits":
        on_digits(path)
    args = ["scale", str(path), "--strategy", strategy, "--comm", comm, "--bucket-mb", "0.5"]
    result = cli(*args, "--json")
    assert result.code == 0, result.err
    rows = json.loads(result.out)["rows"]
    assert [(r["workers"], r["per_worker_batch"], r["global_batch"]) for r in rows] == [
        (1, 16, 16), (2, 8, 16)]  # fmt: skip
    for r in rows:
        assert r["status"] == "finished" and (r["strategy"], r["comm"]) == (strategy, comm)
        assert r.keys() >= DDP_ROW_KEYS and r["backend"] == "horovod" and r["bucket_mb"] == 0.5
        assert r["replica_max_diff"] == 0.0  # rank 0's weights, broadcast, then equal steps
        assert r["throughput"] > 0 and r["timed_steps"] == 4
        # smallcnn, 10 classes, fp32, at 3x16x16 (synthetic) or 1x8x8 (digits)
        assert r["grad_bytes"] == 4 * (315_722 if data == "synthetic" else 53_002)
        assert not any(alive(pid) for pid in r["worker_pids"])
        assert r["world_size"] == r["workers"]  # hvd.size(), one process per worker
    for result in tmp_path.glob("**/p*/result.json"):  # no fake DDP figures
        assert all(r.main.ddp is None and r.main.fingerprint is None for r in read_ranks(result))
    assert [len(r["ranks"]) for r in rows] == [1, 2]
    assert rows[0]["compute_s"] is None and rows[1]["compute_s"] > 0
    assert rows[1]["speedup"] == pytest.approx(rows[1]["throughput"] / rows[0]["throughput"])


def _in_environment(needle: str) -> dict[int, str]:
    """pid -> command line of every running process whose environment mentions `needle`:
    every process a dlperf started with it has it, horovodrun's middlemen included."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not alive(int(entry.name)):
            continue
        try:
            if needle.encode() in (entry / "environ").read_bytes():
                found[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours
            continue
    return found


@pytest.mark.horovod
@needs_horovod
def test_a_killed_worker_fails_its_point_and_leaves_no_process(
    tmp_path: Path,
    store: RunStore,
    cli: Callable[..., CliResult],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DLPERF_SCALE_CRASH", "1:2:kill")  # rank 1 SIGKILLs itself at step 2
    monkeypatch.setenv("DLPERF_TEST_MARK", str(tmp_path))
    result = cli("scale", str(write_study(tmp_path)), "--workers", "2", "--json")
    assert result.code == 1
    (row,) = json.loads(result.out)["rows"]
    assert row["status"] == "failed"
    assert row["error"].startswith("Horovod worker rank 1 failed (killed by SIGKILL)")
    assert len(row["worker_pids"]) == 2
    assert store.get_run(row["run_id"]).status == "failed"
    deadline = time.monotonic() + EVENT_S
    while _in_environment(f"DLPERF_TEST_MARK={tmp_path}"):
        assert time.monotonic() < deadline, _in_environment(f"DLPERF_TEST_MARK={tmp_path}")
        time.sleep(0.05)


@pytest.mark.horovod
@needs_horovod
def test_a_sigkilled_dlperf_takes_horovodrun_and_its_workers_along(tmp_path: Path) -> None:
    """horovodrun dies with dlperf (the guard's parent-death signal), and Horovod's
    middlemen end their workers when horovodrun is gone: nothing is left running."""
    path = write_study(tmp_path)
    mark_env = f"DLPERF_TEST_MARK={tmp_path}"
    env = {**os.environ, "DLPERF_DB": str(tmp_path / "s.db"), "DLPERF_TEST_MARK": str(tmp_path)}
    argv = [sys.executable, "-m", "dlperf", "scale", str(path), "--workers", "2"]
    proc = subprocess.Popen([*argv, "--steps", "100000"], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + EVENT_S
        while len(list(tmp_path.glob("runs/**/p0/rank-*.pid"))) < 2:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        workers = [int(p.read_text()) for p in tmp_path.glob("runs/**/p0/rank-*.pid")]
        assert all(alive(pid) for pid in workers)
        assert len(_in_environment(mark_env)) > 3  # dlperf, horovodrun, workers, middlemen
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=EVENT_S)
    deadline = time.monotonic() + EVENT_S
    while _in_environment(mark_env):
        assert time.monotonic() < deadline, _in_environment(mark_env)
        time.sleep(0.05)
