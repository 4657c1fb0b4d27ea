"""dlperf.converge.speed: Optimus NNLS speed models and the Pollux iteration-time model."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlperf.converge import speed
from dlperf.errors import UserError

POLLUX = Path(__file__).parents[1] / "fixtures" / "pollux"
EXAMPLES = Path(__file__).parents[2] / "examples" / "pollux"


def grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w, p, m = np.meshgrid([1, 2, 4, 8, 16], [1, 2, 4], [128, 512], indexing="ij")
    return w.ravel().astype(float), p.ravel().astype(float), m.ravel().astype(float)


def test_optimus_sync_recovers_theta_by_nnls() -> None:
    w, p, m = grid()
    theta = np.array([2e-3, 0.05, 0.02, 0.004, 0.0])  # θ4 = 0: NNLS must not go negative
    t = theta[0] * m / w + theta[1] + theta[2] * w / p + theta[3] * w + theta[4] * p
    rng = np.random.default_rng(0)
    data = speed.SpeedData(w, m, t * (1 + rng.normal(0, 0.01, t.size)), ps=p)
    fit = speed.fit(data, "optimus-sync")
    got = np.array(list(fit.params.values()))
    assert np.all(got >= 0)
    assert got[:4] == pytest.approx(theta[:4], rel=0.1)
    assert got[4] < 1e-3
    assert fit.error_pct < 2.0
    # f(p, w) in steps per second is the inverse of the step time.
    assert speed.steps_per_second(fit, 8, 512, 2)[0] == pytest.approx(
        1 / (got @ [512 / 8, 1, 8 / 2, 8, 2])
    )


def test_optimus_async_exact_data_is_fitted_exactly() -> None:
    w, p, m = grid()
    theta = np.array([0.3, 0.01, 0.002, 0.005])
    t = theta[0] + theta[1] * w / p + theta[2] * w + theta[3] * p
    fit = speed.fit(speed.SpeedData(w, m, t, ps=p), "optimus-async")
    assert list(fit.params.values()) == pytest.approx(theta)
    assert fit.error_pct == pytest.approx(0.0, abs=1e-9)
    # Asynchronous: every worker steps on its own, so f = w / step time.
    assert speed.steps_per_second(fit, 4, 128, 2)[0] == pytest.approx(
        4 / (0.3 + 0.01 * 2 + 0.002 * 4 + 0.005 * 2)
    )


def test_pollux_recovers_constants_and_gamma() -> None:
    theta = np.array([0.02, 5e-4, 0.03, 0.004, 0.12, 0.002, 2.0])
    rows = [(1, k) for k in (1, 2, 3, 4)] + [(n, 4 * n) for n in (2, 4, 8)]
    n = np.array([r[0] for r in rows for _ in range(3)], float)
    w = np.array([r[1] for r in rows for _ in range(3)], float)
    local = np.tile([32.0, 64.0, 128.0], len(rows))
    t_grad, t_iter = speed._pollux_time(theta, n, w, local)
    data = speed.SpeedData(w, local * w, t_iter, nodes=n, sync_time=t_iter - t_grad)
    fit = speed.fit(data, "pollux")
    assert fit.converged and not fit.notes
    assert fit.error_pct < 0.5
    assert fit.params["gamma"] == pytest.approx(2.0, rel=0.05)
    assert fit.params["alpha_inter"] == pytest.approx(0.12, rel=0.05)
    assert speed.step_time(fit, 64, 64 * 64, nodes=16)[0] == pytest.approx(
        speed._pollux_time(theta, np.array([16.0]), np.array([64.0]), np.array([64.0]))[1][0],
        rel=0.05,
    )


def test_pollux_on_one_node_with_no_sync_exposed() -> None:
    """Communication hidden behind compute (sync 0) on one node: the fit starts inside its
    bounds and needs only the 5 coefficients one node determines."""
    w = np.repeat([1.0, 2.0, 4.0], 2)
    local = np.tile([16.0, 32.0], 3)
    step = 0.01 + 2e-3 * local
    data = speed.SpeedData(w, local * w, step, nodes=np.ones(6), sync_time=np.zeros(6))
    fit = speed.fit(data, "pollux")
    assert fit.error_pct < 1.0
    assert fit.params["beta_g"] == pytest.approx(2e-3, rel=0.01)
    assert fit.notes == ["alpha_inter, beta_inter copied from the other link: no inter-node runs"]
    # With no sync exposed, the step times say nothing of the sync constants or the overlap.
    assert set(fit.undetermined) == {"alpha_inter", "beta_inter", "alpha_intra", "beta_intra",
                                     "gamma"}  # fmt: skip
    assert fit.undetermined["gamma"] == (
        "not identifiable from these points: needs runs in which it moves the step time "
        "(these barely do)"
    )
    # Inside the measured range the prediction stands (the sync did not show there either);
    # beyond it, it would rest on them.
    assert speed.predict_at(fit, "workers=4,batch=128", data)["outside"] == []
    with pytest.raises(UserError, match="rests on alpha_intra"):
        speed.predict_at(fit, "workers=8,batch=256", data)
    # 1 and 2 workers determine α_g, β_g, α_intra and γ, not β_intra.
    with pytest.raises(UserError, match="3 measurements are too few for the 4 coefficients"):
        speed.fit(speed.SpeedData(w[:3], (local * w)[:3], step[:3], nodes=np.ones(3),
                                  sync_time=np.zeros(3)), "pollux")  # fmt: skip


def test_pollux_on_weak_scaling_at_one_local_batch() -> None:
    """A weak-scaling study has one local batch: T_grad's two constants cannot be told apart,
    which the fit says, instead of numpy's RankWarning."""
    theta = np.array([0.01, 5e-4, 0.004, 0.002, 0.0, 0.0, 2.0])
    w = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    local = np.full(5, 32.0)
    t_grad, t_iter = speed._pollux_time(theta, np.ones(5), w, local)
    data = speed.SpeedData(w, local * w, t_iter, nodes=np.ones(5), sync_time=t_iter - t_grad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = speed.fit(data, "pollux")
    assert fit.error_pct < 1.0
    assert (
        fit.undetermined["alpha_g"]
        == fit.undetermined["beta_g"]
        == (
            "not identifiable from these points: needs runs at 2 or more batch sizes per worker "
            "(all at 32; only their sum there is known)"
        )
    )
    assert fit.default_batch(8) == 256  # 8 workers at the usual local batch


def test_reads_pollux_placements(tmp_path: Path) -> None:
    path = tmp_path / "placements.csv"
    path.write_text("placement,local_bsz,step_time,sync_time\n1,32,0.1,0.001\n1244,64,0.3,0.1\n")
    data = speed.load_csv(path)
    assert data.nodes.tolist() == [1, 4]
    assert data.workers.tolist() == [1, 11]  # digits are GPUs per node
    assert data.global_batch.tolist() == [32, 704]


def test_pollux_fit_on_real_scalability_trace() -> None:
    fit = speed.fit(speed.load_csv(POLLUX / "cifar10_scalability.csv"), "pollux")
    assert fit.n_points == 329
    assert fit.converged
    assert fit.error_pct < 15.0  # measured: 8.1% (README, bench_converge_pollux.py)
    assert fit.notes  # all of it is across nodes: intra-node constants are borrowed


def test_optimus_needs_ps_and_enough_rows(tmp_path: Path) -> None:
    path = tmp_path / "speed.csv"
    path.write_text("workers,global_batch,step_time_s\n1,64,0.2\n2,64,0.15\n")
    with pytest.raises(UserError, match="'ps' column"):
        speed.fit(speed.load_csv(path), "optimus-sync")
    path.write_text("workers,ps,global_batch,step_time_s\n1,1,64,0.2\n2,1,64,0.15\n")
    with pytest.raises(UserError, match="too few"):
        speed.fit(speed.load_csv(path), "optimus-sync")


def test_bad_tables(tmp_path: Path) -> None:
    path = tmp_path / "speed.csv"
    path.write_text("workers,global_batch,step_time_s\n1,64,nan\n")
    with pytest.raises(UserError, match="not finite"):
        speed.load_csv(path)
    path.write_text("workers,global_batch,step_time\n1,64,0.2\n")
    with pytest.raises(UserError, match="did you mean 'step_time'"):
        speed.load_csv(path)


def test_fit_measured_predicts_the_configurations_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "speed.csv"
    rows = [f"{w},{p},256,{0.5 / w + 0.01 + 0.02 * w / p!r}" for w in (1, 2, 4, 8) for p in (1, 2)]
    path.write_text("workers,ps,global_batch,step_time_s\n" + "\n".join(rows))

    def no_store() -> None:
        raise AssertionError("a speed table needs no store")

    done = speed.fit_measured(
        "optimus-sync", no_store, csv=path, predict=["workers=8,ps=2", "workers=16,ps=2"]
    )
    p, beyond = done.predictions
    assert (p["workers"], p["ps"], p["batch"]) == (8, 2, 256)  # the table's usual batch
    assert p["step_time_s"] == pytest.approx(0.5 / 8 + 0.01 + 0.02 * 4, rel=1e-6)
    # A configuration the table measured: its step time and the prediction's error beside it.
    assert p["measured_step_time_s"] == pytest.approx(0.5 / 8 + 0.01 + 0.02 * 4)
    assert abs(p["error_pct"]) < 1e-3
    assert beyond["measured_step_time_s"] is None and beyond["error_pct"] is None
    doc = done.to_dict()
    assert doc["meanings"] == speed.MEANINGS["optimus-sync"] and doc["predictions"] == [p, beyond]
    assert doc["basis"].startswith("optimus-sync fitted to 8 measured step times of speed.csv")
    assert beyond["outside"] == [
        "workers 16 is outside the measured 1–8 (2× the largest): assumes that each θ term "
        "stays linear in w, w/p and M/w"
    ]
    assert done.warnings == [f"prediction at workers=16,ps=2,batch=256: {beyond['outside'][0]}"]
    with pytest.raises(UserError, match="takes workers=N, ps=N, batch=N"):
        speed.predict_at(done.fit, "nodes=2")
    with pytest.raises(UserError, match="give STUDY_ID or --csv FILE"):
        speed.fit_measured("optimus-sync", no_store)


def weak_1_and_2_workers() -> speed.SpeedData:
    """The issue's study in the shape `dlperf scale --workers 1,2 --mode weak
    --per-worker-batch 16,32,64` stores it: a few ms per step, a little sync at 2 workers."""
    rng = np.random.default_rng(0)
    w, local = np.repeat([1.0, 2.0], 3), np.tile([16.0, 32.0, 64.0], 2)
    sync = np.where(w > 1, 0.0015, 0.0) * (1 + rng.normal(0, 0.03, 6))
    step = 0.002 + 6e-5 * local + sync * (1 + rng.normal(0, 0.03, 6))
    return speed.SpeedData(w, local * w, step, nodes=np.ones(6), sync_time=sync)


def test_pollux_says_what_1_and_2_workers_cannot_determine() -> None:
    """Issue 29: fitted to 1 and 2 workers, pollux set β_intra (per worker beyond 2) to 38 s
    and predicted 76 s a step at 4 workers where steps took 8 ms. Now β_intra and the
    across-node constants are named undetermined, a prediction needing them is refused, and
    every determined coefficient has an interval that holds it."""
    data = weak_1_and_2_workers()
    fit = speed.fit(data, "pollux")
    assert fit.undetermined == {
        "beta_intra": "not identifiable from these points: needs runs with 3 or more workers "
        "on one node (all at 2 workers)",
        "alpha_inter": "not identifiable from these points: needs runs across nodes",
        "beta_inter": "not identifiable from these points: needs runs with 3 or more workers "
        "across nodes",
    }
    assert set(fit.intervals) == {"alpha_g", "beta_g", "alpha_intra", "gamma"}
    for name, (low, high) in fit.intervals.items():
        assert low <= fit.params[name] <= high
    assert fit.intervals["beta_g"][0] < 6e-5 < fit.intervals["beta_g"][1]
    with pytest.raises(UserError) as refused:
        speed.predict_at(fit, "workers=4,nodes=1", data)
    assert str(refused.value) == (
        "--predict workers=4,nodes=1: rests on beta_intra, not identifiable from these points: "
        "needs runs with 3 or more workers on one node (all at 2 workers) (measure such runs, "
        "or fix it with --fix beta_intra=VALUE, e.g. the paper's)"
    )
    with pytest.raises(UserError, match="rests on alpha_inter"):
        speed.predict_at(fit, "workers=2,nodes=2", data)
    # Inside the measured workers, beyond the measured batches: answered, with how far out.
    p = speed.predict_at(fit, "workers=2,batch=256", data)
    assert p["step_time_s"] == pytest.approx(0.002 + 6e-5 * 128 + 0.0015, rel=0.15)
    assert p["outside"] == [
        "batch per worker 128 is outside the measured 16–64 (2× the largest): assumes that "
        "gradient time stays linear in the batch per worker (α_g + β_g·m: no memory limit, "
        "no change of kernels)"
    ]
    # β_intra fixed (to a paper's value, say): 4 workers are predicted, beyond the range.
    fixed = speed.fit(data, "pollux", {"beta_intra": 5e-4})
    assert fixed.params["beta_intra"] == 5e-4 and "beta_intra" not in fixed.undetermined
    p = speed.predict_at(fixed, "workers=4,nodes=1", data)
    assert p["step_time_s"] < 0.02  # milliseconds, as measured, not 76 s
    assert p["outside"][0].startswith("workers 4 is outside the measured 1–2 (2× the largest)")


def test_one_local_batch_predicts_only_at_that_batch() -> None:
    data = weak_1_and_2_workers()
    keep = np.flatnonzero(data.global_batch / data.workers == 32).repeat(2)  # twice each
    one = speed.SpeedData(data.workers[keep], data.global_batch[keep], data.step_time[keep],
                          nodes=data.nodes[keep], sync_time=data.sync_time[keep])  # fmt: skip
    fit = speed.fit(one, "pollux")
    assert speed.predict_at(fit, "workers=1,batch=32", one)["outside"] == []
    with pytest.raises(UserError, match=r"rests on alpha_g, .* at 2 or more batch sizes"):
        speed.predict_at(fit, "workers=1,batch=64", one)


def test_optimus_with_one_server_refuses_other_server_counts() -> None:
    """With p = 1 everywhere, w/p is w and p is 1: θ2 and θ3, θ1 and θ4 cannot be told apart.
    Their sums are determined, so p = 1 is predicted (also beyond the measured workers, with
    a note), p = 2 is refused."""
    w, _, m = grid()
    keep = _ == 1
    w, m = w[keep], m[keep]
    t = 2e-3 * m / w + 0.05 + 0.02 * w
    data = speed.SpeedData(w, m, t, ps=np.ones_like(w))
    fit = speed.fit(data, "optimus-sync")
    assert set(fit.undetermined) == {"theta1", "theta2", "theta3", "theta4"}
    assert fit.undetermined["theta4"] == (
        "not identifiable from these points: needs runs that vary the server count p"
    )
    low, high = fit.intervals["theta0"]
    assert low <= fit.params["theta0"] <= high
    p = speed.predict_at(fit, "workers=32,ps=1,batch=512", data)
    assert p["step_time_s"] == pytest.approx(2e-3 * 16 + 0.05 + 0.02 * 32, rel=1e-6)
    assert p["outside"][0].startswith("workers 32 is outside the measured 1–16")
    with pytest.raises(UserError, match=r"rests on theta1, .* that vary M/w, w/p, w and p"):
        speed.predict_at(fit, "workers=8,ps=2,batch=512", data)
    # θ4 fixed at 0 (no per-server overhead) determines θ1; θ2 against θ3 stays open.
    fixed = speed.fit(data, "optimus-sync", {"theta4": 0.0})
    assert set(fixed.undetermined) == {"theta2", "theta3"}
    assert fixed.intervals["theta1"][0] <= fixed.params["theta1"] <= fixed.intervals["theta1"][1]
    with pytest.raises(UserError, match="rests on theta2"):
        speed.predict_at(fixed, "workers=8,ps=2,batch=512", data)
    with pytest.raises(UserError, match="--fix: optimus-sync has no gamma"):
        speed.fit(data, "optimus-sync", {"gamma": 2.0})
    every = dict.fromkeys(speed.MEANINGS["optimus-sync"], 0.01)
    with pytest.raises(UserError, match="--fix gives every coefficient of optimus-sync"):
        speed.fit(data, "optimus-sync", every)


def test_pollux_placements_up_to_4_gpus_predict_8_and_16_held_out() -> None:
    """Held-out check on Pollux's own measurements (ResNet-18, CIFAR-10): fitted to the
    placements of at most 4 GPUs (121 rows), predicting the measured 8- and 16-GPU rows.
    Measured: mean |error| 30% at 8 GPUs (154 rows), 103% at 16 (10 rows, predicted too
    slow: the linear sync term grows faster than the measured sync); docs/converge.md. The
    ring all-reduce's sync time (`ring`) answers it: tests/converge/test_speed_heldout.py."""
    data = speed.load_csv(EXAMPLES / "cifar10_placements.csv")

    def rows(keep: np.ndarray) -> speed.SpeedData:
        assert data.nodes is not None and data.sync_time is not None
        return speed.SpeedData(data.workers[keep], data.global_batch[keep], data.step_time[keep],
                               nodes=data.nodes[keep], sync_time=data.sync_time[keep])  # fmt: skip

    small = rows(data.workers <= 4)
    fit = speed.fit(small, "pollux")
    assert fit.n_points == 121 and not fit.undetermined  # 1..4 GPUs over 1..4 nodes
    errors = {}
    for gpus in (8, 16):
        held = rows(data.workers == gpus)
        predicted = speed.step_time(fit, held.workers, held.global_batch, nodes=held.nodes)
        errors[gpus] = float(np.mean(np.abs(predicted / held.step_time - 1)) * 100)
    assert 20 < errors[8] < 40 and 80 < errors[16] < 130
    p = speed.predict_at(fit, "workers=16,nodes=4,batch=1024", small)
    assert p["outside"][0].startswith("workers 16 is outside the measured 1–4 (4× the largest)")


@settings(max_examples=15, deadline=None)
@given(
    workers=st.lists(st.integers(1, 8), min_size=2, max_size=4, unique=True),
    batches=st.lists(st.sampled_from([16.0, 32.0, 64.0, 128.0]), min_size=1, max_size=3,
                     unique=True),
    sync=st.floats(0.0, 0.02),
    noise=st.floats(0.0, 0.1),
    seed=st.integers(0, 2**16),
)  # fmt: skip
def test_every_speed_interval_contains_its_point(
    workers: list[int], batches: list[float], sync: float, noise: float, seed: int
) -> None:
    """Item 5 of issue 29 for speed fits: over random one-node studies, each coefficient is
    either undetermined or has an interval holding its value, and Optimus's the same."""
    rng = np.random.default_rng(seed)
    w, local = (a.ravel() for a in np.meshgrid(np.array(workers, float), batches))
    w, local = np.repeat(w, 2), np.repeat(local, 2)  # two measurements per configuration
    exposed = np.where(w > 1, sync + 1e-3 * np.maximum(w - 2, 0), 0.0)
    step = (0.004 + 5e-5 * local + exposed) * (1 + noise * rng.random(len(w)))
    data = speed.SpeedData(w, local * w, step, nodes=np.ones_like(w), sync_time=exposed,
                           ps=np.ceil(w / 2))  # fmt: skip
    for model in ("pollux", "optimus-sync"):
        try:
            fit = speed.fit(data, model)
        except UserError:  # too few measurements for this model: nothing printed
            continue
        assert set(fit.intervals) | set(fit.undetermined) == set(fit.params)
        for name, bounds in fit.intervals.items():
            assert bounds is None or bounds[0] <= fit.params[name] <= bounds[1], (model, name)
