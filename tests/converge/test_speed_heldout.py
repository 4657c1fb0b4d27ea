"""Speed models on placements they were not fitted to (issue 40, item 4).

Pollux's own measurements (OSDI'21 artifact): step and sync times of ResNet-18 on CIFAR-10
and ResNet-50 on ImageNet for every placement of 1-16 T4 GPUs on 1-4 nodes. Fitted to the
placements of at most 4 GPUs, Pollux's sync term α + β·(K − 2) grows linearly in the workers,
while the measured sync time levels off beyond 4 GPUs, as a ring all-reduce's
2(K − 1)/K · bytes/bandwidth does: 30% off at 8 GPUs and 103% at 16 on CIFAR-10.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlperf.converge import speed
from dlperf.errors import UserError

TRACES = {
    "cifar10": Path(__file__).parents[2] / "examples" / "pollux" / "cifar10_placements.csv",
    "imagenet": Path(__file__).parents[1] / "fixtures" / "pollux" / "imagenet_placements.csv",
}


def rows(data: speed.SpeedData, keep: np.ndarray) -> speed.SpeedData:
    assert data.nodes is not None and data.sync_time is not None
    return speed.SpeedData(data.workers[keep], data.global_batch[keep], data.step_time[keep],
                           nodes=data.nodes[keep], sync_time=data.sync_time[keep])  # fmt: skip


def heldout_errors(data: speed.SpeedData, model: str, gpus: tuple[int, ...]) -> dict[int, float]:
    """Mean |predicted / measured − 1| in % of the rows of each GPU count in `gpus`, from
    `model` fitted to the rows of at most 4 GPUs."""
    fit = speed.fit(rows(data, data.workers <= 4), model)
    errors = {}
    for n in gpus:
        held = rows(data, data.workers == n)
        predicted = speed.step_time(fit, held.workers, held.global_batch, nodes=held.nodes)
        errors[n] = float(np.mean(np.abs(predicted / held.step_time - 1)) * 100)
    return errors


@pytest.mark.parametrize("trace", ["cifar10", "imagenet"])
def test_ring_from_up_to_4_gpus_predicts_8_and_16_gpus_within_20pct(trace: str) -> None:
    """The goal of the item, on both traces. Measured with the ring (2026-11-25): CIFAR-10
    11% at 8 GPUs (154 rows), 15% at 16 (10 rows); ImageNet 7% (112), 5% (8). Pollux's
    linear form, for contrast: 30% and 103%; 10% and 25%."""
    data = speed.load_csv(TRACES[trace])
    errors = heldout_errors(data, "ring", (8, 16))
    assert errors[8] <= 20 and errors[16] <= 20, errors


def ring_placements(
    bw: tuple[float, float], hop: tuple[float, float], gamma: float, upto: int
) -> speed.SpeedData:
    """Step and sync times of 1..`upto` GPUs on one node and on 2 nodes, at 3 batches per
    worker, timed by a ring all-reduce of bandwidth time `bw` and per-hop latency `hop`
    (within a node, across nodes) overlapping compute by `gamma`; sync = step − compute."""
    placed = [
        (workers, nodes, local)
        for workers in range(1, upto + 1)
        for nodes in ((1, 2) if workers > 1 else (1,))
        for local in (32.0, 64.0, 128.0)
    ]
    workers_, nodes_, local_ = np.array(placed, float).T
    across = nodes_ > 1
    ring = np.where(
        workers_ > 1,
        np.where(across, bw[1], bw[0]) * 2 * (workers_ - 1) / workers_
        + np.where(across, hop[1], hop[0]) * 2 * (workers_ - 1),
        0.0,
    )
    compute = 0.01 + 5e-4 * local_
    step = (compute**gamma + ring**gamma) ** (1 / gamma)
    return speed.SpeedData(workers_, local_ * workers_, step, nodes=nodes_,
                           sync_time=step - compute)  # fmt: skip


@settings(max_examples=12, deadline=None)
@given(
    bw_intra=st.floats(0.005, 0.05),
    bw_inter=st.floats(0.05, 0.3),
    hop_intra=st.floats(0.0, 5e-4),
    hop_inter=st.floats(0.0, 2e-3),
    gamma=st.floats(1.0, 4.0),
)
def test_ring_fitted_to_4_gpus_extrapolates_a_generated_ring(
    bw_intra: float, bw_inter: float, hop_intra: float, hop_inter: float, gamma: float
) -> None:
    """Over generated placements timed by a ring all-reduce, a fit to 1..4 GPUs predicts 16
    GPUs within 2%: the bandwidth and latency terms are told apart by 2, 3 and 4 GPUs."""
    truth = ring_placements((bw_intra, bw_inter), (hop_intra, hop_inter), gamma, 16)
    fit = speed.fit(rows(truth, truth.workers <= 4), "ring")
    held = rows(truth, truth.workers == 16)
    predicted = speed.step_time(fit, held.workers, held.global_batch, nodes=held.nodes)
    assert np.abs(predicted / held.step_time - 1).max() < 0.02


def test_ring_measured_at_one_worker_count_refuses_to_extrapolate() -> None:
    """Runs of 2 GPUs on one node tell the sync time there, not how it splits between
    bandwidth and per-hop latency: a prediction at 8 on one node would assume the split, so it
    is refused, naming the assumption and the runs that decide it."""
    truth = ring_placements((0.02, 0.1), (2e-4, 1e-3), 2.0, 4)
    keep = (truth.nodes > 1) | (truth.workers <= 2)
    fit = speed.fit(rows(truth, keep), "ring")
    assert set(fit.undetermined) == {"bw_intra", "hop_intra"}
    assert "all at 2 workers" in fit.undetermined["bw_intra"]
    with pytest.raises(UserError) as refused:
        speed.predict_at(fit, "workers=8,nodes=1", rows(truth, keep))
    assert str(refused.value) == (
        "--predict workers=8,nodes=1: rests on bw_intra, not identifiable from these points: "
        "needs runs at 2 or more worker counts on one node (all at 2 workers: the sync time "
        "there is known, not how it splits between bandwidth and per-hop latency) (measure such "
        "runs, or fix it with --fix bw_intra=VALUE, e.g. the paper's)"
    )
    # At the very worker count measured the sum is known, and the prediction is answered.
    p = speed.predict_at(fit, "workers=2,nodes=1,batch=128", rows(truth, keep))
    at = (truth.workers == 2) & (truth.nodes == 1) & (truth.global_batch == 128)
    expected = truth.step_time[at][0]
    assert p["step_time_s"] == pytest.approx(expected, rel=0.02)
    across = speed.predict_at(fit, "workers=16,nodes=4,batch=512", rows(truth, keep))
    assert across["outside"][0].startswith("workers 16 is outside the measured 1–4")
    assert "ring all-reduce" in across["outside"][0]


def test_a_hop_latency_fitted_at_zero_is_bounded_above_not_refused() -> None:
    """Placements with no per-hop latency across nodes put hop_inter on its bound 0, where
    log θ (the intervals' scale) does not exist: its interval was infinite and a prediction
    beyond 4 GPUs refused ("rests on hop_inter ... these barely do", on Pollux's ImageNet
    placements too). At the bound the interval is one-sided, on θ, and the answer stands."""
    truth = ring_placements((0.02, 0.1), (2e-3, 0.0), 2.0, 4)
    rng = np.random.default_rng(0)
    noisy = rows(truth, truth.workers > 0)
    noisy.step_time = noisy.step_time * (1 + 0.01 * rng.standard_normal(len(noisy)))
    fit = speed.fit(noisy, "ring")
    assert not fit.undetermined
    low, high = fit.intervals["hop_inter"] or (np.nan, np.nan)
    assert low == fit.params["hop_inter"] < 1e-6 < high < 1e-2
    p = speed.predict_at(fit, "workers=16,nodes=4,batch=512", noisy)
    expected = ring_placements((0.02, 0.1), (2e-3, 0.0), 2.0, 16)
    at = (expected.workers == 16) & (expected.nodes == 2) & (expected.global_batch == 512)
    assert p["step_time_s"] == pytest.approx(expected.step_time[at][0], rel=0.05)


@pytest.mark.parametrize("trace", ["cifar10", "imagenet"])
def test_ring_answers_16_gpus_on_4_nodes_from_up_to_4(trace: str) -> None:
    """`converge speed fit --model ring --predict workers=16,nodes=4` from the placements of at
    most 4 GPUs: answered (with the warning that 16 is outside the measured 1-4), not refused."""
    data = speed.load_csv(TRACES[trace])
    small = rows(data, data.workers <= 4)
    p = speed.predict_at(speed.fit(small, "ring"), "workers=16,nodes=4", small)
    assert p["outside"][0].startswith("workers 16 is outside the measured 1–4 (4× the largest)")
