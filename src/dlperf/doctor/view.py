"""How the doctor's rules read the store: a `RunView` of one run (its config, system,
summary and metrics), over `Stored`, which reads each run, study and metric once; and the
`Issue` a rule returns."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf.distributed.contracts import PointSummary
from dlperf.distributed.scaling import series
from dlperf.store import RunStore
from dlperf.store.query import config_value
from dlperf.store.record import RunRecord

Figures = dict[str, Any]


@dataclass(frozen=True)
class Issue:
    severity: str
    evidence: str
    fix: str
    figures: Figures = field(default_factory=dict)


class Stored:
    """The store, read once per thing: runs, studies and metrics are cached."""

    def __init__(self, store: RunStore, db: Sequence[str] = ()) -> None:
        self.store = store
        # The --db words a fix's command needs to reach this store (`examine`'s `db`).
        self.db = tuple(db)
        self.run = functools.cache(store.get_run)
        self.study = functools.cache(lambda study_id: store.list_runs(study_id=study_id))
        self.everything = functools.cache(store.list_runs)
        self.metrics = functools.cache(store.metrics)
        self.metric_keys = functools.cache(store.metric_keys)

    def find(self, run_id: int) -> RunRecord | None:
        """A run that another names (a transfer's source), None if it is gone."""
        try:
            return self.run(run_id)
        except Exception:
            return None


@dataclass
class RunView:
    """One stored run as the rules read it."""

    stored: Stored
    run: RunRecord

    @functools.cached_property
    def point_summary(self) -> PointSummary | None:
        """A scale point's summary, typed; None for other runs and unsummarised points."""
        return PointSummary.stored(self.run.summary) if self.run.kind == "scale" else None

    @property
    def system(self) -> dict[str, Any]:
        return self.run.system or {}

    @property
    def experiment(self) -> dict[str, Any]:
        """The experiment config: a scale point keeps it under "experiment"."""
        config = self.run.config or {}
        return config.get("experiment", config) if self.run.kind == "scale" else config

    @property
    def point(self) -> dict[str, Any]:
        return (self.run.config or {}).get("point") or {}

    def key(self, dotted: str) -> Any:
        return config_value(self.experiment, dotted)

    def metric(self, key: str) -> list[tuple[int, float]]:
        return self.stored.metrics(self.run.id, key)

    def device(self) -> str | None:
        device = self.run.trained.device or self.system.get("device")
        if device is None:  # a scale point's workers: gloo on the CPU, nccl on GPUs
            device = {"gloo": "cpu", "nccl": "cuda"}.get(self.system.get("backend", ""))
        return device

    def threads(self) -> int | None:
        """A scale point's threads per worker, else the run's intra-op threads."""
        p = self.point_summary
        per_worker = p.threads_per_worker if p else None
        return per_worker or self.run.trained.threads or self.system.get("threads")

    def workers_per_node(self) -> int:
        if self.run.kind != "scale" or self.point.get("strategy", "ddp") != "ddp":
            return 1
        p = self.point_summary
        workers: int = self.point.get("workers") or (p.workers if p else 1)
        return max(1, workers // ((p.nodes if p else None) or self.key("scale.nnodes") or 1))

    def scale_base(self) -> tuple[int, PointSummary] | None:
        """The finished point (its run id and summary) of the same study and series (mode and
        its batch, comm, strategy, bucket) with the fewest workers: what speedup and
        efficiency are measured against."""
        if self.run.study_id is None:
            return None
        mine = series(self.point)
        same = [
            (p.workers, r.id, p)
            for r in self.stored.study(self.run.study_id)
            if r.kind == "scale"
            and r.status == "finished"
            and (p := PointSummary.stored(r.summary))
            and p.workers
            and series(r.config.get("point") or {}) == mine
        ]
        if not same:
            return None
        _, run_id, base = min(same, key=lambda s: s[:2])
        return run_id, base


Handler = Callable[[RunView], list[Issue]]
