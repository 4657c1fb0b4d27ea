"""The training engine on real (bundled) data: it learns, times, stops on NaN, resumes."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf import system
from dlperf.config import ScheduleConfig, load_experiment
from dlperf.data import load_data
from dlperf.engine import checkpoint, loop, train
from dlperf.engine.build import build_model
from dlperf.engine.hooks import HOOKS_ENV, Hooks, StepEnd
from dlperf.engine.optim import lr_factor
from dlperf.engine.timers import PHASES, PhaseTimer
from dlperf.errors import UserError
from dlperf.experiment.run import resume_run, run_experiment
from dlperf.records import RunSummary
from dlperf.store import RunStore
from tests.conftest import CliResult, FakeEvent
from tests.hooks import PAUSE_ENV, SIGNAL_ENV, PauseAt, install


def test_a_digits_run_learns_and_is_recorded(
    store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    exp = load_experiment(tiny_exp(epochs=3))
    result = run_experiment(exp, store)
    assert result.status == "finished"
    assert result.summary.test_accuracy > 0.85 and result.summary.best_val_accuracy > 0.85
    assert result.summary.epochs_to_target is not None and result.summary.time_to_target_s > 0
    assert result.summary.throughput > 0 and result.summary.throughput_spread["min"] > 0
    assert result.summary.steps == 3 * result.summary.steps_per_epoch

    record = store.get_run(result.run_id)
    assert record.status == "finished" and record.config == exp.to_dict()
    assert record.system["torch"] and record.system["device"] == "cpu"
    assert record.summary["test_accuracy"] == result.summary.test_accuracy
    losses = store.metrics(result.run_id, "train/loss")
    assert [s for s, _ in losses] == list(range(1, result.summary.steps + 1))
    assert [s for s, _ in store.metrics(result.run_id, "val/acc1")] == [1, 2, 3]
    assert Path(store.artifacts(result.run_id)[0]["path"]).is_file()


def test_phase_timing(store: RunStore, tiny_exp: Callable[..., Path]) -> None:
    exp = load_experiment(tiny_exp(epochs=1), ['run.timing="phases"'])
    result = run_experiment(exp, store)
    phases = result.summary.phases
    assert set(phases) == {"data", "h2d", "forward", "backward", "optimizer"}
    assert all(v >= 0 for v in phases.values()) and phases["backward"] > 0
    spread = result.summary.step_time_spread
    assert 0 < spread["min"] <= spread["median"] <= spread["max"]
    # The phases of a step add up to the step (no time falls between the marks).
    assert sum(phases.values()) == pytest.approx(
        result.summary.train_time_s / (result.summary.steps - 2), rel=0.2
    )
    assert store.metrics(result.run_id, "phase/forward_s")
    # On the CPU the host clock times the phases, and there is no GPU to report on.
    assert result.summary.phase_clock == "host"
    assert result.summary.gpu_memory is None and result.summary.gpu_utilization_pct is None


PHASE_SECONDS = dict(zip(PHASES, (0.5, 0.25, 1.0, 2.0, 0.25), strict=True))


def _time_steps(timer: PhaseTimer, steps: int) -> None:
    timer.start()
    for _ in range(steps):
        for phase, seconds in PHASE_SECONDS.items():
            FakeEvent.clock += seconds
            timer.mark(phase)
        timer.end_step()


def test_a_cuda_timer_reads_events_once_per_step(fake_events: list[str]) -> None:
    timer = PhaseTimer(torch.device("cuda", 0), enabled=True)
    _time_steps(timer, 1)  # warm-up: waited for, not recorded
    timer.recording = True
    FakeEvent.clock += 10.0  # between steps (a checkpoint, say): the next data wait has it
    for _ in range(3):
        for phase, seconds in PHASE_SECONDS.items():
            FakeEvent.clock += seconds
            timer.mark(phase)
        timer.end_step()
    assert fake_events == []  # the host never waits between phases
    assert FakeEvent.waits == 4  # but once per step
    assert timer.clock == "cuda_events"
    assert timer.per_step() == pytest.approx(PHASE_SECONDS | {"data": (10.5 + 0.5 + 0.5) / 3})
    assert train.spread(timer.step_times) == pytest.approx({"min": 4.0, "median": 4.0, "max": 14.0})


def test_cpu_and_disabled_timers_use_no_events(
    fake_events: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_event(enable_timing: bool) -> None:
        raise AssertionError("no CUDA event on this timer")

    monkeypatch.setattr(torch.cuda, "Event", no_event)
    cpu = PhaseTimer(torch.device("cpu"), enabled=True)
    cpu.recording = True
    _time_steps(cpu, 2)
    # Synchronised before every clock read: the epoch's start and each of the 2 x 5 marks.
    assert fake_events == ["cpu"] * 11 and cpu.clock == "host"
    assert set(cpu.per_step()) == set(PHASES) and len(cpu.step_times) == 2
    off = PhaseTimer(torch.device("cuda", 0), enabled=False)
    off.recording = True
    _time_steps(off, 2)
    assert fake_events == ["cpu"] * 11 and off.clock is None and off.per_step() == {}


def test_gpu_utilization_is_read_each_epoch_and_summarised(
    store: RunStore, tiny_exp: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML's readings (here a stand-in, as this host has no GPU) become one metric per
    epoch and a spread in the summary."""
    readings = iter([40.0, 80.0, 60.0])
    monkeypatch.setattr(loop, "gpu_utilization", lambda device: next(readings))
    result = run_experiment(load_experiment(tiny_exp(epochs=3)), store)
    assert store.metrics(result.run_id, "gpu/utilization_pct") == [
        (1, 40.0),
        (2, 80.0),
        (3, 60.0),
    ]
    assert result.summary.gpu_utilization_pct == {"min": 40.0, "median": 60.0, "max": 80.0}


def test_an_explicit_cuda_device_is_recorded_with_its_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert system.pick_device("cuda") == torch.device("cuda", 1)
    assert system.pick_device("cuda:0") == torch.device("cuda", 0)
    with pytest.raises(UserError, match=r"device 'cuda:2': only 2 GPU\(s\) here"):
        system.pick_device("cuda:2")


def test_gpu_gauges_are_never_required(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = torch.device("cuda", 0)
    assert system.gpu_utilization(torch.device("cpu")) is None
    assert system.gpu_memory(torch.device("cpu")) is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the `gpu` extra is not installed
    assert system.gpu_utilization(cuda) is None
    assert system.host_gpus() is None


def test_timing_off_keeps_only_the_totals(store: RunStore, tiny_exp: Callable[..., Path]) -> None:
    exp = load_experiment(tiny_exp(epochs=1), ['run.timing="off"'])
    result = run_experiment(exp, store)
    assert result.summary.phases is None and result.summary.throughput > 0
    assert "epoch/time_s" not in store.metric_keys(result.run_id)


def test_target_never_reached(store: RunStore, tiny_exp: Callable[..., Path]) -> None:
    exp = load_experiment(tiny_exp(epochs=1), ["target.accuracy=1.0", "train.lr=0.0001"])
    result = run_experiment(exp, store)
    assert result.summary.epochs_to_target is None and result.summary.time_to_target_s is None


def test_nan_loss_stops_the_run(store: RunStore, tiny_exp: Callable[..., Path]) -> None:
    exp = load_experiment(tiny_exp(epochs=3), ["train.lr=1e12", "train.momentum=0.0"])
    result = run_experiment(exp, store)
    assert result.status == "failed" and result.summary is None
    record = store.get_run(result.run_id)
    assert record.status == "failed" and record.error == result.error
    assert result.to_dict() == {"run_id": result.run_id, "status": "failed", "error": record.error}
    assert "loss became" in record.error and "at step" in record.error
    assert "try a lower train.lr" in record.error
    # Losses up to the bad step are kept; the bad one is the last.
    losses = store.metrics(result.run_id, "train/loss")
    assert not math.isfinite(losses[-1][1]) and all(math.isfinite(v) for _, v in losses[:-1])


def test_batch_augmentation_and_augmented_pipeline(
    store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    exp = load_experiment(
        tiny_exp(epochs=1),
        [
            "augment.batch_aug_m=3",
            "augment.crop_padding=1",
            "augment.flip=true",
            "augment.cutout=2",
        ],
    )
    result = run_experiment(exp, store)
    assert result.status == "finished" and result.summary.samples_per_step == 96


@pytest.mark.parametrize(
    ("overrides", "epochs"),
    [
        (['data.loader="torchvision"', "data.num_workers=2", "augment.crop_padding=1"], 2),
        (['run.precision="bf16"', "run.channels_last=true"], 2),
        # fp16 on a CPU steps ~15x slower than bf16; one epoch reaches 0.79 at the seed
        (['run.precision="fp16"', "train.grad_clip=1.0"], 1),
        (['train.optimizer="adamw"', "train.lr=0.001", "train.schedule.warmup_epochs=0.5"], 2),
    ],
)
def test_engine_options_run(
    store: RunStore, tiny_exp: Callable[..., Path], overrides: list[str], epochs: int
) -> None:
    result = run_experiment(load_experiment(tiny_exp(epochs=epochs), overrides), store)
    assert result.status == "finished" and result.summary.test_accuracy > 0.5


def test_batch_larger_than_training_set_writes_nothing(
    store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    exp = load_experiment(tiny_exp(), ["train.batch_size=5000"])
    with pytest.raises(UserError, match=r"train\.batch_size 5000 is larger than the 1294 training"):
        run_experiment(exp, store)
    assert store.list_runs() == []


def test_schedules() -> None:
    multistep = ScheduleConfig(kind="multistep", milestones=[6, 8], gamma=0.1)
    assert [lr_factor(e, multistep, 10, 0.1) for e in (0, 5.99, 6, 8, 9.5)] == pytest.approx(
        [1, 1, 0.1, 0.01, 0.01]
    )
    cosine = ScheduleConfig(kind="cosine", warmup_epochs=2)
    assert lr_factor(1, cosine, 10, 0.1) == pytest.approx(0.5)
    assert lr_factor(2, cosine, 10, 0.1) == pytest.approx(1.0)
    assert lr_factor(6, cosine, 10, 0.1) == pytest.approx(0.5)
    assert lr_factor(10, cosine, 10, 0.1) == pytest.approx(0.0)
    assert lr_factor(3, ScheduleConfig(), 10, 0.1) == 1.0


RESUMABLE = "log_every = 5\n"  # appended to the [run] section


def test_resume_continues_exactly(
    store: RunStore,
    db: str,
    tiny_exp: Callable[..., Path],
    cli: Callable[..., CliResult],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Interrupt `dlperf run` with SIGINT in its third epoch, after its second checkpoint,
    resume it, and compare every logged value with an uninterrupted run. The run is stopped
    in this process, through the CLI's own stop handling: a process start was most of this
    test's time, and real processes stopped by SIGINT, SIGTERM and SIGKILL at seeded steps
    and resumed are tests/faults/test_run_faults.py's."""
    path = tiny_exp(epochs=3, extra=RESUMABLE)
    # 256 training images: 8 steps an epoch, the stop at step 21 (what is compared is exact,
    # whatever the accuracy)
    path.write_text(path.read_text().replace("\n[train]", "\nlimit = 256\n[train]"))
    reference = run_experiment(load_experiment(path), store)

    # The engine's test hook sends the signal at that step, so it cannot come too late.
    step = 2 * reference.summary.steps_per_epoch + 5
    install(monkeypatch, "signal_in_exec", f"{step}:INT")
    stopped = cli("--db", db, "run", str(path))
    for name in (HOOKS_ENV, SIGNAL_ENV):
        monkeypatch.delenv(name)
    assert stopped.code == 130, stopped.err
    run_id = reference.run_id + 1
    # The store as the command line named it (round 28): without it the hint opened ./dlperf.db
    again = f"dlperf --db {db} run --resume {run_id}"
    hint = f"run {run_id} stopped; continue it from its last checkpoint: {again}"
    assert hint in stopped.err
    interrupted = store.get_run(run_id)
    assert interrupted.status == "killed"
    assert store.last_step(run_id, "val/acc1") == 2

    resumed = resume_run(run_id, store)
    assert resumed.status == "finished" and resumed.summary.steps == reference.summary.steps
    assert resumed.summary.test_accuracy == reference.summary.test_accuracy
    for key in ("train/loss", "train/lr", "val/loss", "val/acc1", "epoch/lr"):
        assert store.metrics(run_id, key) == store.metrics(reference.run_id, key), key
    with pytest.raises(UserError, match="already finished"):
        resume_run(run_id, store)


def test_pause_hook_needs_a_step_and_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PAUSE_ENV, raising=False)
    assert PauseAt().step is None
    monkeypatch.setenv(PAUSE_ENV, "5")
    with pytest.raises(UserError, match=f"{PAUSE_ENV} must be STEP:PATH, not '5'"):
        PauseAt()


class _Hungry(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_a_forward_out_of_memory_is_said_as_such() -> None:
    """A CUDA OOM in the dry forward is not "the model rejects these images"."""
    from dlperf.engine.checks import dry_forward
    from dlperf.errors import out_of_memory

    with pytest.raises(UserError, match=r"out of memory in a forward of two \(3, 8, 8\) images"):
        dry_forward(_Hungry(), (3, 8, 8), "the model rejects 3x8x8 images")
    assert out_of_memory(RuntimeError("CUDNN_STATUS_ALLOC_FAILED in cudnnConvolutionForward"))
    assert out_of_memory(RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    # Linux's CPU allocator, as `dlperf export smallcnn --input 3,100000,100000` met it
    assert out_of_memory(
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't "
            "allocate memory: you tried to allocate 480000000000 bytes. Error code 12"
        )
    )
    assert not out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3)"))


def test_each_step_keeps_its_own_wall_time(
    store: RunStore, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """Losses are written ten steps at a time, but each keeps the time its step ended: the
    batch's write time put ten points on one instant (a wall of bars against wall time)."""
    result = run_experiment(load_experiment(tiny_exp(epochs=1, extra="log_every = 10\n")), store)
    from dlperf.exporters import metric_series

    walls = [w for _, _, w in metric_series(store, result.run_id)["train/loss"]]
    assert len(walls) > 10
    assert len(set(walls)) == len(walls) and walls == sorted(walls)


def test_a_checkpoint_keeps_the_rng_of_the_runs_gpu_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the run's GPU's generator is saved and restored, so a run resumes where fewer
    GPUs are visible; a checkpoint of every GPU's (before 2026-11-24) gives the run's own."""
    from dlperf.engine import checkpoint

    calls: list[tuple[str, object, torch.device]] = []
    monkeypatch.setattr(
        torch.cuda, "get_rng_state", lambda d: calls.append(("get", None, d)) or "s"
    )
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, d: calls.append(("set", s, d)))
    gpu1 = torch.device("cuda", 1)
    state = checkpoint.rng_state(gpu1)
    assert state["cuda"] == "s" and calls == [("get", None, gpu1)]
    checkpoint.set_rng_state(state, gpu1)
    checkpoint.set_rng_state({**state, "cuda": ["s0", "s1"]}, gpu1)
    checkpoint.set_rng_state({**state, "cuda": ["s0"]}, gpu1)  # GPU 1 not in it: left alone
    assert calls[1:] == [("set", "s", gpu1), ("set", "s1", gpu1)]
    cpu = torch.device("cpu")
    assert "cuda" not in checkpoint.rng_state(cpu)
    checkpoint.set_rng_state(state, cpu)  # a GPU run resumed on the CPU
    assert len(calls) == 3


class MemorySink:
    """The loop's metric sink in memory."""

    def __init__(self) -> None:
        self.rows: list[tuple[object, ...]] = []
        self.artifacts: list[tuple[str, Path]] = []

    def log_metrics(self, rows: list[tuple[object, ...]]) -> None:
        self.rows += rows

    def add_artifact(self, kind: str, path: Path) -> None:
        self.artifacts.append((kind, path))


class Steps:
    """A hook handed to the loop in process: the steps it saw."""

    def __init__(self) -> None:
        self.trainer, self.steps = "", list[int]()

    def start(self, trainer: str, model: torch.nn.Module) -> None:
        self.trainer = trainer

    def step_end(self, event: StepEnd) -> None:
        self.steps.append(event.step)


def test_the_loop_sends_metrics_to_its_sink_and_calls_its_hooks(
    tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    exp = load_experiment(tiny_exp(epochs=2), ["run.checkpoint=false"])
    data = load_data(exp.data)
    model = build_model(exp, data, torch.device("cpu"))
    sink, seen = MemorySink(), Steps()
    slot = checkpoint.Slot(tmp_path / "checkpoint.pt", checkpoint.Owner("memory", 1, None))
    summary = train.train(exp, model, data, torch.device("cpu"), sink, slot, hooks=Hooks([seen]))
    assert isinstance(summary, RunSummary) and summary.epochs == 2
    assert seen.trainer == "run" and seen.steps == list(range(1, summary.steps + 1))
    losses = [row for row in sink.rows if row[0] == "train/loss"]
    assert [row[1] for row in losses] == seen.steps
    assert {"epoch/train_loss", "val/acc1", "epoch/time_s"} <= {row[0] for row in sink.rows}
    assert not (tmp_path / "checkpoint.pt").exists()
