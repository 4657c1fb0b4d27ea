"""dlperf.converge.fitting: what `converge fit | predict | regress` do, called directly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dlperf.converge import fitting
from dlperf.converge.options import CurveOptions
from dlperf.errors import UserError
from dlperf.store import RunStore

STEPS = np.arange(1.0, 41.0) * 10


pytestmark = pytest.mark.usefixtures("fewer_bootstrap_fits")  # 20 refits, not 200


def no_store() -> RunStore:
    raise AssertionError("CSV curves need no store")


def loss_csv(path: Path, b0: float = 0.005, b1: float = 1.0, b2: float = 0.1) -> Path:
    """A curve on steps 10..400 that follows the Optimus form exactly."""
    loss = 1.0 / (b0 * STEPS + b1) + b2
    path.write_text(
        "step,loss\n" + "".join(f"{k:g},{float(v)!r}\n" for k, v in zip(STEPS, loss, strict=True))
    )
    return path


def test_fit_documents_the_fit_window(tmp_path: Path) -> None:
    opts = CurveOptions(x="step", y="loss", upto=0.5)
    done = fitting.fit([], loss_csv(tmp_path / "c.csv"), opts, no_store)
    (report,) = done.reports
    fitted = fitting.fit_result(report)
    assert (fitted.source, fitted.metric, fitted.n_points, fitted.last_step) == (
        "c.csv", "loss", 20, 200.0
    )  # fmt: skip
    betas = [fitted.beta0, fitted.beta1, fitted.beta2]
    assert betas == pytest.approx([0.005, 1.0, 0.1], rel=1e-3)
    assert done.warnings == [] and fitted.heldout["n_points"] == 20
    # The JSON `converge plan --curve` reads: the Optimus β at the top, intervals as lists.
    doc = fitted.to_dict()
    assert [doc["beta0"], doc["beta1"], doc["beta2"]] == betas
    assert doc["form"] == "optimus" and isinstance(doc["ci"]["beta0"], list)
    assert set(doc["power"]) == {"a", "b", "c", "ci", "rmse", "converged"}
    with pytest.raises(UserError, match="not both"):
        fitting.fit([1], tmp_path / "c.csv", opts, no_store)


def test_predict_compares_with_the_measured_curve(tmp_path: Path) -> None:
    opts = CurveOptions(x="step", y="loss", upto=0.5)
    done = fitting.predict([], loss_csv(tmp_path / "c.csv"), opts, no_store, 0.2, "optimus")
    (p,) = done.predictions
    # 1/(0.005·k + 1) = 0.1 at k = 1800 steps: beyond the curve, so nothing to compare with.
    assert p.reachable and p.predicted_step == pytest.approx(1800, rel=0.01)
    assert p.actual_step is None and p.plateau == pytest.approx(0.1, rel=1e-3)
    done = fitting.predict([], tmp_path / "c.csv", opts, no_store, 0.5, form="power")
    assert done.predictions[0].actual_step == 300  # 1/(0.005·k + 1) + 0.1 = 0.5 at k = 300
    with pytest.raises(UserError, match="unknown form 'cubic'"):
        fitting.predict([], tmp_path / "c.csv", opts, no_store, 0.2, form="cubic")


def test_regress_predicts_an_unseen_feature_value(tmp_path: Path) -> None:
    # β0 = 0.01·e^(−0.02·depth): log β0 linear in depth; β1 and β2 the same for all.
    sources = [
        f"{loss_csv(tmp_path / f'd{d}.csv', b0=0.01 * np.exp(-0.02 * d))}:depth={d}"
        for d in (20, 32, 44, 56)
    ]
    opts = CurveOptions(x="step", y="loss")
    done = fitting.regress(sources, ["depth"], opts, no_store, at={"depth": "110"}, target=0.3)
    assert done.result.columns == ("intercept", "depth")
    assert done.result.coef["beta0"] == pytest.approx([np.log(0.01), -0.02], rel=1e-3)
    pred = done.result.prediction
    assert pred is not None and pred.beta0 == pytest.approx(0.01 * np.exp(-2.2), rel=1e-3)
    # 1/(β0·k + 1) = 0.2 at k = 4/β0
    assert pred.predicted_step == pytest.approx(4 / (0.01 * np.exp(-2.2)), rel=1e-3)
    assert [run["depth"] for run in done.result.runs] == ["20", "32", "44", "56"]
    assert pred.actual_step is None and pred.error_pct is None  # no run at depth 110
    assert pred.basis.startswith("log β0, log β1, log β2 linear in depth over 4 runs")
    # At a depth one run has, its measured step stands beside the prediction.
    done = fitting.regress(sources, ["depth"], opts, no_store, at={"depth": "32"}, target=0.5)
    pred = done.result.prediction
    # 1/(β0·k + 1) + 0.1 = 0.5 at β0·k = 1.5: k = 284.5, first measured at step 290.
    assert pred is not None and pred.predicted_step == 285 and pred.actual_step == 290
    assert pred.error_pct == pytest.approx((285 - 290) / 290 * 100)
    with pytest.raises(UserError, match=r"converge\.target needs --predict"):
        fitting.regress(sources, ["depth"], opts, no_store, target=0.3)
