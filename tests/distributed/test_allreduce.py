"""dlperf.distributed.allreduce: size parsing, the ring model and its fit, measured times
between measured sizes, the overlap cost, the benchmark under torchrun."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict

import numpy as np
import pytest

from dlperf.distributed.allreduce import (
    after_compute_times,
    fit_ring_model,
    interpolate_time,
    overlap_cost,
    overlap_sizes,
    parse_sizes,
    ring_time,
)
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.test_contention import needs_schedstat

KB, MB = 1024, 1024**2


def test_parse_sizes_range_doubles_inclusive() -> None:
    assert parse_sizes("1KB..16KB") == [1 * KB, 2 * KB, 4 * KB, 8 * KB, 16 * KB]
    assert parse_sizes("1KB..256MB")[-1] == 256 * MB
    assert len(parse_sizes("1KB..256MB")) == 19
    # Like nccl-tests' -f 2: double from the start, stop before passing the end (a size is
    # a whole number of float32 elements: 3B..20B is refused, tests/faults/..._55_allreduce).
    assert parse_sizes("4B..20B") == [4, 8, 16]
    assert parse_sizes("1gb..1GB") == [1024**3]


def test_parse_sizes_single_and_lists() -> None:
    assert parse_sizes("4MB") == [4 * MB]
    assert parse_sizes("1KB, 1MB,512") == [KB, MB, 512]
    assert parse_sizes("8B") == [8]


@pytest.mark.parametrize(
    "text", ["", "1TB", "1.5MB", "0KB", "4MB..1KB", "MB", "1KB..", "1KB,,2KB", "-1KB"]
)
def test_parse_sizes_bad_input_is_one_line(text: str) -> None:
    with pytest.raises(UserError) as err:
        parse_sizes(text)
    assert "\n" not in str(err.value)
    assert err.value.hint


def test_ring_time_by_hand() -> None:
    # n = 4: 2·3 = 6 latency steps, 2·3/4 = 1.5 message volumes over the link.
    assert ring_time(4, 8e6, 1e-5, 1e9) == pytest.approx(6e-5 + 1.5 * 8e-3)
    # n = 2: 2 steps and exactly one message volume.
    assert ring_time(2, 1e9, 0.001, 2e9) == pytest.approx(0.002 + 0.5)
    assert ring_time(1, 1e9, 0.001, 2e9) == 0.0


@pytest.mark.parametrize("workers", [[2], [4], [2, 4]])
def test_fit_recovers_alpha_and_bandwidth_from_noisy_rows(workers: list[int]) -> None:
    alpha, bandwidth = 25e-6, 3e9
    rng = np.random.default_rng(7)
    rows = [
        {
            "workers": n,
            "bytes": size,
            "time_s": ring_time(n, size, alpha, bandwidth) * (1 + rng.normal(0, 0.02)),
        }
        for n in workers
        for size in parse_sizes("1KB..256MB")
    ]
    model = fit_ring_model(rows)
    assert model.alpha_s == pytest.approx(alpha, rel=0.05)
    assert model.bandwidth_bytes_per_s == pytest.approx(bandwidth, rel=0.05)
    assert 0.5 < model.rmse_pct < 4.0  # 2% noise, not zero, not swamped
    assert model.n_points == len(rows)
    assert asdict(model) == {
        "alpha_s": model.alpha_s,
        "bandwidth_bytes_per_s": model.bandwidth_bytes_per_s,
        "rmse_pct": model.rmse_pct,
        "n_points": len(rows),
    }


def test_fit_is_exact_on_exact_rows_and_ignores_single_worker_rows() -> None:
    rows = [{"workers": 1, "bytes": MB, "time_s": 0.5}] + [
        {"workers": 2, "bytes": s, "time_s": ring_time(2, s, 1e-4, 1e8)} for s in (KB, MB)
    ]
    model = fit_ring_model(rows)
    assert model.alpha_s == pytest.approx(1e-4)
    assert model.bandwidth_bytes_per_s == pytest.approx(1e8)
    assert model.rmse_pct == pytest.approx(0.0, abs=1e-6)
    assert model.n_points == 2


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [{"workers": 2, "bytes": MB, "time_s": 0.01}] * 3,  # one distinct point, repeated
        [{"workers": 1, "bytes": s, "time_s": 0.01} for s in (KB, MB)],  # nothing to reduce
        [{"workers": 2, "bytes": s, "time_s": 0.01} for s in (KB, MB)],  # flat: no bandwidth
    ],
)
def test_fit_refuses_data_that_cannot_determine_the_model(rows: list[dict]) -> None:
    with pytest.raises(UserError):
        fit_ring_model(rows)


def test_measured_times_between_and_beyond_the_measured_sizes() -> None:
    """Linear between neighbours (not one α-β line: 8 KB here is slower than 64 KB, as gloo
    measured it on the 2-core VM), the smallest's time below, in proportion above."""
    rows = [
        {"bytes": 4 * KB, "time_s": 265e-6},
        {"bytes": 8 * KB, "time_s": 1.7e-3},
        {"bytes": 64 * KB, "time_s": 231e-6},
        {"bytes": MB, "time_s": 1.1e-3},
        {"bytes": 4 * MB, "time_s": 2.8e-3},
    ]
    assert interpolate_time(rows, 6 * KB) == pytest.approx((265e-6 + 1.7e-3) / 2)
    assert interpolate_time(rows, 2.5 * MB) == pytest.approx((1.1e-3 + 2.8e-3) / 2)
    assert interpolate_time(rows, KB) == pytest.approx(265e-6)
    assert interpolate_time(rows, 8 * MB) == pytest.approx(5.6e-3)
    assert interpolate_time(rows, MB) == pytest.approx(1.1e-3)
    # the median of the calls where the benchmark measured it
    rows[-1]["median_s"] = 2.0e-3
    assert interpolate_time(rows, 4 * MB) == pytest.approx(2.0e-3)
    # another measured time where asked for and present, else the median, else the mean
    rows[-1]["after_compute_last_s"] = 3.0e-3
    assert interpolate_time(rows, 4 * MB, "after_compute_last_s") == pytest.approx(3.0e-3)
    assert interpolate_time(rows, 2.5 * MB, "after_compute_last_s") == pytest.approx(2.05e-3)


def test_after_compute_times_take_the_slowest_and_the_last_rank_per_repetition() -> None:
    """Rank 0 arrives first in repetitions 1 and 3 and waits for rank 1; per repetition the
    slowest (waiting included) is 9, 6, 8 ms, the last rank in 5, 6, 4 ms: medians 8 and 5."""
    durations = [[9e-3, 6e-3, 8e-3], [5e-3, 7e-3, 4e-3]]
    slowest, last = after_compute_times(durations)
    assert slowest == pytest.approx(8e-3) and last == pytest.approx(5e-3)
    # per repetition, not per rank: each rank's median is 2 ms here, but in two of three
    # repetitions one rank waited 9 ms and the other, the last in, took 1-2 ms
    slowest, last = after_compute_times([[1e-3, 2e-3, 9e-3], [9e-3, 1e-3, 2e-3]])
    assert (slowest, last) == (pytest.approx(9e-3), pytest.approx(1e-3))
    with pytest.raises(ValueError):
        after_compute_times([[], []])


def test_overlap_cost_pools_the_sizes_by_their_all_reduce_time() -> None:
    """All the compute lost over all the all-reduce time: (1 + 6) ms / (2 + 12) ms; a
    negative loss (noise) counts as it was measured, a negative total as 0."""
    rows = [
        {"allreduce_s": 0.002, "compute_lost_s": 0.001},
        {"allreduce_s": 0.012, "compute_lost_s": 0.006},
    ]
    assert overlap_cost(rows) == pytest.approx(0.5)
    assert overlap_cost([{"allreduce_s": 0.002, "compute_lost_s": -0.001}]) == 0.0
    assert overlap_sizes(parse_sizes("4KB..64MB")) == [MB, 4 * MB, 16 * MB]
    assert overlap_sizes(parse_sizes("1KB..64KB")) == [64 * KB]


def assert_benchmark_record(result: dict, sizes: str, workers: int) -> None:
    """The record `python -m dlperf.distributed.allreduce` writes (`--out`) of `sizes` at
    `workers` gloo workers. Read from a real torchrun launch of two workers by
    tests/distributed/test_study.py's test_allreduce_bench_then_one_and_two_workers, whose
    `dlperf scale allreduce` starts that module under torchrun."""
    assert result["backend"] == "gloo"
    assert result["world_size"] == workers
    assert result["dtype"] == "float32"
    rows = result["rows"]
    assert [r["bytes"] for r in rows] == parse_sizes(sizes)
    for r in rows:
        assert r["time_s"] > 0 and r["median_s"] > 0
        # after a compute burst: the slowest rank waited at least as long as the last one
        assert r["after_compute_s"] >= r["after_compute_last_s"] > 0
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9, rel=1e-12)
        busbw = r["algbw_gbps"] * 2 * (workers - 1) / workers
        assert r["busbw_gbps"] == pytest.approx(busbw, rel=1e-12)
        # how long the slowest rank's threads waited for a CPU over the size's timed calls
        assert isinstance(r["cpu_wait_share"], float) and 0 <= r["cpu_wait_share"] <= 1
    # the cost of overlapping an all-reduce with compute, at the sizes DDP's buckets take
    assert [o["bytes"] for o in result["overlap"]] == overlap_sizes(parse_sizes(sizes))
    for overlap in result["overlap"]:
        assert overlap["allreduce_s"] > 0 and overlap["cost"] >= 0 and overlap["compute_s"] > 0
    # the most contended rank's window over the whole benchmark
    waited = result["contention"]
    assert 0 <= waited["cpu_wait_share"] <= 1 and waited["wall_s"] > 0
    assert waited["source"] in ("schedstat", "loadavg")


@needs_schedstat
def test_benchmark_on_a_busy_core_is_marked(
    busy_core: int, cli: Callable[..., CliResult], store: RunStore
) -> None:
    """`dlperf scale allreduce` with its worker on the core a busy process holds: the CPU
    wait and the mark in --json, per row, in the store and as an `unreliable` line. The
    command runs in this process's thread, pinned to that core while it runs (torchrun and
    the worker inherit it)."""
    bench = ["scale", "allreduce", "--workers", "1", "--sizes", "1KB,4KB", "--iters", "5"]
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {busy_core})
    try:
        done = cli(*bench, "--json")
    finally:
        os.sched_setaffinity(0, allowed)
    assert done.code == 0, done.err
    result = json.loads(done.out)
    assert result["cpu_wait_share"] > 0.25 and result["reliable"] is False, result
    assert result["reliability_note"].startswith("contended: its threads waited for a CPU")
    assert result["contention"]["source"] == "schedstat"
    assert all(0 <= r["cpu_wait_share"] <= 1 for r in result["rows"])
    said = " ".join(done.err.split())  # rich wraps a long line on stderr
    assert f"unreliable: 1 worker: {result['reliability_note']}" in said
    (run,) = store.list_runs(kind="allreduce")
    assert [r["cpu_wait_share"] for r in run.summary["rows"]] == [
        r["cpu_wait_share"] for r in result["rows"]
    ]
    assert len(store.metrics(run.id, "allreduce/cpu_wait_share")) == 2


def test_the_benchmark_study_prints_its_record_as_before() -> None:
    """`dlperf scale allreduce` prints an AllreduceStudy: --json is its to_dict, with the keys
    the command printed when it returned a dict; the table and lines are worked out here."""
    from dlperf.distributed.allreduce_study import AllreduceFailure, AllreduceStudy, lines, table

    ring = {"alpha_s": 2e-5, "bandwidth_bytes_per_s": 1.5e9, "rmse_pct": 3.25, "n_points": 4}
    row = {"workers": 2, "bytes": 4 * KB, "time_s": 5e-5, "algbw_gbps": 0.08, "busbw_gbps": 0.08}
    overlap = [{"workers": 2, "bytes": 16 * MB, "cost": 0.4}]
    failed = AllreduceFailure(4, "boom")
    result = AllreduceStudy(7, "gloo", [{**row, "cpu_wait_share": 0.125}, row], ring, None,
                            overlap, {2: 0.4}, [failed], 0.125, None, True, None)  # fmt: skip
    doc = json.loads(json.dumps(result.to_dict()))
    assert list(doc) == ["study_id", "backend", "rows", "ring_model", "fit_error", "overlap",
                         "overlap_cost", "failures", "cpu_wait_share", "contention", "reliable",
                         "reliability_note"]  # fmt: skip
    assert doc["failures"] == [{"workers": 4, "error": "boom"}]
    assert doc["overlap_cost"] == {"2": 0.4} and doc["ring_model"] == ring
    shown = table(result)
    assert shown.title == "all-reduce study 7 (gloo)"
    assert shown.rows[0] == [2, 4 * KB, pytest.approx(50.0), 0.08, 0.08, "12%"]
    assert shown.rows[1][-1] is None  # a row measured without its CPU wait
    assert lines(result) == [
        "ring model T = 2(n-1)a + 2(n-1)/n S/B: a = 20.0 us, B = 1.5 GB/s, "
        "rms error 3.2% over 4 points",
        "overlap cost at 2 workers: 0.40 s of compute lost per s of all-reduce in flight "
        "(measured at 16 MiB)",
    ]
    unfitted = AllreduceStudy(8, "gloo", [], None, "too few", [], {}, [], None, None, True, None)
    assert lines(unfitted) == []
