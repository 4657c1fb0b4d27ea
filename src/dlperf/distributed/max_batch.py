"""scale max-batch: the largest per-worker batch that fits, by running the study's one
point at growing batches, and what stopped the search: memory (CUDA's, or the cap on CPU),
the data set (the next batch is more than a worker's share of the training images), a
memory limit (`ulimit -v`) that ran out before the batch trained, a failure for another
reason, or the last size it tries."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dlperf import stopping
from dlperf.config import ScaleJob
from dlperf.distributed.planning import Point, check_names, plan
from dlperf.distributed.study import Study, StudyResult
from dlperf.engine.step import steps_per_epoch
from dlperf.errors import UserError
from dlperf.progress import NullReporter, Reporter
from dlperf.store import RunStore

BATCH_START, BATCH_GROWTH, BATCH_SIZES = 32, 4, 8  # scale max-batch: 32 .. 32 * 4^7
# Why the search stopped -> how its last line says it.
STOPS = {
    "out_of_memory": "stopped by memory",
    "memory_cap": "stopped by the memory cap (--memory-cap-gb)",
    "data_set": "stopped by the data set, not memory",
    "memory_limit": "stopped by a memory limit, not by the batch",
    "failed": "stopped by a failure, not memory (a larger batch may still fit)",
    "last_size": "stopped after the last size it tries, not by memory",
}


@dataclass
class MaxBatchResult:
    """The search's study, and why it stopped: a key of STOPS, the per-worker batch that
    stopped it, and what happened to that batch."""

    study: StudyResult
    reason: str
    per_worker_batch: int
    detail: str

    def stopped(self) -> dict[str, Any]:
        """The stop as `dlperf scale max-batch --json` prints it (`stopped`)."""
        return {"reason": self.reason, "per_worker_batch": self.per_worker_batch,
                "detail": self.detail}  # fmt: skip

    def answer(self) -> str:
        """The command's last line: the largest batch that fits, and why no larger one."""
        largest = self.study.max_per_worker_batch
        found = "none found" if largest is None else largest  # the first size did not fit
        return f"largest per-worker batch that fits: {found}; {STOPS[self.reason]}: {self.detail}"


def find_max_batch(
    job: ScaleJob, store: RunStore, out_dir: Path, reporter: Reporter | None = None
) -> MaxBatchResult:
    """Grow the per-worker batch x4 from 32 until it no longer fits (CUDA out of memory, or
    a worker's peak resident memory above `scale.memory_cap_gb` on CPU, or the data runs
    out); each size trains two epochs and times the second."""
    search = {
        "mode": "weak",
        "global_batch": None,
        "per_worker_batch": BATCH_START,
        "comm_split": False,
        "steps": 1,  # each size sets its own: two epochs
        "epochs": None,
    }
    job = ScaleJob(experiment=job.experiment, scale=job.scale.model_copy(update=search))
    # Its points differ in batch, not in workers: no speedup or efficiency between them.
    study = Study(job, store, out_dir, reporter or NullReporter(), compare=False)
    opts = study.opts
    if len(set(opts.workers)) != 1:
        raise UserError("scale max-batch takes one worker count", "e.g. --workers 2")
    if opts.framework != "torch":
        raise UserError("scale max-batch measures the torch path", "leave out --framework")
    if study.backend == "gloo" and opts.memory_cap_gb is None:
        raise UserError("scale max-batch on CPU needs --memory-cap-gb", "e.g. --memory-cap-gb 4")
    first = plan(opts, study.backend, study.exp.model.name)[0]
    check_names(study.exp, [replace(first, mode=None)])  # as the sizes are: no series, no batch
    study.open()
    cap = int(opts.memory_cap_gb * 2**30) if opts.memory_cap_gb else None
    sizes = [BATCH_START * BATCH_GROWTH**i for i in range(BATCH_SIZES)]
    largest: int | None = None
    with study:  # a stop marks the point being measured killed
        for index, batch in enumerate(sizes):
            point = Point(
                first.workers,
                batch,
                batch * first.workers,
                first.comm,
                first.strategy,
                first.bucket_mb,
            )
            if (error := study.shard_error(point)) is not None:
                study.warnings.append(
                    f"per-worker batch {batch} exceeds the data set: stopped there"
                )
                reason, detail = "data_set", error.message
                break
            steps = steps_per_epoch(study.train_images, point.global_batch)
            # The first epoch warms up, the second is timed.
            extra = {"memory_cap_bytes": cap, "warmup_steps": steps}
            row = study.run_point(index, index + 1, point, steps, extra)
            if row.status != "finished":
                detail = (row.error or "").strip().split("\n")[0] or "failed"
                if row.out_of_memory:
                    # The worker's words for a peak over the cap (dlperf.distributed.worker).
                    over_cap = cap is not None and "above the cap" in detail
                    reason = "memory_cap" if over_cap else "out_of_memory"
                elif f"before per-worker batch {batch} trained" in detail:
                    # The worker's words for a memory limit (ulimit -v) that ran out before
                    # the batch trained (dlperf.distributed.worker.memory_failure): no size
                    # is concluded from it, and the command exits 1.
                    reason = "memory_limit"
                    study.warnings.append(
                        f"a memory limit stopped per-worker batch {batch} before it trained: "
                        "the search stopped there, and a larger batch may still fit"
                    )
                else:
                    reason = "failed"
                    study.warnings.append(
                        f"per-worker batch {batch} failed, not for memory: the search stopped "
                        "there, and a larger batch may still fit"
                    )
                break
            largest = batch
        else:
            reason, detail = "last_size", f"every size from {sizes[0]} to {sizes[-1]} fitted"
    result = replace(study.result(), max_per_worker_batch=largest)
    stopping.settle()  # every size is stored: one stop now does not unsay it (run_study's)
    return MaxBatchResult(result, reason, batch, detail)
