"""dlperf.distributed.summary: a point's figures from hand-made ranks, each against a hand
calculation (slowest rank per step, medians, exposed communication and its interval over
the chunks, bandwidths, cost), the median round, speedup and both efficiencies, and
Horovod's synthetic chunks."""

from __future__ import annotations

import dataclasses

import pytest

from dlperf.distributed.contracts import PointSummary, RankResult
from dlperf.distributed.planning import Point
from dlperf.distributed.summary import (
    CI_METHOD,
    add_relative,
    computes,
    exposed_ci95,
    main_steps,
    median_round,
    slowest_per_step,
    summarize,
    with_chunks,
)
from tests.conftest import rank_result

T_975_1, T_975_2 = 12.706204736174707, 4.302652729911275  # Student's t(0.975, n - 1)
POINT = Point(workers=2, per_worker_batch=4, global_batch=8, comm="allreduce",
              strategy="ddp", bucket_mb=None, mode="weak")  # fmt: skip
# Rank 0 and rank 1: the slowest per step is 0.2, 0.3, 0.4 (main) and 0.1, 0.1, 0.2 (compute).
RANKS = [
    rank_result(0, [0.1, 0.3, 0.2], [0.05, 0.1, 0.1], 4, world=2),
    rank_result(1, [0.2, 0.1, 0.4], [0.1, 0.05, 0.2], 4, world=2),
]


def _summary(point: Point = POINT, ranks: list[RankResult] = RANKS, **kw: object) -> PointSummary:
    args: dict[str, object] = {"nnodes": 1, "threads": 1, "backend": "gloo",
                               "train_images": 1400, "price_per_hour": None} | kw  # fmt: skip
    return summarize(point, ranks, **args)  # type: ignore[arg-type]


def test_a_step_ends_when_its_slowest_rank_does() -> None:
    assert slowest_per_step([[1.0, 5.0], [2.0, 3.0]]) == [2.0, 5.0]
    assert main_steps(RANKS) == pytest.approx([0.2, 0.3, 0.4])
    with pytest.raises(ValueError):  # ranks that timed different numbers of steps
        slowest_per_step([[1.0], [1.0, 2.0]])


def test_computes_needs_every_rank_to_have_timed_one() -> None:
    assert computes(RANKS) == [r.compute for r in RANKS]
    half = [RANKS[0], dataclasses.replace(RANKS[1], compute=None)]
    assert computes(half) is None


def test_summarize_against_a_hand_calculation() -> None:
    s = _summary(price_per_hour=3.6)
    assert (s.step_time_s, s.step_time_min_s, s.step_time_max_s) == pytest.approx((0.3, 0.2, 0.4))
    assert s.compute_s == pytest.approx(0.1)
    assert s.comm_exposed_s == s.sync_time_s == pytest.approx(0.2)
    # walls 0.6 and 0.7 s (the sums of the steps); 12 samples each: 24 / 0.7, never a mean
    assert s.wall_time_s == pytest.approx(0.7) and s.throughput == pytest.approx(24 / 0.7)
    assert s.throughput_per_worker == pytest.approx(12 / 0.7)
    # 400,000 gradient bytes in DDP's 1 ms of backward communication: 0.4 GB/s; busbw * 2(n-1)/n
    assert s.algbw_gbps == pytest.approx(0.4) and s.busbw_gbps == pytest.approx(0.4)
    assert s.epoch_time_s == pytest.approx(1400 / (24 / 0.7))  # 40.83 s
    assert s.cost_per_epoch == pytest.approx(2 * s.epoch_time_s / 3600 * 3.6)
    assert (s.speedup, s.efficiency, s.timed_steps, s.world_size) == (None, None, 3, 2)
    assert s.emulation == "single-host" and s.replica_max_diff == 0.0
    assert [r.step_time_s for r in s.ranks] == pytest.approx([0.2, 0.2])
    assert s.ddp_logging_s == pytest.approx({"backward_comm_time": 1e-3,
                                             "forward_compute_time": 5e-3})  # fmt: skip


def test_exposed_interval_is_students_t_over_the_chunks() -> None:
    # 3 steps: 3 chunks of 1; exposed per chunk 0.2-0.1, 0.3-0.1, 0.4-0.2 = 0.1, 0.2, 0.2
    sem = 0.05773502691896258 / 3**0.5
    assert exposed_ci95(RANKS) == pytest.approx(T_975_2 * sem)
    assert _summary().comm_exposed_ci95_s == pytest.approx(T_975_2 * sem)
    assert exposed_ci95([dataclasses.replace(r, compute=None) for r in RANKS]) is None


def test_exposed_time_is_never_negative() -> None:
    slow = [rank_result(0, [0.1, 0.1], [0.5, 0.5], 4, world=1)]
    point = dataclasses.replace(POINT, workers=1, global_batch=4)
    assert _summary(point, slow).comm_exposed_s == 0.0


def test_without_a_compute_split_noop_is_all_compute_and_others_unknown() -> None:
    bare = [dataclasses.replace(r, compute=None) for r in RANKS]
    noop = _summary(dataclasses.replace(POINT, comm="noop"), bare)
    assert noop.compute_s == pytest.approx(0.3) and noop.comm_exposed_s == 0.0
    unknown = _summary(POINT, bare)
    assert unknown.compute_s is None and unknown.comm_exposed_s is None
    assert unknown.comm_exposed_ci95_s is None
    assert unknown.algbw_gbps == pytest.approx(0.4)  # DDP's own communication time stands


def test_one_worker_has_no_bandwidth_and_several_nodes_no_emulation() -> None:
    one = [rank_result(0, [0.1, 0.2], [0.1, 0.1], 4, world=1)]
    s = _summary(dataclasses.replace(POINT, workers=1, global_batch=4), one, nnodes=1)
    assert s.algbw_gbps is None and s.busbw_gbps is None and s.cost_per_epoch is None
    assert _summary(nnodes=2).emulation is None


def test_without_ddp_logging_bandwidth_comes_from_the_exposed_time() -> None:
    ranks = [
        RankResult(r.rank, r.host, r.pid, 2, dataclasses.replace(r.main, ddp=None), r.compute)
        for r in RANKS
    ]
    s = _summary(POINT, ranks)
    assert s.ddp_logging_s == {}
    assert s.algbw_gbps == pytest.approx(400_000 / 0.2 / 1e9)  # 0.002 GB/s


def _with(throughput: float, workers: int = 1, step: float = 0.1, **kw: object) -> PointSummary:
    return dataclasses.replace(_summary(), throughput=throughput, workers=workers,
                               step_time_s=step, **kw)  # type: ignore[arg-type]  # fmt: skip


@pytest.mark.parametrize(("throughputs", "median"), [([3, 1, 2], 2), ([4, 1, 3, 2], 3), ([5], 0)])
def test_median_round_is_the_median_by_throughput_the_lower_of_two(
    throughputs: list[float], median: int
) -> None:
    assert median_round([_with(t) for t in throughputs]) == median


def test_the_base_is_its_own_speedup_of_1() -> None:
    s = add_relative(_with(50.0), None)
    assert (s.speedup, s.efficiency, s.efficiency_time) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize(("mode", "on_time"), [("strong", 0.125), ("weak", 0.5)])
def test_speedup_and_both_efficiencies(mode: str, on_time: float) -> None:
    base = _with(100.0, workers=1, step=0.1, mode=mode)
    s = add_relative(_with(300.0, workers=4, step=0.2, mode=mode), base)
    # speedup 300/100; efficiency 3 * 1/4; on time 0.1/0.2, times 1/4 when strong
    assert s.speedup == pytest.approx(3.0) and s.efficiency == pytest.approx(0.75)
    assert s.efficiency_time == pytest.approx(on_time)


def test_speedup_in_rounds_is_the_median_ratio_with_its_interval() -> None:
    base = _with(100.0, throughput_rounds=(100.0, 100.0, 120.0))
    s = add_relative(_with(330.0, workers=4, throughput_rounds=(300.0, 330.0, 360.0)), base)
    assert s.speedup_rounds == pytest.approx((3.0, 3.3, 3.0))
    assert s.speedup == pytest.approx(3.0)  # the median ratio, not 330 / 100
    sd = 0.17320508075688776  # stdev(3, 3.3, 3): sqrt((0.01 + 0.04 + 0.01) / 2)
    assert s.speedup_ci95 == pytest.approx(T_975_2 * sd / 3**0.5)


def test_with_chunks_is_the_mean_chunk_throughput_and_its_t_interval() -> None:
    s = with_chunks(_summary(), [0.1, 0.1, 0.2, 0.2], 2)
    # global batch 8: chunks of 2 steps at 16 / 0.2 = 80 and 16 / 0.4 = 40 samples/s
    assert s.throughput_mean == pytest.approx(60.0) and s.chunks == 2
    assert s.throughput_ci95 == pytest.approx(T_975_1 * 28.284271247461902 / 2**0.5)
    assert s.throughput_ci_method == CI_METHOD == "student_t"


def test_with_chunks_clamps_the_chunks_to_the_steps() -> None:
    assert with_chunks(_summary(), [0.1, 0.2], 10).chunks == 2
    one = with_chunks(_summary(), [0.1, 0.3], 0)
    assert one.chunks == 1 and one.throughput_ci95 is None
    assert one.throughput_mean == pytest.approx(8 * 2 / 0.4)
