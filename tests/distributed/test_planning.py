"""dlperf.distributed.planning: batch arithmetic, backend and thread choice, the price of a
worker-hour, every option check's one line (before any worker starts, and the extra
TensorFlow needs checked after the options), and the points a study plans. The host's
GPUs and cores are fakes, so that the answers hold on any machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.config import ScaleConfig
from dlperf.distributed import planning
from dlperf.distributed.planning import (
    Point,
    batch_split,
    check_options,
    hourly_price,
    plan,
    resolve_backend,
    strategies,
    tf_allreduce,
    threads_per_worker,
)
from dlperf.errors import UserError


@pytest.fixture(autouse=True)
def cpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host of 4 usable cores and no GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # planning imports it late
    monkeypatch.setattr(planning, "usable_cores", lambda: 4)


def opts(**given: Any) -> ScaleConfig:
    return ScaleConfig.model_validate({"steps": 5} | given)


def test_the_batches_of_each_mode() -> None:
    assert batch_split("strong", 4, 64) == (16, 64)
    assert batch_split("weak", 4, 16) == (16, 64)
    with pytest.raises(UserError, match=r"--mode strong needs --global-batch N \(or use --mode"):
        batch_split("strong", 2, None)
    with pytest.raises(UserError, match=r"--mode weak needs --per-worker-batch N \(or use --mode"):
        batch_split("weak", 2, None)


def test_backends_and_threads() -> None:
    assert resolve_backend("auto") == "gloo" and resolve_backend("gloo") == "gloo"
    with pytest.raises(UserError, match="backend nccl needs CUDA GPUs"):
        resolve_backend("nccl")
    with pytest.raises(UserError) as e:
        resolve_backend("mpi")
    assert str(e.value) == "unknown backend 'mpi' (use auto, gloo, nccl)"
    assert [threads_per_worker(n, 4) for n in (1, 2, 3, 8)] == [4, 2, 1, 1]


def test_the_price_of_a_worker_hour(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "devices.toml"
    mine.write_text(
        '[Unpriced]\ndescription = "x"\nkind = "cpu"\npeak_tflops = { fp32 = 1.0 }\n'
        'memory_bandwidth_gbs = 10\nsource = "test"\ndate = "2026"\n'
    )
    monkeypatch.setenv("DLPERF_DEVICES", str(mine))
    assert hourly_price(opts()) is None
    assert hourly_price(opts(price_per_hour=2.5)) == 2.5
    assert hourly_price(opts(device="K80")) == 0.90  # the catalog's
    assert hourly_price(opts(device="K80", price_per_hour=0.1)) == 0.1
    with pytest.raises(UserError, match=r"device Unpriced has no price \(give --price-per-hour\)"):
        hourly_price(opts(device="Unpriced"))
    with pytest.raises(UserError, match="unknown device 'K8O'"):  # even with a price
        hourly_price(opts(device="K8O", price_per_hour=1.0))


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"steps": None}, "give one of scale.steps and scale.epochs"),
        ({"epochs": 2}, "give one of scale.steps and scale.epochs"),
        ({"nnodes": 2, "framework": "tensorflow", "strategy": ["mirrored"]},
         "--strategy mirrored runs in one process on one node"),
        ({"nnodes": 2, "framework": "horovod"}, "--framework horovod runs on one node here"),
    ],
)  # fmt: skip
def test_options_refused_whatever_the_host(given: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        check_options(opts(**given))


def test_each_framework_has_its_strategies_and_its_default() -> None:
    assert strategies(opts()) == ["ddp"]
    assert strategies(opts(framework="tensorflow")) == ["mirrored"]
    assert strategies(opts(framework="horovod")) == ["torch"]
    with pytest.raises(UserError) as e:
        strategies(opts(strategy=["mirrored"]))
    assert str(e.value) == "--strategy mirrored is not a torch strategy (use ddp | dp)"


def test_tensorflows_all_reduce_defaults_on_a_cpu_host() -> None:
    tf = opts(framework="tensorflow")
    assert tf_allreduce(tf, "mirrored") == ["one-device"]
    assert tf_allreduce(tf, "multiworker") == ["auto"]
    both = opts(framework="tensorflow", allreduce=["ring", "hierarchical"])
    assert tf_allreduce(both, "mirrored") == ["hierarchical"]  # each strategy takes its own
    assert tf_allreduce(both, "multiworker") == ["ring"]
    with pytest.raises(UserError, match=r"--allreduce nccl needs GPUs.*\(use auto or ring\)"):
        tf_allreduce(opts(framework="tensorflow", allreduce=["nccl"]), "multiworker")


def test_a_study_plans_series_by_series_fewest_workers_first() -> None:
    study = opts(workers=[2, 1], mode=["weak", "strong"], per_worker_batch=[64, 32],
                 global_batch=64, comm=["allreduce", "fp16"])  # fmt: skip
    points = plan(study, "gloo")
    assert [(p.mode, p.workers, p.per_worker_batch, p.global_batch) for p in points[::2]] == [
        ("weak", 1, 32, 32), ("weak", 2, 32, 64),
        ("weak", 1, 64, 64), ("weak", 2, 64, 128),
        ("strong", 1, 64, 64), ("strong", 2, 32, 64),
    ]  # fmt: skip
    assert [p.comm for p in points[:2]] == ["allreduce", "fp16"]
    assert points[0].label() == "1 workers ddp/allreduce, weak, 32 per worker"
    assert points[0].group == ("weak", 32, "allreduce", "ddp", None)
    assert points[2].group == points[0].group  # 2 workers: the same series


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"workers": [8]}, "8 workers per node but this host has 4 usable cores"),
        ({"workers": [3], "nnodes": 2, "rdzv": "h:1"}, "3 workers do not split evenly over 2"),
        ({"nnodes": 2}, "--nnodes > 1 needs --rdzv HOST:PORT"),
        ({"nnodes": 2, "node_rank": 2, "rdzv": "h:1"}, r"--node-rank 2 is not in 0\.\.1"),
        ({"strategy": ["dp"]}, r"--strategy dp \(DataParallel\) needs GPUs; none here"),
        ({"framework": "tensorflow", "comm": ["fp16"]}, "--bucket-mb and --comm are DDP's"),
        ({"framework": "tensorflow", "strategy": ["mirrored"], "allreduce": ["ring"]},
         "--allreduce ring is not an all-reduce of --strategy mirrored"),
    ],
)  # fmt: skip
def test_plan_refuses_with_one_line(given: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=message):
        plan(opts(**{"mode": "weak", "per_worker_batch": 8} | given), "gloo", "smallcnn")


def test_oversubscribing_is_allowed_when_asked() -> None:
    study = opts(workers=[8], mode="weak", per_worker_batch=8, allow_oversubscribe=True)
    assert [p.workers for p in plan(study, "gloo")] == [8]


def test_tensorflow_missing_is_said_after_every_option_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(planning.importlib.util, "find_spec", lambda name: None)
    study = opts(framework="tensorflow", mode="weak", per_worker_batch=8)
    with pytest.raises(UserError) as e:
        plan(study, "gloo", "smallcnn")
    assert str(e.value) == (
        "--framework tensorflow needs TensorFlow, which is not installed "
        "(pip install -e '.[tensorflow]')"
    )
    with pytest.raises(UserError, match="model 'resnet20' has no TensorFlow version here"):
        plan(study, "gloo", "resnet20")  # a wrong option first, installed or not


def test_a_point_without_a_mode_has_no_series() -> None:
    point = Point(2, 32, 64, "allreduce", "ddp", 4.0)
    assert point.group == (None, None, "allreduce", "ddp", 4.0)
    assert point.label() == "2 workers ddp/allreduce bucket 4MB"
