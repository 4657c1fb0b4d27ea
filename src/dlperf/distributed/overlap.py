"""What DDP's communication leaves exposed: its buckets' all-reduces overlapped with the
backward pass that is still computing.

DDP (torch.nn.parallel.DistributedDataParallel) reduces its first step's gradients in one
bucket, then rebuilds the buckets in the order the gradients became ready: the first closes
once it holds 1 MiB, the others at `bucket_cap_mb` (25 MiB by default; the C++ Reducer's
rebuild). A bucket is all-reduced as soon as the last of its gradients is ready, one bucket
after another on the communication thread, while the backward pass goes on. The step waits
for the last one, so

    ready_b = the latest ready time of bucket b's gradients (from the start of the backward)
    start_b = max(ready_b, end_{b-1}),  end_b = start_b + T(bytes_b)
    exposed = max(0, end_last - backward_end)

with T the α-β ring all-reduce time fitted by the all-reduce benchmark. The ready times come
from the compute-only replica (DDP under the no-op hook, so no communication delays them),
measured per parameter by the scale workers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

FIRST_BUCKET_BYTES = 2**20  # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES
DEFAULT_BUCKET_MB = 25.0


def buckets(
    sizes: Sequence[int], order: Sequence[int], bucket_mb: float | None = None
) -> list[list[int]]:
    """Parameter indices per bucket, the parameters taken in `order` (their gradients' ready
    order), a bucket closed once it holds at least its cap (1 MiB for the first,
    `bucket_mb` MiB after)."""
    cap = (bucket_mb or DEFAULT_BUCKET_MB) * 2**20
    out: list[list[int]] = []
    current: list[int] = []
    held = 0
    for index in order:
        current.append(index)
        held += sizes[index]
        if held >= (FIRST_BUCKET_BYTES if not out else cap):
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
) -> float:
    """Exposed communication of one step: each parameter's gradient ready `ready_s[i]`
    seconds into the backward pass, `sizes[i]` bytes, a bucket of B bytes all-reduced in
    `allreduce_s(B)` seconds."""
    order = sorted(range(len(sizes)), key=lambda i: ready_s[i])
    end = 0.0
    for bucket in buckets(sizes, order, bucket_mb):
        ready = max(ready_s[i] for i in bucket)
        end = max(ready, end) + allreduce_s(sum(sizes[i] for i in bucket))
    return max(0.0, end - max(ready_s))
