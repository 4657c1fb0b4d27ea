"""dlperf.converge.regress: β as a function of run features; `dlperf converge regress`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.converge import regress
from dlperf.errors import UserError
from dlperf.store.record import RunRecord


def betas(depth: float, device: str = "T4") -> np.ndarray:
    """log β linear in depth, and a V100 twice as fast per step as a T4 (β0 doubled)."""
    b0 = np.exp(-3.0 - 0.02 * depth) * (2.0 if device == "V100" else 1.0)
    return np.array([b0, np.exp(0.1 + 0.005 * depth), np.exp(-2.0 + 0.01 * depth)])


def test_recovers_log_linear_betas_and_predicts_unseen_depth() -> None:
    rows = [{"depth": d, "device": g} for d in (20, 32, 44, 56) for g in ("T4", "V100")]
    reg = regress.fit(
        rows, np.array([betas(r["depth"], r["device"]) for r in rows]), ["depth", "device"]
    )
    assert reg.columns == ["intercept", "depth", "device=V100"]
    assert reg.coef["beta0"] == pytest.approx([-3.0, -0.02, np.log(2.0)])
    assert regress.predict(reg, {"depth": 110, "device": "V100"}) == pytest.approx(
        betas(110, "V100")
    )
    with pytest.raises(UserError, match="was in no run"):
        regress.predict(reg, {"depth": 50, "device": "A100"})
    with pytest.raises(UserError, match="needs device"):
        regress.predict(reg, {"depth": 50})


def test_too_few_runs() -> None:
    rows = [{"depth": 20, "device": "T4"}, {"depth": 32, "device": "V100"}]
    with pytest.raises(UserError, match="too few"):
        regress.fit(rows, np.ones((2, 3)), ["depth", "device"])


def test_run_features_from_config() -> None:
    run = RunRecord(
        id=1,
        study_id=None,
        name="r",
        kind="run",
        status="finished",
        config={"model": {"name": "resnet56"}, "run": {"device": "auto"}},
        config_hash=None,
        system={"device": "cuda:0", "gpus": ["Tesla T4", "Tesla T4"]},
    )
    # The device used (system) wins over the one asked for (config); gpu is the GPU's name.
    assert regress.run_features(run, ["depth", "device", "name", "gpu", "run.device"]) == {
        "depth": 56,
        "device": "cuda:0",
        "name": "resnet56",
        "gpu": "Tesla T4",
        "run.device": "auto",
    }
    assert regress.run_features(replace(run, system={"gpus": []}), ["gpu"]) == {"gpu": "cpu"}
    with pytest.raises(UserError, match="no feature 'width'"):
        regress.run_features(run, ["width"])


def test_cli_regress_on_csv_curves(cli: Callable[..., Any], tmp_path: Path) -> None:
    sources = []
    k = np.arange(1.0, 41.0) * 10
    for depth in (20, 32, 44, 56):
        b = betas(depth)
        loss = 1.0 / (b[0] * k + b[1]) + b[2]
        path = tmp_path / f"resnet{depth}.csv"
        lines = [f"{s:g},{float(v)!r}\n" for s, v in zip(k, loss, strict=True)]
        path.write_text("step,loss\n" + "".join(lines))
        sources.append(f"{path}:depth={depth}")
    plot = str(tmp_path / "r.png")
    r = cli("converge", "regress", *sources, "--features", "depth", "--x", "step", "--y",
            "loss", "--predict", "depth=110", "--plot", plot, "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    pred = doc["prediction"]
    assert [pred[b] for b in regress.BETAS] == pytest.approx(betas(110), rel=0.05)
    assert len(pred["curve"]) == 50
    assert (tmp_path / "r.png").stat().st_size > 0
    r = cli("converge", "regress", sources[0], "--features", "depth", "--y", "loss")
    assert r.code == 2 and "too few" in r.err
    # Without --x, fitted on row numbers as fit and predict are, and said as they say it.
    r = cli("converge", "regress", *sources, "--features", "depth", "--y", "loss")
    assert r.code == 0, r.err
    unused = "the steps are the row numbers 1..40; column 'step' (10 to 400) is not used"
    assert " ".join(r.err.split()).count(unused) == len(sources), r.err  # wrapped lines


def test_cli_regress_expands_a_quoted_home(
    cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source given as '~/x.csv:depth=20' (quoted, so the shell left the ~) is read from the
    home folder, as every other path is; it was refused as missing, by its literal name."""
    monkeypatch.setenv("HOME", str(tmp_path))
    k = np.arange(1.0, 41.0) * 10
    sources = []
    for depth in (20, 32, 44, 56):
        b = betas(depth)
        loss = 1.0 / (b[0] * k + b[1]) + b[2]
        lines = [f"{s:g},{float(v)!r}\n" for s, v in zip(k, loss, strict=True)]
        (tmp_path / f"r{depth}.csv").write_text("step,loss\n" + "".join(lines))
        sources.append(f"~/r{depth}.csv:depth={depth}")
    r = cli("converge", "regress", *sources, "--features", "depth", "--x", "step", "--y", "loss",
            "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [run["source"] for run in doc["runs"]] == [f"r{d}.csv" for d in (20, 32, 44, 56)]
    assert doc["coef"]["beta0"] == pytest.approx([-3.0, -0.02], rel=1e-6)
    # The same file, once through ~ and once by its full path, is one curve given twice.
    r = cli("converge", "regress", "~/r20.csv:depth=20", f"{tmp_path}/r20.csv:depth=32",
            "--features", "depth", "--y", "loss")  # fmt: skip
    assert r.code == 2 and "again" in r.err, r.err
