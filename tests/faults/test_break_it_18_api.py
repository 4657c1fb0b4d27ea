"""Break-it round 18, part I2: the Python API's argument checks. docs/api.md promises that a
value of the wrong type raises dlperf's UserError, one line; these raised TypeError,
ValueError, AttributeError or LinAlgError from deep inside, or were taken silently:

- F4: `Store.runs`'s limit, study and kind and `Store.compare`'s run ids and study;
- F5: `fit_curve`'s upto, upto_step and form, and `CurveResult.predict_step`'s target;
- F6: `fit_curve` took steps that repeat or go back, which `converge fit --csv` refuses;
- F7: `dlperf.converge.ensemble`'s fit, predict and band (an unknown metric answered step 1).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dlperf
from dlperf.converge import ensemble
from tests.conftest import CliResult

STEPS = np.arange(1, 61)
LOSS = 1 / (0.05 * STEPS + 1) + 0.2
K = np.arange(1, 31)
ERROR = 0.05 + 0.6 * K**-0.7


def _refused(call: Callable[[], Any], *said: str) -> str:
    """The one-line UserError `call` raises, holding each of `said`."""
    with pytest.raises(dlperf.UserError) as raised:
        call()
    text = str(raised.value)
    assert "\n" not in text, text
    for part in said:
        assert part in text, text
    return text


# --- F4: Store ----------------------------------------------------------------------------


STORE_CALLS: dict[str, tuple[Callable[[dlperf.Store], Any], str]] = {
    "limit text": (lambda s: s.runs(limit="2"), "limit"),
    "limit bool": (lambda s: s.runs(limit=True), "limit"),
    "limit float": (lambda s: s.runs(limit=1.5), "limit"),
    "study text": (lambda s: s.runs(study="x"), "study"),
    "study bool": (lambda s: s.runs(study=True), "study"),
    "kind number": (lambda s: s.runs(kind=5), "kind"),
    "ids text": (lambda s: s.compare("1,2"), "run ids"),
    "ids bytes": (lambda s: s.compare(b"12"), "run ids"),
    "ids int": (lambda s: s.compare(1), "run ids"),
    "an id text": (lambda s: s.compare([1, "2"]), "run id"),
    "compare study text": (lambda s: s.compare(study="x"), "study"),
}


@pytest.mark.parametrize("name", list(STORE_CALLS))
def test_store_refuses_arguments_of_the_wrong_type(db: str, name: str) -> None:
    call, said = STORE_CALLS[name]
    _refused(lambda: call(dlperf.Store(db)), said)


def test_store_still_takes_numpy_whole_numbers_and_a_kind_without_runs(db: str) -> None:
    """NumPy's integers are whole numbers; a kind no run has lists no runs, as `dlperf runs
    list --kind scale` does (exit 0, an empty table). (A misspelt one is refused: round 31.)"""
    store = dlperf.Store(db)
    with dlperf.track("a", store=store), dlperf.track("b", store=store):
        pass
    assert [r.name for r in store.runs(limit=np.int64(1))] == ["b"]
    assert store.runs(kind="scale") == []
    first, second = (r.id for r in store.runs()[::-1])
    assert store.compare((np.int64(first), second)).run_ids == [first, second]


def test_store_says_its_own_argument_name_for_a_limit_out_of_range(db: str) -> None:
    """It named the CLI's flag: "--limit must be at least 1, got 0"."""
    with pytest.raises(dlperf.UserError, match=r"^limit must be at least 1, got 0"):
        dlperf.Store(db).runs(limit=0)


# --- F5: fit_curve and predict_step --------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"upto": "0.5"}, "upto"),
        ({"upto": True}, "upto"),
        ({"upto_step": "30"}, "upto_step"),
        ({"form": ["optimus"]}, "form"),
        ({"form": None}, "form"),
    ],
    ids=["upto text", "upto bool", "upto_step text", "form list", "form None"],
)
def test_fit_curve_refuses_options_of_the_wrong_type(options: dict[str, Any], said: str) -> None:
    _refused(lambda: dlperf.fit_curve(STEPS, LOSS, **options), said)


@pytest.fixture(scope="module")
def fitted() -> dlperf.api.CurveResult:
    return dlperf.fit_curve(STEPS, LOSS)


@pytest.mark.parametrize("target", ["0.3", None, True], ids=["text", "None", "bool"])
def test_predict_step_refuses_a_target_that_is_not_a_number(
    fitted: dlperf.api.CurveResult, target: Any
) -> None:
    _refused(lambda: fitted.predict_step(target), "target")


def test_predict_step_still_takes_numpy_numbers(fitted: dlperf.api.CurveResult) -> None:
    assert fitted.predict_step(np.float32(0.3))["step"] == fitted.predict_step(0.3)["step"]


# --- F6: steps that do not increase --------------------------------------------------------


@pytest.mark.parametrize(
    "steps",
    [np.ones(60), np.arange(60, 0, -1), np.r_[1:31, 30:60]],
    ids=["all the same", "going back", "one repeated"],
)
def test_fit_curve_refuses_steps_that_do_not_increase(
    steps: np.ndarray, capfd: pytest.CaptureFixture[str]
) -> None:
    """All the same failed in LAPACK (LinAlgError, its complaints on stderr); going back
    was fitted, to nonsense."""
    _refused(lambda: dlperf.fit_curve(steps, LOSS), "x (the steps) must increase from row to row")
    assert capfd.readouterr().err == ""


def test_the_csv_reader_refuses_them_with_the_same_check(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    csv = tmp_path / "curve.csv"
    rows = zip(STEPS[::-1], LOSS, strict=True)
    csv.write_text("step,metric\n" + "".join(f"{s},{v}\n" for s, v in rows))
    result = cli("converge", "fit", "--csv", str(csv), "--x", "step", "--y", "metric")
    assert result.code == 2, result
    assert "column 'step' must increase from row to row" in result.err


# --- F7: ensemble --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def post() -> ensemble.Posterior:
    return ensemble.fit(K, ERROR)


ENSEMBLE_CALLS: dict[str, tuple[Callable[[ensemble.Posterior], Any], str]] = {
    "unknown metric": (lambda p: ensemble.predict(p, 0.9, "acc"), "unknown metric 'acc'"),
    "fit on text": (lambda _: ensemble.fit("abc", ERROR), "steps"),
    "fit, lengths differ": (lambda _: ensemble.fit(K[:5], ERROR), "same length"),
    "fit on a table": (lambda _: ensemble.fit(np.ones((6, 6)), np.ones((6, 6))), "steps"),
    "target text": (lambda p: ensemble.predict(p, "0.9", "accuracy"), "target"),
    "measured, lengths differ": (
        lambda p: ensemble.predict(p, 0.9, "accuracy", K[:5], 1 - ERROR),
        "same length",
    ),
    "band on text": (lambda p: ensemble.band(p, "abc"), "steps"),
    "predict on None": (lambda _: ensemble.predict(None, 0.9, "accuracy"), "ensemble.fit"),  # type: ignore[arg-type]
    "band on None": (lambda _: ensemble.band(None, K), "ensemble.fit"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("name", list(ENSEMBLE_CALLS))
def test_ensemble_refuses_what_it_cannot_use(post: ensemble.Posterior, name: str) -> None:
    """An unknown metric was read as loss: 'acc' 0.9 answered step 1, 'accuracy' 34."""
    call, said = ENSEMBLE_CALLS[name]
    _refused(lambda: call(post), said)


def test_ensemble_still_answers_as_docs_api_shows(post: ensemble.Posterior) -> None:
    p = ensemble.predict(post, 0.9, "accuracy")
    assert p.verdict == "answer" and p.predicted_step is not None and p.predicted_step > 30
    lo, median, hi = ensemble.band(post, np.arange(1, 101))
    assert lo.shape == median.shape == hi.shape == (100,)
