"""A point's figures from its ranks' measurements (all times per step, seconds):

- step_time_s: median over the timed steps of the slowest rank's step time (min/max too);
- compute_s: the same point re-run in the same processes, on a second replica under DDP's
  no-op communication hook, in chunks of steps alternating with the point's own;
  comm_exposed_s = max(0, step_time_s - compute_s), also stored as sync_time_s;
- throughput = global samples / wall time after warm-up (slowest rank), never a mean of
  per-step rates; speedup = X_N / X_base, where the base is the point with the fewest
  workers of the same series, and two efficiencies (add_relative): on throughput,
  efficiency = speedup * N_base / N, and on time, efficiency_time = T_base / T_N (weak) or
  T_base * N_base / (N * T_N) (strong), T = step_time_s;
- algbw = grad_bytes / all-reduce time (DDP's own measured backward communication time,
  else the exposed communication), busbw = algbw * 2(n-1)/n (nccl-tests' convention); None
  where the point's communication does not send the gradients as they are (sent_bytes);
- epoch_time_s = training images / throughput; cost_per_epoch = workers * epoch hours * price
  per worker-hour (a price of 0 costs 0; None only without a price);
- world_size: the process group's size, as the ranks report it;
- scale.repeat R > 1: every point is launched R times, in rounds interleaved across the
  points; its figures are its median round's (median_round), and its speedup the median of
  the rounds' speedups against the base's same round, with a 95% interval (Student's t);
- cpu_wait_share: the most contended rank's share of runnable thread-time spent waiting for
  a CPU over the timed steps (dlperf.contention; one slowed rank slows every step);
- --synthetic: throughput_mean and throughput_ci95 over chunks of the timed steps, the
  interval by Student's t (throughput_ci_method; see with_chunks).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from dlperf.contention import Contention
from dlperf.distributed.contracts import ComputePhase, PointSummary, RankResult, RankSummary
from dlperf.distributed.planning import Point
from dlperf.distributed.window import chunk_sizes
from dlperf.timing import t_half_width

CI_METHOD = "student_t"  # how throughput_ci95 is made: see with_chunks
# Communication that does not put the gradients on the wire as they are: DDP's noop hook
# sends nothing; the fp16 and bf16 hooks (and Horovod's fp16 compression) send half-width
# copies, PowerSGD low-rank factors, neither of whose sizes a point measures.
NOT_AS_IS = ("noop", "fp16", "bf16", "powersgd")


def slowest_per_step(per_rank: Sequence[Sequence[float]]) -> list[float]:
    """Per step, the slowest rank's time: a synchronous step ends when the last rank does."""
    return [max(step) for step in zip(*per_rank, strict=True)]


def main_steps(ranks: Sequence[RankResult]) -> list[float]:
    """The slowest rank's time of each timed step of the point."""
    return slowest_per_step([r.main.step_times_s for r in ranks])


def computes(ranks: Sequence[RankResult]) -> list[ComputePhase] | None:
    """Every rank's compute-only phase; None unless each rank timed one."""
    phases = [r.compute for r in ranks]
    return [c for c in phases if c is not None] if all(phases) else None


def with_chunks(summary: PointSummary, step_times: list[float], chunks: int) -> PointSummary:
    """`summary` with Horovod's synthetic benchmark: throughput of consecutive chunks of
    steps, their mean, and the half-width of the mean's 95% confidence interval,
    t(0.975, n-1) * s / sqrt(n) over n chunks: Student's t, since s is estimated from a
    handful of chunks (1.96 s would be the spread of single chunks, with a known sigma). One
    chunk has no interval (None)."""
    chunks = max(1, min(chunks, len(step_times)))
    size = len(step_times) // chunks
    rates = [
        summary.global_batch * size / sum(step_times[i * size : (i + 1) * size])
        for i in range(chunks)
    ]
    mean, ci = statistics.fmean(rates), t_half_width(rates)
    return dataclasses.replace(
        summary,
        throughput_mean=mean,
        throughput_ci95=ci,
        throughput_ci_method=CI_METHOD,
        chunks=chunks,
    )


def exposed_ci95(ranks: Sequence[RankResult]) -> float | None:
    """How finely comm_exposed_s is measured: the half-width of the 95% interval (Student's
    t) of the exposed time over the chunks in which the worker alternated the point's steps
    with its compute-only replica's, each chunk's exposed time the difference of the two
    medians of the slowest rank's step times. None without the compute split or with fewer
    than two chunks."""
    phases = computes(ranks)
    if phases is None:
        return None
    main, compute = main_steps(ranks), slowest_per_step([c.step_times_s for c in phases])
    diffs, start = [], 0
    for size in chunk_sizes(len(main)):  # the workers' chunks
        span = slice(start, start + size)
        diffs.append(statistics.median(main[span]) - statistics.median(compute[span]))
        start += size
    return t_half_width(diffs)


def sent_bytes(comm: str, grad_bytes: int) -> int | None:
    """The bytes a point's communication all-reduces per step: its gradients, or None where
    it sends other bytes or none (NOT_AS_IS). The gradient bytes over a no-op hook's call
    time were once reported as a bandwidth 42x the real all-reduce's."""
    return None if comm in NOT_AS_IS else grad_bytes


def summarize(
    point: Point,
    ranks: Sequence[RankResult],
    nnodes: int,
    threads: int,
    backend: str,
    train_images: int,
    price_per_hour: float | None,
) -> PointSummary:
    """A point's summary from every rank's measurements (speedup and efficiency, the
    predictions and the --synthetic figures are added later)."""
    steps = main_steps(ranks)
    step_time = statistics.median(steps)
    phases = computes(ranks)
    if phases is not None:
        compute: float | None = statistics.median(
            slowest_per_step([c.step_times_s for c in phases])
        )
    elif point.comm == "noop":
        compute = step_time
    else:
        compute = None
    exposed = max(0.0, step_time - compute) if compute is not None else None
    wall = max(r.main.wall_s for r in ranks)
    throughput = sum(r.main.samples for r in ranks) / wall
    grad_bytes = ranks[0].main.grad_bytes
    logged = [r.main.ddp.times_ns if r.main.ddp else {} for r in ranks]
    ddp = {key: statistics.fmean(times[key] for times in logged) / 1e9 for key in logged[0]}
    comm_time = ddp.get("avg_backward_comm_time") or exposed
    n = point.workers
    sent = sent_bytes(point.comm, grad_bytes)
    algbw = sent / comm_time / 1e9 if n > 1 and comm_time and sent is not None else None
    waits = [Contention.stored(r.main.contention) for r in ranks if r.main.contention]
    contended = [w for w in waits if w.contended]
    worst = Contention.worst(contended or waits)
    epoch_time = train_images / throughput
    return PointSummary(
        workers=n,
        nodes=nnodes,
        ps=0,
        mode=point.mode,
        per_worker_batch=point.per_worker_batch,
        global_batch=point.global_batch,
        step_time_s=step_time,
        step_time_min_s=min(steps),
        step_time_max_s=max(steps),
        compute_s=compute,
        comm_exposed_s=exposed,
        sync_time_s=exposed,
        comm_exposed_ci95_s=exposed_ci95(ranks) if exposed is not None else None,
        throughput=throughput,
        throughput_per_worker=throughput / n,
        speedup=None,
        efficiency=None,
        cpu_wait_share=worst.cpu_wait_share if worst else None,
        cpu_contended=bool(contended) if waits else None,
        grad_bytes=grad_bytes,
        algbw_gbps=algbw,
        busbw_gbps=algbw * 2 * (n - 1) / n if algbw is not None else None,
        epoch_time_s=epoch_time,
        # `is not None`: a price of 0 (free hardware, a baseline) costs 0, not nothing.
        cost_per_epoch=None if price_per_hour is None else n * epoch_time / 3600 * price_per_hour,
        threads_per_worker=threads,
        backend=backend,
        comm=point.comm,
        strategy=point.strategy,
        bucket_mb=point.bucket_mb,
        timed_steps=len(steps),
        wall_time_s=wall,
        ddp_logging_s={k.removeprefix("avg_"): v for k, v in ddp.items()},
        replica_max_diff=max(r.main.replica_max_diff for r in ranks),
        emulation="single-host" if nnodes == 1 else None,
        world_size=ranks[0].world_size,
        ranks=tuple(
            RankSummary(
                rank=r.rank,
                host=r.host,
                wall_s=r.main.wall_s,
                step_time_s=statistics.median(r.main.step_times_s),
                ddp_logging_ns=times,
            )
            for r, times in zip(ranks, logged, strict=True)
        ),
    )


def median_round(rounds: Sequence[PointSummary]) -> int:
    """Which of a point's rounds (scale.repeat) stands for it: the median by throughput (the
    lower middle of an even number), whose step times, split and predictions go together."""
    ranked = sorted(range(len(rounds)), key=lambda i: rounds[i].throughput)
    return ranked[(len(ranked) - 1) // 2]


def add_relative(summary: PointSummary, base: PointSummary | None) -> PointSummary:
    """`summary` with its speedup and both efficiencies against the series' base point (its
    fewest workers; None: `summary` is the base): on throughput and on time (see
    dlperf.distributed.scaling.EFFICIENCY). Measured in rounds, the speedup is the median of
    each round's against the base's same round, with its 95% interval."""
    if base is None:
        return dataclasses.replace(summary, speedup=1.0, efficiency=1.0, efficiency_time=1.0)
    speedup = summary.throughput / base.throughput
    mine, theirs = summary.throughput_rounds, base.throughput_rounds
    if mine and theirs and len(mine) == len(theirs) and len(mine) > 1:
        ratios = tuple(x / b for x, b in zip(mine, theirs, strict=True))
        speedup = statistics.median(ratios)
        summary = dataclasses.replace(
            summary, speedup_rounds=ratios, speedup_ci95=t_half_width(ratios)
        )
    share = base.workers / summary.workers
    on_time = base.step_time_s / summary.step_time_s
    if summary.mode != "weak":  # weak: each worker's work is fixed, so ideal is T_N = T_base
        on_time *= share
    return dataclasses.replace(
        summary, speedup=speedup, efficiency=speedup * share, efficiency_time=on_time
    )
