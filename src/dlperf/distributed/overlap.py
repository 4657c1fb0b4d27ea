"""What DDP's communication leaves exposed: its buckets' all-reduces overlapped with the
backward pass that is still computing.

DDP (torch.nn.parallel.DistributedDataParallel) reduces its first step's gradients in one
bucket, then rebuilds the buckets in the order the gradients became ready. With the default
cap the first bucket closes once it holds 1 MiB and the others at 25 MiB; a cap given as
`bucket_cap_mb` applies to the first bucket too (torch 2.14's `_BucketCapacityConfig`: the
small first bucket is used only "when using defaults"; tested against DDP's own rebuilt
buckets). A bucket is all-reduced as soon as the last of its gradients is ready, one bucket
after another on the communication thread, while the backward pass goes on. The step waits
for the last one, so, with no cost for overlapping,

    ready_b = the latest ready time of bucket b's gradients (from the start of the backward)
    start_b = max(ready_b, end_{b-1}),  end_b = start_b + T(bytes_b)
    exposed = max(0, end_last - backward_end)

with T the all-reduce time the all-reduce benchmark measured. The ready times come from the
compute-only replica (DDP under the no-op hook, so no communication delays them), measured
per parameter by the scale workers.

Overlapped communication is not free when it takes the processor the backward runs on (gloo
on a CPU worker whose cores are all busy computing): the all-reduce benchmark measures that
cost, `overlap_cost` = seconds of compute lost per second of all-reduce in flight (0: the
communication runs beside the compute, as NCCL on its own CUDA stream should; 1: every
second of communication is a second the backward waits). The backward then advances at
rate 1 - overlap_cost while a bucket is in flight, so it ends later than on the
compute-only replica, and the later buckets become ready later too:

    exposed = end_last - backward_end (of the compute-only replica)

With overlap_cost 0 this is the timeline above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

FIRST_BUCKET_BYTES = 2**20  # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES
DEFAULT_BUCKET_MB = 25.0


def bucket_caps(bucket_mb: float | None = None) -> tuple[int, int]:
    """DDP's caps in bytes of its first bucket and of the others: with `bucket_mb` None (its
    default) 1 MiB and 25 MiB; a given `bucket_mb` caps every bucket, the first included."""
    cap = int((bucket_mb or DEFAULT_BUCKET_MB) * 2**20)  # DDP's int(bucket_cap_mb * MiB)
    return (FIRST_BUCKET_BYTES if bucket_mb is None else cap), cap


def buckets(
    sizes: Sequence[int], order: Sequence[int], bucket_mb: float | None = None
) -> list[list[int]]:
    """Parameter indices per bucket as DDP rebuilds them: the parameters taken in `order`
    (their gradients' ready order), a bucket closed once it holds at least its cap
    (bucket_caps)."""
    first, cap = bucket_caps(bucket_mb)
    out: list[list[int]] = []
    current: list[int] = []
    held = 0
    for index in order:
        current.append(index)
        held += sizes[index]
        if held >= (first if not out else cap):
            out.append(current)
            current, held = [], 0
    if current:
        out.append(current)
    return out


def exposed_time(
    ready_s: Sequence[float],
    sizes: Sequence[int],
    allreduce_s: Callable[[float], float],
    bucket_mb: float | None = None,
    overlap_cost: float = 0.0,
) -> float:
    """Exposed communication of one step: each parameter's gradient ready `ready_s[i]`
    seconds into the compute-only backward pass, `sizes[i]` bytes, a bucket of B bytes
    all-reduced in `allreduce_s(B)` seconds, the backward losing `overlap_cost` seconds per
    second of all-reduce in flight (see the module's docstring). A cost above 1 (the compute
    losing more than the all-reduce's own time: the all-reduce slowed by the contention too)
    stops the backward while the all-reduce runs `overlap_cost` times longer."""
    rate = max(0.0, 1.0 - overlap_cost)  # the backward's speed while a bucket is in flight
    stretch = max(1.0, overlap_cost)  # how much longer an all-reduce runs beside it
    order = sorted(range(len(sizes)), key=lambda i: ready_s[i])
    queue = [
        (max(ready_s[i] for i in bucket), allreduce_s(sum(sizes[i] for i in bucket)))
        for bucket in buckets(sizes, order, bucket_mb)
    ]
    backward_end = max(ready_s)
    now = work = 0.0  # wall time, and the compute-only backward's seconds done by then
    left = 0.0  # seconds (alone) still to run of the all-reduce in flight
    while queue or left > 0:
        if left <= 0:  # nothing in flight: the next bucket starts once it is ready
            ready, left = queue.pop(0)
            now, work = now + max(0.0, ready - work), max(work, ready)
        elif work < backward_end:  # in flight beside the backward: both slowed
            to_end = (backward_end - work) / rate if rate > 0 else math.inf
            step = min(left * stretch, to_end)
            now, work = now + step, min(backward_end, work + step * rate)
            left = 0.0 if step == left * stretch else left - step / stretch
        else:  # in flight after the backward: alone
            now, left = now + left, 0.0
    return max(0.0, now - backward_end)
