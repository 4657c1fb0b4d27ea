"""`dlperf scale --framework tensorflow`: TensorFlow's MirroredStrategy (logical CPU devices)
and MultiWorkerMirroredStrategy (worker processes with TF_CONFIG on loopback) measured as the
DDP path is. The options are checked without TensorFlow; the studies skip without it (the
`tensorflow` extra: pip install -e '.[tensorflow]')."""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from dlperf.config import ScaleConfig
from dlperf.distributed.contracts import read_ranks
from dlperf.distributed.planning import Point, plan
from dlperf.distributed.summary import summarize
from dlperf.errors import UserError
from dlperf.procs import alive
from dlperf.store import RunStore
from tests.conftest import CliResult, rank_result
from tests.data.test_sources import write_jpegs
from tests.distributed.test_study import two_nodes

HAS_TF = importlib.util.find_spec("tensorflow") is not None
DLPERF = [sys.executable, "-m", "dlperf"]
needs_tf = pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed (the extra)")
STUDY = """
[model]
name = "smallcnn"
[data]
name = "synthetic"
shape = [3, 16, 16]
[train]
lr = 0.01
momentum = 0.9
[scale]
framework = "tensorflow"
synthetic = true
workers = [1, 2]
mode = "strong"
global_batch = 16
steps = 4
warmup_steps = 1
repeat = 1
chunks = 2
[run]
out_dir = "{out}"
"""


def write_study(root: Path) -> Path:
    path = root / "tf.toml"
    path.write_text(STUDY.format(out=root / "runs"))
    return path


# The keys of a DDP point's row: every framework's rows have them all.
DDP_ROW_KEYS = set(
    summarize(Point(2, 8, 16, "allreduce", "ddp", None),
              [rank_result(0, [0.1], [0.05], 8, world=1)], 1, 1, "gloo", 100, None).to_dict()
)  # fmt: skip


def on_digits(path: Path) -> Path:
    """The study at `path` on the digits' training split instead of synthetic images."""
    study = path.read_text().replace('name = "synthetic"\nshape = [3, 16, 16]', 'name = "digits"')
    path.write_text(study.replace("synthetic = true", ""))
    return path


def tf_opts(**changes: object) -> ScaleConfig:
    good = {"framework": "tensorflow", "synthetic": True, "workers": [1, 2], "mode": "strong",
            "global_batch": 16, "steps": 2}  # fmt: skip
    return ScaleConfig.model_validate({**good, **changes})


@pytest.mark.parametrize(
    ("mode", "batch"), [("strong", {"global_batch": 64}), ("weak", {"per_worker_batch": 32})]
)
def test_the_batch_arithmetic_is_the_ddp_paths(
    mode: str, batch: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # as if installed
    common = {"workers": [1, 2], "mode": mode, "steps": 2, **batch}
    ddp = plan(ScaleConfig.model_validate(common), "gloo")
    tf = plan(tf_opts(strategy=["multiworker", "mirrored"], **common), "tensorflow", "smallcnn")
    split = {(p.workers, p.per_worker_batch, p.global_batch) for p in ddp}
    assert {(p.workers, p.per_worker_batch, p.global_batch) for p in tf} == split
    assert [(p.strategy, p.comm) for p in tf[:2]] == [("multiworker", "auto"),
                                                     ("mirrored", "one-device")]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "model", "message"),
    [
        ({"strategy": ["ddp"]}, "smallcnn", "--strategy ddp is not a tensorflow strategy (use "
                                            "mirrored | multiworker)"),
        ({"allreduce": ["ring"], "strategy": ["mirrored"]}, "smallcnn",
         "--allreduce ring is not an all-reduce of --strategy mirrored (mirrored takes nccl | "
         "hierarchical | one-device)"),
        ({"allreduce": ["nccl"]}, "smallcnn", "--allreduce nccl needs GPUs, and none are "
                                              "available here (use hierarchical or one-device)"),
        ({}, "resnet20", "model 'resnet20' has no TensorFlow version here (use model.name = "
                         "resnet50 or smallcnn)"),
        ({"bucket_mb": [25.0]}, "smallcnn", "--bucket-mb and --comm are DDP's"),
        ({"workers": [64], "strategy": ["multiworker"], "global_batch": 64}, "smallcnn",
         "64 workers per node but this host"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("installed", [True, False], ids=["with-tf", "without-tf"])
def test_options_the_tensorflow_path_refuses(
    changes: dict[str, object],
    model: str,
    message: str,
    installed: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each wrong option gets its own message whether or not the extra is installed (the
    bad-input catalogue runs without TensorFlow on a newcomer's machine, with it in CI)."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (
            (object() if installed else None) if name == "tensorflow" else find_spec(name, *a)
        ),
    )
    with pytest.raises(UserError) as e:
        plan(tf_opts(**changes), "tensorflow", model)
    assert message in str(e.value)


def test_multiworker_on_gpus_takes_one_gpu_per_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each MultiWorker process sees one GPU: more workers on a node than GPUs is refused
    before any starts (it failed at launch with an IndexError)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError, match="2 workers per node but 1 GPUs"):
        plan(tf_opts(strategy=["multiworker"]), "tensorflow", "smallcnn")


def test_without_tensorflow_the_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"pip install -e '\.\[tensorflow\]'"):
        plan(tf_opts(), "tensorflow", "smallcnn")


def test_a_torch_study_refuses_a_tensorflow_strategy() -> None:
    opts = ScaleConfig(workers=[1], mode="weak", per_worker_batch=8, steps=2, strategy=["mirrored"])
    with pytest.raises(UserError, match="--strategy mirrored is not a torch strategy"):
        plan(opts, "gloo")


@needs_tf
@pytest.mark.parametrize(
    ("strategy", "allreduce", "workers", "data"),
    [("mirrored", "hierarchical", [1, 2], "synthetic"), ("mirrored", "one-device", [2], "digits"),
     ("multiworker", "auto", [1, 2], "digits")],
    ids=["mirrored-hierarchical", "mirrored-one-device-digits", "multiworker-auto-digits"],
)  # fmt: skip
def test_workers_train_in_step(
    strategy: str,
    allreduce: str,
    workers: list[int],
    data: str,
    tmp_path: Path,
    store: RunStore,
    cli: Callable[..., CliResult],
) -> None:
    """Each strategy at one worker and two (MirroredStrategy's logical CPU devices in one
    process, MultiWorker's processes on loopback), each of MirroredStrategy's cross-device ops
    at two; MultiWorker's ring all-reduce trains across two nodes
    (test_two_nodes_on_loopback_trade_addresses_and_store_once).

    On the digits, without --synthetic, the workers read the experiment's training split,
    written once for every point of the study: MultiWorker's two processes each take every
    other image, as DDP's ranks do, MirroredStrategy's one process all of them."""
    path = write_study(tmp_path)
    if data == "digits":
        on_digits(path)
    points = ["--workers", ",".join(map(str, workers))]
    result = cli("scale", str(path), *points, "--strategy", strategy, "--allreduce", allreduce,
                 "--json")  # fmt: skip
    assert result.code == 0, result.err
    out = json.loads(result.out)
    rows = out["rows"]
    assert [(r["workers"], r["per_worker_batch"], r["global_batch"]) for r in rows] == [
        (w, 16 // w, 16) for w in workers]  # fmt: skip
    for r in rows:
        assert r["status"] == "finished" and (r["strategy"], r["comm"]) == (strategy, allreduce)
        assert r.keys() >= DDP_ROW_KEYS and r["backend"] == "tensorflow"
        assert r["replica_max_diff"] == 0.0  # every replica holds the same weights
        assert r["throughput"] > 0 and r["timed_steps"] == 4 and r["grad_bytes"] > 0
        assert not any(alive(pid) for pid in r["worker_pids"])
        # the processes of the point: MirroredStrategy's replicas share one
        assert r["world_size"] == (r["workers"] if strategy == "multiworker" else 1)
    # No fake DDP figures: the ranks report none, and their fingerprints are compared away.
    for result in tmp_path.glob("**/p*/result.json"):
        assert all(r.main.ddp is None and r.main.fingerprint is None for r in read_ranks(result))
    # Two workers: the compute-only replica splits the step into compute and communication.
    assert rows[-1]["compute_s"] > 0
    assert rows[-1]["comm_exposed_s"] == max(0.0, rows[-1]["step_time_s"] - rows[-1]["compute_s"])
    if workers[0] == 1:
        assert rows[1]["speedup"] == pytest.approx(rows[1]["throughput"] / rows[0]["throughput"])
        assert rows[0]["compute_s"] is None
    assert len({r["run_id"] for r in rows}) == len(workers) and out["study_id"] is not None
    logical = "MirroredStrategy's replicas are logical CPU devices"
    assert (logical in out["label"]) == (strategy == "mirrored")
    if data == "digits":
        (data_file,) = tmp_path.glob("runs/**/train.npz")  # one file for every point
        with np.load(data_file) as f:
            assert f["images"].shape[1:] == (8, 8, 1) and f["images"].dtype == np.uint8
            for r in rows:  # every image of the training split
                assert len(f["labels"]) == pytest.approx(r["epoch_time_s"] * r["throughput"])


@needs_tf  # torch itself asks importlib whether tensorflow is there: it cannot be faked
def test_a_data_set_streamed_from_files_is_refused(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    write_jpegs(tmp_path / "folder")
    path = write_study(tmp_path)
    folder = f'name = "imagefolder"\nroot = "{tmp_path / "folder"}"\nimage_size = 16\n'
    path.write_text(path.read_text().replace('name = "synthetic"\n', folder + "in_memory = false\n")
                    .replace("synthetic = true", ""))  # fmt: skip
    result = cli("scale", str(path), "--strategy", "multiworker")
    assert result.code == 2
    assert "TensorFlow reads the training images from memory, and imagefolder streams" in result.err


@needs_tf
def test_a_killed_worker_fails_its_point_and_leaves_no_process(
    tmp_path: Path, store: RunStore, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLPERF_SCALE_CRASH", "1:2:kill")  # rank 1 SIGKILLs itself at step 2
    path = write_study(tmp_path)
    result = cli("scale", str(path), "--workers", "2", "--strategy", "multiworker", "--json")
    assert result.code == 1
    (row,) = json.loads(result.out)["rows"]
    assert row["status"] == "failed"
    assert row["error"].startswith("TensorFlow worker 1 failed (killed by SIGKILL)")
    assert len(row["worker_pids"]) == 2 and not any(alive(pid) for pid in row["worker_pids"])
    assert store.get_run(row["run_id"]).status == "failed"


@needs_tf
def test_two_nodes_on_loopback_trade_addresses_and_store_once(
    tmp_path: Path, store: RunStore, cli: Callable[..., CliResult]
) -> None:
    """Two dlperf processes as two nodes: they meet at node 0's store, each starts its worker
    with a TF_CONFIG naming both, and node 0 stores one run with both ranks."""
    node = ["scale", str(write_study(tmp_path)), "--workers", "2", "--strategy", "multiworker"]
    result, elsewhere = two_nodes(cli, [*node, "--allreduce", "ring"], tmp_path)
    (row,) = json.loads(result.out)["rows"]
    assert (row["workers"], row["nodes"], row["global_batch"], row["status"]) == (
        2, 2, 16, "finished")  # fmt: skip
    assert (row["strategy"], row["comm"], row["world_size"]) == ("multiworker", "ring", 2)
    assert [rank["rank"] for rank in row["ranks"]] == [0, 1]
    assert row["replica_max_diff"] == 0.0 and row["emulation"] is None
    assert row["compute_s"] > 0
    (run,) = store.list_runs(kind="scale")
    assert run.summary["nodes"] == 2
    assert RunStore.open(str(elsewhere / "node1.db")).list_runs() == []


def test_job_files_run_the_tensorflow_study_on_every_node(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    path = write_study(tmp_path)
    argv = ["scale", str(path), "--strategy", "multiworker", "--workers", "2", "--nnodes", "2"]
    result = cli(*argv, "--emit", "slurm", "--out", "job.sh")
    assert result.code == 0, result.err
    script = (tmp_path / "job.sh").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --cpus-per-task=1" in script
    srun = script.splitlines()[-1]
    per_node = shlex.split(shlex.split(srun)[-1])
    assert per_node[:5] == ["dlperf", "scale", str(path), "--strategy", "multiworker"]
    assert per_node[-6:] == ["--nnodes", "2", "--node-rank", "$SLURM_NODEID", "--rdzv",
                             "$head_node:29500"]  # fmt: skip
    result = cli(*argv, "--emit", "kubernetes", "--image", "me/dl:1")
    assert result.code == 0, result.err
    manifest = yaml.safe_load(result.out)
    (container,) = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"
    ]
    assert container["args"][-4:] == ["--node-rank", "$(RANK)", "--rdzv",
                                      "$(MASTER_ADDR):$(MASTER_PORT)"]  # fmt: skip
    result = cli("scale", str(path), "--strategy", "mirrored", "--nnodes", "2", "--emit", "slurm")
    assert result.code == 2
    assert "--strategy mirrored runs in one process on one node (use multiworker)" in result.err


def test_a_keras_study_warns_of_each_setting_it_ignores(tmp_path: Path, store: RunStore) -> None:
    """The Keras step trains with plain SGD on unaugmented fp32 images: each setting of the
    experiment away from its default that it cannot honour is one warning naming the key;
    settings at their defaults, and a torch study, warn of nothing."""
    from dlperf.config import ScaleJob, load_job
    from dlperf.distributed.study import Study
    from dlperf.progress import NullReporter

    sets = ["train.grad_clip=1.0", 'train.schedule.kind="cosine"', "augment.flip=true"]
    sets += ['run.precision="bf16"', "train.lr=0.2", "train.momentum=0.8"]
    exp = load_job(ScaleJob, write_study(tmp_path), sets)
    study = Study(exp, store, tmp_path, NullReporter())
    assert study.warnings == [
        "TensorFlow ignores train.grad_clip = 1.0: the Keras SGD takes only train.lr and "
        "train.momentum",
        "TensorFlow ignores train.schedule.kind = 'cosine': the Keras SGD takes only train.lr "
        "and train.momentum",
        "TensorFlow ignores augment.flip = True: no augmentation",
        "TensorFlow ignores run.precision = 'bf16': fp32, uncompiled",
    ]
    assert (
        Study(
            load_job(ScaleJob, write_study(tmp_path), []), store, tmp_path, NullReporter()
        ).warnings
        == []
    )
    torch_study = load_job(ScaleJob, write_study(tmp_path), [*sets, 'scale.framework="torch"'])
    assert Study(torch_study, store, tmp_path, NullReporter()).warnings == []
    horovod_tf = [*sets, 'scale.framework="horovod"', 'scale.strategy=["tensorflow"]']
    hvd = Study(
        load_job(ScaleJob, write_study(tmp_path), horovod_tf), store, tmp_path, NullReporter()
    )
    assert len(hvd.warnings) == 4
