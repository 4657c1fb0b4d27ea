"""The bucket/overlap model of DDP's communication (dlperf.distributed.overlap) on constructed
timelines, and its bucketing against torch's own."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from dlperf.distributed.overlap import buckets, exposed_time

MIB = 2**20


def test_buckets_close_at_1_mib_then_at_the_cap_in_ready_order() -> None:
    sizes = [4 * MIB, MIB // 2, MIB // 2, 30 * MIB, 10 * MIB, 20 * MIB]
    order = [5, 4, 3, 2, 1, 0]
    assert buckets(sizes, order) == [[5], [4, 3], [2, 1, 0]]
    assert buckets(sizes, order, bucket_mb=10) == [[5], [4], [3], [2, 1, 0]]
    assert buckets(sizes, [1, 2, 0, 3, 4, 5]) == [[1, 2], [0, 3], [4, 5]]


def test_the_buckets_are_torchs() -> None:
    """torch.distributed's own assignment with the limits DDP's Reducer rebuilds with."""
    sizes = [4 * MIB, MIB // 2, MIB // 2, 30 * MIB, 10 * MIB, 20 * MIB, 3 * MIB]
    order = [6, 5, 4, 3, 2, 1, 0]
    tensors = [torch.empty(sizes[i] // 4) for i in order]  # float32: 4 bytes each
    theirs, _ = dist._compute_bucket_assignment_by_size(tensors, [MIB, 25 * MIB], [False] * 7)
    assert buckets(sizes, order) == [[order[j] for j in bucket] for bucket in theirs]


def test_communication_hidden_behind_the_backward_is_not_exposed() -> None:
    """Two 30 MiB buckets ready at 10 ms and 50 ms of a 50 ms backward, 15 ms each: the
    first is done by 25 ms, the second starts at 50 ms, so 15 ms are exposed."""
    sizes = [MIB, 30 * MIB, 30 * MIB]  # forward order; ready last to first
    ready = [0.050, 0.050, 0.010]
    fifteen_ms = lambda nbytes: 0.015 if nbytes >= 30 * MIB else 0.001  # noqa: E731
    # buckets in ready order: [2] (30 MiB, closes the 1 MiB first bucket), [1, 0] (31 MiB)
    assert exposed_time(ready, sizes, fifteen_ms) == pytest.approx(0.015)


def test_a_queue_of_all_reduces_delays_the_last() -> None:
    """Three buckets ready at 0, 1 and 2 ms, 10 ms each on one communication thread: they
    end at 10, 20 and 30 ms, 28 ms after the backward's 2 ms."""
    sizes = [26 * MIB, 26 * MIB, 26 * MIB]
    ready = [0.002, 0.001, 0.0]
    assert exposed_time(ready, sizes, lambda nbytes: 0.010) == pytest.approx(0.028)


def test_gradients_ready_only_at_the_end_expose_every_all_reduce() -> None:
    sizes = [2 * MIB, 2 * MIB]
    per_byte = lambda nbytes: nbytes / 1e9  # noqa: E731
    exposed = exposed_time([0.020, 0.020], sizes, per_byte, bucket_mb=1024)
    assert exposed == pytest.approx(4 * MIB / 1e9)


def test_an_explicit_cap_caps_the_first_bucket_too() -> None:
    """DDP's 1 MiB first bucket comes only with its default cap (torch 2.14)."""
    sizes = [3 * MIB, 3 * MIB, 3 * MIB]
    assert buckets(sizes, [2, 1, 0]) == [[2], [1, 0]]
    assert buckets(sizes, [2, 1, 0], bucket_mb=5) == [[2, 1], [0]]


@pytest.mark.parametrize("bucket_mb", [None, 3.0])
def test_the_buckets_are_those_ddp_rebuilds(tmp_path, bucket_mb: float | None) -> None:
    """A real DDP (one gloo process) after its rebuild, its parameters taken in the order
    their gradients were ready, as the scale workers record it."""
    from torch import nn

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        # weights of 1.5 MiB: the first bucket holds one at 1 MiB, two at 3 MiB
        model = nn.Sequential(
            nn.Linear(1024, 384), nn.Linear(384, 1024), nn.Linear(1024, 384), nn.Linear(384, 1024)
        )
        ready: list[int] = []
        params = list(model.parameters())
        for index, param in enumerate(params):
            param.register_post_accumulate_grad_hook(lambda _, i=index: ready.append(i))
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
        for _ in range(3):
            ready.clear()
            ddp(torch.randn(4, 1024)).sum().backward()
        logged = ddp._get_ddp_logging_data()["rebuilt_per_bucket_param_indices"]
        theirs = [[int(i) for i in bucket.split()] for bucket in logged.split(",")]
        sizes = [p.numel() * p.element_size() for p in params]
        assert buckets(sizes, ready, bucket_mb) == theirs
        assert len(theirs[0]) == (2 if bucket_mb is None else 4)
    finally:
        dist.destroy_process_group()


def test_overlapped_communication_costs_the_backward_its_measured_share() -> None:
    """Two 30 MiB buckets ready at 10 ms and 50 ms, 10 ms each, the backward losing 0.5 s
    per s of all-reduce in flight: the first runs 10-20 ms, the backward does 5 ms of its
    work then, so it ends (and the second bucket starts) at 55 ms and ends at 65 ms: 15 ms
    after the compute-only backward's 50 ms, where a free overlap leaves 10 ms."""
    sizes = [30 * MIB, 30 * MIB]
    ready = [0.050, 0.010]
    ten_ms = lambda nbytes: 0.010  # noqa: E731
    assert exposed_time(ready, sizes, ten_ms) == pytest.approx(0.010)
    assert exposed_time(ready, sizes, ten_ms, overlap_cost=0.5) == pytest.approx(0.015)
    # cost 1: the backward waits out the whole first all-reduce, so both are exposed
    assert exposed_time(ready, sizes, ten_ms, overlap_cost=1.0) == pytest.approx(0.020)


def test_a_cost_above_one_stretches_the_all_reduce_and_stops_the_backward() -> None:
    """Cost 2: the first bucket (ready at 10 ms) runs 20 ms beside a stopped backward, which
    then ends at 70 ms; the last bucket takes its own 10 ms after: 30 ms exposed."""
    sizes = [30 * MIB, 30 * MIB]
    ten_ms = lambda nbytes: 0.010  # noqa: E731
    assert exposed_time([0.050, 0.010], sizes, ten_ms, overlap_cost=2.0) == pytest.approx(0.030)


def test_a_bucket_in_flight_when_the_backward_ends_goes_on_alone() -> None:
    """A 20 ms bucket ready at 45 ms and a 10 ms one at 50 ms. Cost 0.5: the first runs
    45-65 ms; the backward does its last 5 ms of work at half speed, by 55 ms, and the first
    bucket goes on alone; the second runs 65-75 ms: 25 ms exposed, as with a free overlap.
    Cost 0.8: by 65 ms the backward has done only 4 of those 5 ms (0.2 x 20 ms), ends at
    66 ms, and the second bucket runs 66-76 ms: 26 ms exposed."""
    sizes = [30 * MIB, 60 * MIB]
    ready = [0.050, 0.045]
    per_30_mib = lambda nbytes: 0.010 * nbytes / (30 * MIB)  # noqa: E731
    assert exposed_time(ready, sizes, per_30_mib) == pytest.approx(0.025)
    assert exposed_time(ready, sizes, per_30_mib, overlap_cost=0.5) == pytest.approx(0.025)
    assert exposed_time(ready, sizes, per_30_mib, overlap_cost=0.8) == pytest.approx(0.026)
