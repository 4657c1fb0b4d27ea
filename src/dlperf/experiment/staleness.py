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
from typing import Any

import torch
from torch import nn

from dlperf.config import Experiment
from dlperf.engine import async_sgd
from dlperf.engine.build import Prepared, prepare_run
from dlperf.engine.loop import Diverged
from dlperf.engine.step import steps_per_epoch
from dlperf.experiment.sink import StoreSink, diverged
from dlperf.progress import NullReporter, Reporter
from dlperf.store import RunStore
from dlperf.system import system_info

MODES = ("sync", "async")


def study(
    exp: Experiment,
    speeds: dict[str, float],
    store: RunStore,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """Synchronous then emulated asynchronous SGD of `exp` with learners of `speeds`; per
    mode, the run's id with its validation accuracy per epoch and summary, or how it failed
    (`dlperf run --json`'s shape of a failed run)."""
    reporter = reporter or NullReporter()
    p = prepare_run(exp, store, reporter)  # the model as a run starts it, for both runs
    models = {"sync": p.model, "async": copy.deepcopy(p.model)}
    per_epoch = steps_per_epoch(len(p.data.train), exp.train.batch_size)
    reads = async_sgd.read_versions(speeds, per_epoch * exp.train.epochs)
    study_id = store.create_study(f"staleness {exp.model.name}", "staleness")
    result: dict[str, Any] = {"study_id": study_id, "learners": speeds}
    if p.crowded:
        reporter.log(f"warning: {p.crowded}")
    for mode in MODES:
        result[mode] = _record(exp, speeds, reads, mode, models[mode], p, store, study_id, reporter)
    return result


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
) -> dict[str, Any]:
    """Train `model` as the study's run of `mode`, the async one on the versions `reads`."""
    config = {**exp.to_dict(), "staleness": {"mode": mode, "learners": speeds}}
    with store.new_run(
        name=f"{exp.model.name} {mode}",
        kind="staleness",
        config=config,
        system=system_info(p.device, p.threads),
        study_id=study_id,
    ) as record:
        torch.manual_seed(exp.run.seed)  # both draw the random numbers a run draws
        sink = StoreSink(store, record.id)
        schedule = reads if mode == "async" else None
        try:
            history, stale = async_sgd.train(exp, p.data, model, p.device, schedule, reporter, sink)
        except Diverged as e:
            return diverged(record, e).to_dict()  # the study's JSON document holds it
        counts = Counter(str(s) for s in stale)
        record.summary = {
            "steps_per_epoch": steps_per_epoch(len(p.data.train), exp.train.batch_size),
            "val_accuracy": history[-1].get("acc1"),
            "val_loss": history[-1].get("loss"),
            "mean_staleness": sum(stale) / len(stale),
            "staleness_histogram": dict(sorted(counts.items(), key=lambda kv: int(kv[0]))),
        }
    return {"run_id": record.id, "val_acc1": [m.get("acc1") for m in history], **record.summary}
