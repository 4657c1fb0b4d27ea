"""scale max-batch: the largest per-worker batch that fits, by running the study's one
point at growing batches."""

from __future__ import annotations

from pathlib import Path

from dlperf.config import ScaleJob
from dlperf.distributed.planning import Point, plan
from dlperf.distributed.study import Study, StudyResult
from dlperf.errors import UserError
from dlperf.progress import NullReporter, Reporter
from dlperf.store import RunStore

BATCH_START, BATCH_GROWTH, BATCH_SIZES = 32, 4, 8  # scale max-batch: 32 .. 32 * 4^7


def find_max_batch(
    job: ScaleJob, store: RunStore, out_dir: Path, reporter: Reporter | None = None
) -> StudyResult:
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
    study.open()
    cap = int(opts.memory_cap_gb * 2**30) if opts.memory_cap_gb else None
    batch, largest = BATCH_START, None
    for index in range(BATCH_SIZES):
        point = Point(
            first.workers, batch, batch * first.workers, first.comm, first.strategy, first.bucket_mb
        )
        if study.shard_error(point) is not None:
            study.warnings.append(f"per-worker batch {batch} exceeds the data set: stopped there")
            break
        steps = max(1, study.train_images // point.global_batch)
        # The first epoch warms up, the second is timed.
        extra = {"memory_cap_bytes": cap, "warmup_steps": steps}
        row = study.run_point(index, index + 1, point, steps, extra)
        if row.status != "finished":
            if not row.out_of_memory:
                study.warnings.append(
                    f"per-worker batch {batch} failed, not for memory: the search stopped "
                    "there, and a larger batch may still fit"
                )
            break
        largest, batch = batch, batch * BATCH_GROWTH
    result = study.result()
    result.max_per_worker_batch = largest
    return result
