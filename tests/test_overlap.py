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
