"""Loose ends round 25's fixers noticed and left.

L1: `converge regress` fitted each CSV's curve without the [0, 1] check `converge fit` makes,
so accuracy in percent was "loss/error values must be ≥ 0 (is the metric right?)". L2: a quote
opened on a CSV's last line and never closed read as the number it held. L3: `dlperf distill`
printed the teacher's scoring speed with every digit of its float (1e25 images/s as 27
digits). L4: /predict's softmax imported scipy.special (~150 modules) for one line of numpy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_app import one_line_error
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
STEPS = np.arange(1, 41)


def _write(path: Path, lines: list[str], end: str = "\n") -> Path:
    path.write_text("\n".join(lines) + end, encoding="utf-8")
    return path


# --- L1: accuracy in percent, given to `converge regress` -----------------------------------


def test_regress_tells_accuracy_in_percent_to_divide_by_100(cli: Cli, tmp_path: Path) -> None:
    sources = []
    for depth in (10, 20, 30):
        accuracy = 100 * (1 - (1 / (0.005 * depth * STEPS + 0.5) + 0.05) / 3)
        rows = [f"{k},{a:.3f}" for k, a in zip(STEPS, accuracy, strict=True)]
        path = _write(tmp_path / f"d{depth}.csv", ["step,acc", *rows])
        sources.append(f"{path}:depth={depth}")
    result = cli("converge", "regress", *sources, "--features", "depth", "--x", "step",
                 "--y", "acc", "--metric", "accuracy")  # fmt: skip
    one_line_error(result, "d10.csv: accuracy values must lie in [0, 1]; line 2 holds 37.727")
    assert "divide the column by 100" in result.err


# --- L2: an unclosed quote on the last line -------------------------------------------------


@pytest.mark.parametrize("end", ["\n", ""], ids=["line break", "no line break"])
def test_an_unclosed_quote_on_the_last_line_is_refused(cli: Cli, tmp_path: Path, end: str) -> None:
    loss = 1 / (0.05 * STEPS + 0.5) + 0.2
    rows = [f"{k},{v:.6f}" for k, v in zip(STEPS[:-1], loss, strict=False)]
    path = _write(tmp_path / "q.csv", ["step,loss", *rows, '40,"0.6'], end)
    result = cli("converge", "fit", "--csv", str(path), "--x", "step", "--y", "loss")
    one_line_error(result, f"{path}:41: an opening quote (\") is never closed: '40,\"0.6'")


# --- L3: the teacher's scoring speed --------------------------------------------------------


def test_distills_scoring_speed_is_shown_to_its_significant_digits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dlperf.cli.distill import _print_summary
    from dlperf.distill.summary import DistillResult, TeacherRow

    teacher = TeacherRow(run_id=1, model="m", test_accuracy=0.9, scoring_images_per_s=1e25,
                         reused=False)  # fmt: skip
    result = DistillResult(1, "d", teacher, None, [], None, ["a"], "digits", "dir")
    _print_summary(result, [])
    out = " ".join(capsys.readouterr().out.split())
    assert "teacher scoring: 1e+25 images/s" in out
    assert "10,000" not in out


# --- L4: /predict's softmax without scipy ---------------------------------------------------


def test_topk_is_scipys_softmax_without_importing_scipy(monkeypatch: pytest.MonkeyPatch) -> None:
    from scipy.special import softmax

    from dlperf.deploy import runtime

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 7)) * np.array([[1], [10], [1e3], [1e30], [1], [1]])
    logits[4, :3] = -np.inf  # a class the model rules out
    logits[5, 2] = 800.0  # exp() of it alone overflows
    expected = softmax(logits, axis=-1)
    monkeypatch.setitem(sys.modules, "scipy.special", None)  # an import of it now fails
    top = runtime.topk(logits, 7, [])
    got = np.zeros_like(expected)
    for r, row in enumerate(top):
        for p in row:
            got[r, p["index"]] = p["probability"]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-300)
    assert np.all(np.isfinite(got)) and got[4, :3].tolist() == [0.0, 0.0, 0.0]
