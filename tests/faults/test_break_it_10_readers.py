"""The tenth break-it round (readers): a loss curve too large to square, a data set of very many
classes, and doctor's chance rule on a handful of test images.

`converge fit` of a curve of 1e300/step printed numpy's `RuntimeWarning: overflow encountered
in square` and then "the curve has fewer than 2 points above 0", of 29 points all above 0.
`data describe` of an .npz of 40 images whose labels reach 99,999 drew one bar per class and
ran in matplotlib for minutes without a word. And doctor called 0 correct of ~8 test images
against 100,000 classes "below chance, 1/100000 = 0.000 ... by more than 0.000", and 1 of 8
against 4 classes "below chance", both errors, where guessing does as well.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf import doctor
from dlperf.converge import curve
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_5_files import GUARD_S

Cli = Callable[..., CliResult]


def _one_line(result: CliResult, code: int = 2) -> str:
    assert result.code == code, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    return lines[0]


# --- 1. a curve whose squares overflow ---------------------------------------------------------


def _huge(path: Path, top: float = 1e300) -> Path:
    rows = "".join(f"{s},{top / s!r}\n" for s in range(1, 30))
    path.write_text("step,metric\n" + rows)
    return path


def test_a_curve_too_large_to_square_is_refused_in_one_true_line(cli: Cli, tmp_path: Path) -> None:
    csv = _huge(tmp_path / "huge.csv")
    said = _one_line(cli("converge", "fit", "--csv", str(csv), "--x", "step", "--y", "metric"))
    # before: numpy's RuntimeWarning, then "fewer than 2 points above 0" of 29 points above 0
    assert "RuntimeWarning" not in said and "above 0" not in said, said
    assert "1e+300" in said and "scale the column" in said, said


def test_a_large_but_squarable_curve_still_fits_without_warnings(
    recwarn: pytest.WarningsRecorder,
) -> None:
    k = np.arange(1.0, 30.0)
    y = 1e100 / k + 1e99
    _, p = curve.fit(k, y)
    assert np.all(np.isfinite(p)), p
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)], list(recwarn)


def test_fewer_than_two_points_above_zero_is_said_only_when_true() -> None:
    k = np.arange(1.0, 9.0)
    with pytest.raises(UserError, match="fewer than 2 points above 0"):
        curve.fit(k, np.array([1.0, 0, 0, 0, 0, 0, 0, 0]))


# --- 2. data describe of very many classes -----------------------------------------------------


@pytest.mark.faults  # over 10 s under load: make test-faults
# The bug was minutes in matplotlib, not a crash: in this process (a fresh one cost 6-7 CPU-s
# of imports), and pytest-timeout fails it should it hang again.
@pytest.mark.timeout(GUARD_S)
def test_describe_of_a_set_of_100000_classes_finishes(cli: Cli, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (40, 1, 8, 8), dtype=np.uint8)
    labels = np.concatenate([rng.integers(0, 99_999, 39), [99_999]])
    # The classes named: labels with gaps and no names are refused (round 28, C).
    names = np.array([str(i) for i in range(100_000)])
    np.savez(tmp_path / "many.npz", images=images, labels=labels, classes=names)
    # every class by default: before, a bar and a sample row each of 100,000 classes
    result = cli(
        "data", "describe", "npz", "--set", "data.root=many.npz", "--out", "figs",
        "--per-class", "1",
    )  # fmt: skip
    assert result.code == 0, result
    assert (tmp_path / "figs" / "npz-counts.png").stat().st_size > 0
    assert (tmp_path / "figs" / "npz-samples.png").stat().st_size > 0


def test_the_counts_figure_of_many_classes_says_what_it_draws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    from dlperf.report import data as report

    drawn: list[str] = []
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, *a, **k: drawn.append(fig.axes[0].get_title())
    )
    classes = [str(i) for i in range(100_000)]
    counts = [0] * 100_000
    for i in (3, 500, 99_999):
        counts[i] = 2
    report.plot_counts(tmp_path / "c.png", "many", classes, counts)
    (title,) = drawn
    assert "100000 classes" in title and "3 with images" in title, title


# --- 3. doctor's chance rule and the number of test images -------------------------------------


def _examined(store: RunStore, accuracy: float, classes: int, test: int | None) -> list:
    config = {"data": {"name": "synthetic", "num_classes": classes}, "train": {"lr": 0.1}}
    run = store.create_run("r", "run", config)
    data = {"classes": classes} | ({"test": test} if test is not None else {})
    store.finish_run(run, "finished", summary={"test_accuracy": accuracy, "data": data})
    return [f for f in doctor.examine(store, [run]) if f.rule == "chance-accuracy"]


def test_zero_of_eight_against_100000_classes_is_not_below_chance(store: RunStore) -> None:
    findings = _examined(store, 0.0, 100_000, 8)
    # before: "is below chance, 1/100000 = 0.000 ... by more than 0.000", an error
    assert not any("below chance" in f.evidence for f in findings), findings
    for f in findings:
        assert "0 of 8 test images" in f.evidence, f.evidence
        assert "1/100000 = 1e-05" in f.evidence, f.evidence


def test_one_of_eight_against_four_classes_is_not_below_chance(store: RunStore) -> None:
    findings = _examined(store, 0.125, 4, 8)
    # before: "0.125 is below chance, 1/4 = 0.250 ... by more than 0.050"
    assert not any("below chance" in f.evidence for f in findings), findings
    assert all("1 of 8 test images" in f.evidence for f in findings), findings


def test_below_chance_on_many_test_images_is_still_said(store: RunStore) -> None:
    (finding,) = _examined(store, 0.0, 10, 2000)
    assert finding.evidence.startswith("test accuracy 0.000 is below chance, 1/10 = 0.100")
    assert "0 of 2000 test images" in finding.evidence, finding.evidence


def test_too_few_test_images_to_tell_says_nothing(store: RunStore) -> None:
    # 2 images of 2 classes: even both right happens by chance one time in four
    assert _examined(store, 0.5, 2, 2) == []


def test_without_a_recorded_count_below_chance_needs_one_expected_correct(
    store: RunStore,
) -> None:
    findings = _examined(store, 0.0, 100_000, None)
    assert not any("below chance" in f.evidence for f in findings), findings
