"""Synchronous and emulated asynchronous SGD (dlperf.engine.async_sgd) from the same initial
weights, recorded as two runs of one study.

Each run streams its metrics to the store as it trains, through the same `StoreSink` as
`dlperf run` (per-step losses, per-epoch validation curves), and a diverged loss fails it as
it fails `dlperf run`. A finished run's summary holds its staleness histogram; the command
adds a figure of both curves as an artifact.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass
from typing import Any

from torch import nn

from dlperf.config import Experiment
from dlperf.engine import async_sgd
from dlperf.engine.build import Prepared, prepare_run
from dlperf.engine.loop import Diverged
from dlperf.engine.step import WrongOutput, steps_per_epoch
from dlperf.experiment.sink import StoreSink, failed_softly
from dlperf.models.registry import seed_generators
from dlperf.progress import NullReporter, Reporter
from dlperf.records import Record, RunResult
from dlperf.store import RunStore
from dlperf.system import system_info

MODES = ("sync", "async")


@dataclass(frozen=True)
class TrainedRun(Record):
    """A finished run of the study: its validation accuracy per epoch, then its summary."""

    run_id: int
    val_acc1: tuple[float | None, ...]
    steps_per_epoch: int
    val_accuracy: float | None
    val_loss: float | None
    mean_staleness: float
    staleness_histogram: dict[str, int]


@dataclass(frozen=True)
class StalenessStudy:
    """The study's id, its learners' speeds and, per mode, its finished run or the
    `RunResult` of a run that failed (its loss diverged)."""

    study_id: int
    learners: dict[str, float]
    runs: dict[str, TrainedRun | RunResult]

    @property
    def failed(self) -> list[RunResult]:
        return [run for run in self.runs.values() if isinstance(run, RunResult)]

    def to_dict(self) -> dict[str, Any]:
        """`dlperf staleness --train --json`'s document: study_id, learners, then each mode's
        run as `dlperf run --json` gives a failed one."""
        head = {"study_id": self.study_id, "learners": self.learners}
        return head | {mode: run.to_dict() for mode, run in self.runs.items()}


def study(
    exp: Experiment,
    speeds: dict[str, float],
    store: RunStore,
    reporter: Reporter | None = None,
) -> StalenessStudy:
    """Synchronous then emulated asynchronous SGD of `exp` with learners of `speeds`, each
    recorded as a run of one study."""
    reporter = reporter or NullReporter()
    p = prepare_run(exp, store, reporter)  # the model as a run starts it, for both runs
    models = {"sync": p.model, "async": copy.deepcopy(p.model)}
    per_epoch = steps_per_epoch(len(p.data.train), exp.train.batch_size)
    reads = async_sgd.read_versions(speeds, per_epoch * exp.train.epochs)
    study_id = store.create_study(f"staleness {exp.model.name}", "staleness")
    if p.crowded:
        reporter.log(f"warning: {p.crowded}")
    runs = {
        mode: _record(exp, speeds, reads, mode, models[mode], p, store, study_id, reporter)
        for mode in MODES
    }
    return StalenessStudy(study_id, speeds, runs)


def _record(
    exp: Experiment,
    speeds: dict[str, float],
    reads: list[int],
    mode: str,
    model: nn.Module,
    p: Prepared,
    store: RunStore,
    study_id: int,
    reporter: Reporter,
) -> TrainedRun | RunResult:
    """Train `model` as the study's run of `mode`, the async one on the versions `reads`."""
    config = {**exp.to_dict(), "staleness": {"mode": mode, "learners": speeds}}
    with store.new_run(
        name=f"{exp.model.name} {mode}",
        kind="staleness",
        config=config,
        system=system_info(p.device, p.threads),
        study_id=study_id,
    ) as record:
        seed_generators(exp.run.seed)  # both draw the random numbers a run draws
        sink = StoreSink(store, record.id)
        schedule = reads if mode == "async" else None
        try:
            history, stale = async_sgd.train(exp, p.data, model, p.device, schedule, reporter, sink)
        except (Diverged, WrongOutput) as e:
            return failed_softly(record, e)
        counts = Counter(str(s) for s in stale)
        record.summary = {
            "steps_per_epoch": steps_per_epoch(len(p.data.train), exp.train.batch_size),
            "val_accuracy": history[-1].get("acc1"),
            "val_loss": history[-1].get("loss"),
            "mean_staleness": sum(stale) / len(stale),
            "staleness_histogram": dict(sorted(counts.items(), key=lambda kv: int(kv[0]))),
        }
    return TrainedRun(record.id, tuple(m.get("acc1") for m in history), **record.summary)
