"""dlperf.converge.speed: Optimus NNLS speed models and the Pollux iteration-time model."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from dlperf.converge import speed
from dlperf.errors import UserError

POLLUX = Path(__file__).parent / "data" / "pollux"


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
    assert fit.notes == ["no measurement across nodes: inter-node constants copied from intra-node"]
    with pytest.raises(UserError, match="4 measurements are too few for the 5 coefficients"):
        speed.fit(speed.SpeedData(w[:4], (local * w)[:4], step[:4], nodes=np.ones(4),
                                  sync_time=np.zeros(4)), "pollux")  # fmt: skip


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
    assert fit.notes[0].startswith("one local batch (32) in every measurement")
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
    assert done.warnings == []
    with pytest.raises(UserError, match="takes workers=N, ps=N, batch=N"):
        speed.predict_at(done.fit, "nodes=2")
    with pytest.raises(UserError, match="give STUDY_ID or --csv FILE"):
        speed.fit_measured("optimus-sync", no_store)
