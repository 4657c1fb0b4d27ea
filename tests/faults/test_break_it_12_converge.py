"""The twelfth break-it round (converge predict, C4): curves that do not improve.

`converge predict` read a loss flat at 0.5 for 20 points as a plateau of 0.0675 with a 90%
interval of [0, 0.48] (excluding the 0.5 measured at every point) and P(reach 0.1) = 0.58, a
loss rising from 0.55 to 1.5 as a plateau of 0.069 and P(reach) 0.58, and an accuracy falling
from 0.88 to 0.50 as a plateau of 0.986 [0.901, 1] with P(reach 0.95) = 0.78, printed next to
"100% of the curves ... do not reach 0.95 by step 60"; all exit 0. Every curve family
decreases, so values that do not fall leave the plateau to the prior: those figures were the
prior's. Now a window whose values do not move toward the target (flat within their noise,
or moving away) is said to be so in one line, with P(reach) 0 and the plateau its recent
measured level; improving curves keep their answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.converge import curve, ensemble
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
CORPUS = Path(__file__).parents[2] / "benchmarks" / "data" / "public_curves.json"


def _csv(tmp_path: Path, values: list[float] | np.ndarray) -> Path:
    path = tmp_path / "c.csv"
    rows = "".join(f"{i},{v!r}\n" for i, v in enumerate(values, start=1))
    path.write_text("step,metric\n" + rows)
    return path


def _predict(cli: Cli, path: Path, target: str, *extra: str) -> dict[str, object]:
    r = cli("converge", "predict", "--csv", str(path), "--x", "step", "--y", "metric",
            "--target", target, *extra, "--json")  # fmt: skip
    assert r.code == 0, (r.code, r.err)
    doc: dict[str, object] = json.loads(r.out)
    return doc


def _level_held(doc: dict[str, object], level: float) -> None:
    """P(reach) 0, no step, the plateau interval holding the measured level, and why."""
    lo, hi = doc["plateau_interval"]  # type: ignore[misc]
    assert lo <= level <= hi, doc
    assert doc["plateau"] == pytest.approx(level, abs=0.06), doc
    assert doc["p_reachable"] == 0.0, doc
    assert doc["verdict"] == "cannot tell" and doc["predicted_step"] is None, doc
    assert "do not move toward" in str(doc["reason"]), doc


def _ensemble(values: list[float], target: float, metric: str = "loss") -> dict[str, object]:
    """What `converge predict --json` says of the ensemble for these values at steps 1, 2, ...
    (the command's least-squares bootstrap takes 4-15 s on a rising curve: not run here)."""
    k = np.arange(1.0, len(values) + 1.0)
    y = curve.to_decreasing(np.array(values), metric)
    p = ensemble.predict(ensemble.fit(k, y), target, metric, k, np.array(values))
    return {**vars(p), "plateau_interval": list(p.plateau_interval)}


def test_a_flat_loss_is_its_own_plateau_and_never_reaches_lower(cli: Cli, tmp_path: Path) -> None:
    doc = _predict(cli, _csv(tmp_path, [0.5] * 20), "0.1")
    _level_held(doc, 0.5)
    assert doc["plateau_interval"] == [0.5, 0.5]
    assert doc["reason"] == (
        "the 20 points to step 20 do not move toward 0.1: loss 0.5 over the first 6, 0.5 over "
        "the last 6 (flat)"
    )
    assert doc["basis"].startswith("20 points up to step 20 that do not fall")  # type: ignore[attr-defined]


def test_a_rising_loss_moves_away_from_a_lower_target() -> None:
    doc = _ensemble([0.55 + 0.05 * i for i in range(20)], 0.1)
    _level_held(doc, 1.4)
    assert "loss 0.675 over the first 6, 1.38 over the last 6 (away from it)" in str(doc["reason"])


def test_a_falling_accuracy_has_no_chance_of_a_higher_one() -> None:
    doc = _ensemble([0.88 - 0.02 * i for i in range(20)], 0.95, "accuracy")
    _level_held(doc, 0.55)
    assert "accuracy 0.83 over the first 6, 0.55 over the last 6 (away from it)" in str(
        doc["reason"]
    )


def test_the_table_says_it_in_one_line_beside_figures_that_agree(cli: Cli, tmp_path: Path) -> None:
    """The table's P(reach) and plateau agree with the one line saying why there is none."""
    r = cli("converge", "predict", "--csv", str(_csv(tmp_path, [0.5] * 20)), "--x", "step",
            "--y", "metric", "--target", "0.1")  # fmt: skip
    assert r.code == 0, r.err
    row = next(line for line in r.out.splitlines() if line.startswith("c.csv "))
    cells = [c.strip() for c in row.replace("┃", "│").split("│")]
    assert cells[1] == "cannot tell" and float(cells[4]) == 0.0
    assert [float(c) for c in cells[-3:]] == [0.5, 0.5, 0.5]
    said = [line for line in r.err.splitlines() if line.startswith("warning: c.csv: cannot")]
    assert len(said) == 1 and "do not move toward 0.1" in said[0], r.err
    assert "do not reach" not in r.err and "Traceback" not in r.err


def test_a_loss_flat_within_its_noise_holds_its_level() -> None:
    """Noise on a flat loss (σ 0.01 at 0.5) left the plateau to the prior too: [0, 0.44]."""
    k = np.arange(1.0, 21.0)
    y = 0.5 + np.random.default_rng(0).normal(0, 0.01, k.size)
    p = ensemble.predict(ensemble.fit(k, y), 0.1, "loss")
    lo, hi = p.plateau_interval
    assert lo <= float(np.median(y[-6:])) <= hi and lo > 0.45
    assert p.p_reachable == 0.0 and p.verdict == "cannot tell"
    assert p.reason is not None and "(flat within noise ±0.0" in p.reason


def test_a_target_already_reached_by_a_flat_curve_is_reached() -> None:
    """A flat curve below the target reached it at a measured point: P(reach) 1."""
    k = np.arange(1.0, 21.0)
    p = ensemble.predict(ensemble.fit(k, np.full(20, 0.5)), 0.6, "loss", k, np.full(20, 0.5))
    assert p.p_reachable == 1.0 and p.actual_step == 1.0
    assert p.plateau_interval == (0.5, 0.5)


def test_improving_curves_keep_the_posterior() -> None:
    """A curve that falls, even slowly through noise, is fitted as before: its plateau is the
    posterior's (below the measured values), not the recent level."""
    k = np.arange(1.0, 21.0)
    for seed in range(3):
        y = 0.1 + 0.5 * k**-0.5 + np.random.default_rng(seed).normal(0, 0.01, k.size)
        post = ensemble.fit(k, y)
        assert not post.trend.stalled
        p = ensemble.predict(post, 0.2, "loss")
        assert p.verdict == "answer" and p.plateau < float(y[-6:].min())


def test_only_the_corpus_windows_that_do_not_improve_are_withheld() -> None:
    """Of the public corpus's curves seen to 30% and 50% (benchmarks/bench_curve_corpus.py),
    the windows held as not improving are the ones whose values did not fall: the other
    windows keep the answers the corpus benchmark measured."""
    held = set()
    for name, c in json.loads(CORPUS.read_text())["curves"].items():
        epochs, values = np.array(c["epochs"], float), np.array(c["values"], float)
        if len(epochs) < 14:
            continue
        metric = "accuracy" if c["metric"] == "val_acc1" else "loss"
        y = curve.to_decreasing(values, metric)
        for fraction in (0.3, 0.5):
            n = curve.window(epochs, fraction, None)
            if ensemble.trend(y[:n]).stalled:
                held.add((name.split("@")[0], fraction))
    assert held == {
        ("Nhungnguyen217/traffic-sign-cnn", 0.3),  # accuracy 0.892, 0.975, 0.115, 0.860
        ("Nhungnguyen217/traffic-sign-cnn", 0.5),  # the 0.115 outweighs a 0.03 gain
        ("AicoSchreurs/street-type-yolov8m", 0.3),  # 0.918-0.939 with no trend
        ("dramab/pets-yolov8-cls", 0.3),  # 0.26-0.29
        ("dramab/pets-yolov8-cls", 0.5),
        ("Aditya24jar/fer2013-resnet50", 0.3),  # 0.47, 0.36, 0.53, 0.40, 0.48
    }
