"""dlperf.distributed.worker without torchrun: synthetic batches, the loss check across
ranks, the memory cap, the compute-only replica's gradient-ready medians, the one-line
failure files, the DDP hook each communication name registers, and gathering in a world of
one gloo process."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from dlperf.config import Experiment
from dlperf.distributed import worker
from dlperf.distributed.contracts import ComputePhase
from dlperf.distributed.worker import (
    Divergence,
    Found,
    Launch,
    Phase,
    Replica,
    alone,
    batches,
    comm_hook,
    fail_in_one_line,
    gathered,
)
from dlperf.engine.loop import Diverged

CPU = torch.device("cpu")


def _exp(seed: int = 0) -> Experiment:
    return Experiment.model_validate({"run": {"seed": seed}})


def _spec(**kw: Any) -> Any:
    return SimpleNamespace(**({"per_worker_batch": 3, "synthetic": True,
                               "memory_cap_bytes": None} | kw))  # fmt: skip


DATA = SimpleNamespace(shape=(1, 4, 4), num_classes=5)


def test_synthetic_batches_repeat_one_random_batch_of_the_models_shape() -> None:
    source = batches(_spec(), _exp(), DATA, CPU, rank=0, world=2)  # type: ignore[arg-type]
    (x1, y1), (x2, y2) = next(source), next(source)
    assert x1.shape == (3, 1, 4, 4) and y1.shape == (3,)
    assert bool((y1 >= 0).all() and (y1 < 5).all())
    assert x1 is x2 and y1 is y2  # the same tensors every step: no data cost to time


def test_synthetic_batches_are_seeded_per_rank_and_run_seed() -> None:
    def first(seed: int, rank: int) -> torch.Tensor:
        return next(batches(_spec(), _exp(seed), DATA, CPU, rank, 2))[0]  # type: ignore[arg-type]

    assert torch.equal(first(0, 1), first(0, 1))
    assert not torch.equal(first(0, 0), first(0, 1))
    assert not torch.equal(first(0, 0), first(1, 0))
    # seed * 1000 + rank: run seed 0's rank 1000 draws what run seed 1's rank 0 does
    assert torch.equal(first(0, 1000), first(1, 0))


def _ends(divergence: Divergence, losses: list[float], lr: float = 0.1) -> None:
    for step, loss in enumerate(losses, start=1):
        stepped = SimpleNamespace(loss=torch.tensor(loss), lr=lr)
        divergence.on_step_end(SimpleNamespace(step=step, stepped=stepped))  # type: ignore[arg-type]


def test_finite_losses_pass_and_are_forgotten_at_the_epochs_end() -> None:
    seen: list[Found | None] = []
    divergence = Divergence(lambda mine: seen.append(mine) or [mine])
    _ends(divergence, [2.3, 1.9])
    divergence.on_epoch_end(1)
    assert seen == [None] and divergence.losses == []


def test_the_first_loss_that_is_not_finite_is_the_runs_divergence() -> None:
    divergence = Divergence(alone)
    _ends(divergence, [2.3, math.inf, math.nan], lr=0.5)
    with pytest.raises(Diverged, match=r"loss became inf at step 2 \(epoch 3\); try a lower "
                       r"train\.lr \(now 0\.5\)"):  # fmt: skip
        divergence.on_epoch_end(3)


def test_every_rank_raises_the_earliest_step_any_rank_found() -> None:
    peers: list[Found | None] = [None, (4, 1, math.nan, 0.1), (2, 1, math.inf, 0.1)]
    divergence = Divergence(lambda mine: [mine, *peers])
    _ends(divergence, [1.0, 1.0, 1.0])  # this rank's own losses are all finite
    with pytest.raises(Diverged, match=r"loss became inf at step 2 \(epoch 1\)"):
        divergence.on_epoch_end(1)


def test_a_launch_gathers_alone_unless_told() -> None:
    launch = Launch("horovod", 0, 1, lambda: None)
    assert launch.gather is alone and alone((1, 1, math.nan, 0.1)) == [(1, 1, math.nan, 0.1)]


def _replica(cap: int | None) -> Replica:
    replica = object.__new__(Replica)  # its loop parts are not needed for the check
    replica.spec, replica.device, replica.lr = _spec(memory_cap_bytes=cap), CPU, None
    return replica


def test_a_replica_keeps_the_last_lr_and_stops_above_its_memory_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker, "peak_memory_bytes", lambda device: 3 * 2**30)
    done: Any = SimpleNamespace(stepped=SimpleNamespace(lr=0.25))
    free = _replica(None)
    free.on_step_end(done)
    assert free.lr == 0.25
    _replica(4 * 2**30).on_step_end(done)  # under the cap
    with pytest.raises(MemoryError, match=r"^peak memory 3\.00 GiB is above the cap of 2\.00 GiB$"):
        _replica(2 * 2**30).on_step_end(done)


def test_compute_only_takes_each_gradients_median_ready_time_over_the_timed_steps() -> None:
    phase = object.__new__(Phase)
    phase.model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    phase.model[0].weight.requires_grad_(False)  # frozen: neither timed nor counted
    # per step: the forward's end, then the ready marks of the 3 trained parameters
    phase.ready = [(0.0, [9.0, 9.0, 9.0]),  # a warm-up step: not timed
                   (10.0, [10.3, 10.2, 10.1]), (20.0, [20.1, 20.4, 20.2]),
                   (30.0, [30.2, 30.3, 30.3])]  # fmt: skip
    done = phase.compute_only(ComputePhase((0.5, 0.6, 0.7)))
    assert done.step_times_s == (0.5, 0.6, 0.7)
    assert done.grad_ready_s == pytest.approx((0.2, 0.3, 0.2))
    assert done.grad_sizes == (3 * 4, 3 * 4, 1 * 4)  # bias 0, weight 1, bias 1: float32 bytes
    phase.ready = []
    assert phase.compute_only(ComputePhase((0.5,))) == ComputePhase((0.5,))


class Exited(Exception):
    pass


def test_a_failure_in_one_line_leaves_both_files_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def _exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(worker.os, "_exit", _exit)
    with pytest.raises(Exited) as e:
        fail_in_one_line(tmp_path, 3, "loss became nan at step 2 (epoch 1); ...")
    assert e.value.args == (1,)
    assert (tmp_path / "rank-3.failure").read_text() == "loss became nan at step 2 (epoch 1); ..."
    assert (tmp_path / "rank-3.error").read_text() == "loss became nan at step 2 (epoch 1); ...\n"


@pytest.fixture
def world_of_one(tmp_path: Path) -> Iterator[None]:
    """A gloo process group of this process alone."""
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0,
                            world_size=1)  # fmt: skip
    try:
        yield
    finally:
        dist.destroy_process_group()


class Recorder:
    """A DDP model as comm_hook sees it: the hooks registered on it (building a real
    DistributedDataParallel costs seconds of imports the first time)."""

    def __init__(self) -> None:
        self.hooks: list[tuple[Any, Any]] = []

    def register_comm_hook(self, state: Any, hook: Any) -> None:
        self.hooks.append((state, hook))


def _hooked(name: str) -> list[tuple[Any, Any]]:
    model = Recorder()
    comm_hook(name, model)  # type: ignore[arg-type]
    return model.hooks


def test_each_comm_name_registers_its_ddp_hook() -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    assert _hooked("allreduce") == []  # DDP's own all-reduce
    assert _hooked("fp16") == [(None, default_hooks.fp16_compress_hook)]
    assert _hooked("bf16") == [(None, default_hooks.bf16_compress_hook)]
    assert _hooked("noop") == [(None, debugging_hooks.noop_hook)]
    [(state, hook)] = _hooked("powersgd")
    assert hook is powersgd.powerSGD_hook
    assert (state.matrix_approximation_rank, state.start_powerSGD_iter) == (1, 2)


@pytest.mark.usefixtures("world_of_one")
def test_gathered_is_every_ranks_object_in_rank_order() -> None:
    assert gathered({"rank": 0, "steps": [0.1]}) == [{"rank": 0, "steps": [0.1]}]
