"""The fourteenth break-it round, the Python API (issue 41: every mistake one line), on SQLite and
PostgreSQL alike; each case seen failing before its fix.

C2: `log(1, loss=10**400)` raised a raw OverflowError (float() of an int too big for a float)
    and failed the run; a config holding a whole number of more digits than Python writes as
    text (10**5000) a raw ValueError from json.dumps.
C3: `TrackedRun.phase(name)` checked nothing: a list raised `unhashable type` from the finally,
    after the body ran; 5, None and ('a', 1) were stored as phases "5", "None", "('a', 1)";
    a name with NUL or of 5,000 characters was kept though `log` refuses both for its keys.
C4: `log(1, **{'': 1.0})` stored a metric named `train/`; `phase('')` a phase named ''.
C8: `Store.metric_keys(99)` returned [] for a run not stored, where `run` and `metrics` say
    "no run 99"; `Store.runs(where='train.lr=0.1')` walked the string one character at a
    time ("--where 't': expected KEY=VALUE").
"""

from __future__ import annotations

import fractions
import reprlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dlperf
from dlperf.errors import UserError
from dlperf.parsing import as_given
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_10_store import a_run

Cli = Callable[..., CliResult]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bi14a")


def _refused(match: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """The one line of the UserError `call(*args, **kwargs)` raises, matched against `match`."""
    with pytest.raises(UserError, match=match) as caught:
        call(*args, **kwargs)
    assert "\n" not in str(caught.value)
    return caught.value.message


# --- C2: numbers too big for a float -------------------------------------------------------------


def test_a_metric_too_big_for_a_float_is_one_line_and_the_run_goes_on(store_url: str) -> None:
    with dlperf.track("big", store=store_url) as run:
        run.log(0, loss=0.5)
        for value in (10**400, -(10**400), fractions.Fraction(10**400, 3)):
            said = _refused(r"^metric train/loss must be a", run.log, 1, loss=value, acc=0.25)
            assert said.endswith(f"got {type(value).__name__} {as_given(value)}"), said
        run.log(2, loss=0.25)
    store = dlperf.Store(store_url)
    assert store.run(run.id).status == "finished"
    # nothing of the refused call is kept, its good metric neither
    assert store.metrics(run.id, "loss") == [(0, 0.5), (2, 0.25)]
    assert store.metric_keys(run.id) == ["train/loss"]


def test_a_metric_too_big_for_a_float_left_unhandled_fails_the_run_with_that_line(
    store_url: str,
) -> None:
    with (
        pytest.raises(UserError, match=r"^metric train/loss must be a number"),
        dlperf.track("big", store=store_url) as run,
    ):
        run.log(1, loss=10**400)
    stored = dlperf.Store(store_url).run(run.id)
    assert stored.status == "failed"
    assert stored.error is not None and "OverflowError" not in stored.error


def test_a_step_too_big_for_the_store_is_one_line(store_url: str) -> None:
    with dlperf.track("step", store=store_url) as run:
        _refused(r"^a step is between", run.log, 10**400, loss=1.0)
    assert dlperf.Store(store_url).run(run.id).status == "finished"


def test_a_config_holding_a_big_whole_number_keeps_it_exactly(store_url: str) -> None:
    with dlperf.track("cfg", config={"x": 10**400, "y": [-(10**400)]}, store=store_url) as run:
        run.log(1, loss=1.0)
    config = dlperf.Store(store_url).run(run.id).config
    assert config == {"x": 10**400, "y": [-(10**400)]}


def test_a_config_number_too_long_to_write_is_one_line_and_nothing_stored(
    store_url: str,
) -> None:
    # before: json.dumps's ValueError "Exceeds the limit (4300 digits) for integer string
    # conversion"
    ran = []
    for config, where in (
        ({"x": 10**5000}, "config['x']"),
        ({"a": {"b": [1, -(10**5000)]}}, "config['a']['b'][1]"),
    ):
        with (
            pytest.raises(UserError, match="digits") as caught,
            dlperf.track("cfg", config=config, store=store_url),
        ):
            ran.append("the body")
        assert caught.value.message.startswith(where), caught.value.message
    assert ran == []
    assert dlperf.Store(store_url).runs() == []


# --- C3 and C4: phase names, metric keys ---------------------------------------------------------


def test_a_phase_name_that_is_not_text_is_refused_before_its_body_runs(
    store_url: str, cli: Cli
) -> None:
    ran = []

    def phase(name: Any) -> None:
        with run.phase(name):
            ran.append("the body")

    with dlperf.track("p", store=store_url) as run:
        for name in (5, None, ["a"], ("a", 1), b"forward"):
            said = _refused(r"^a phase name is text, got ", phase, name)
            assert said.startswith(f"a phase name is text, got {type(name).__name__} "), said
        with run.phase("forward"):
            pass
        run.log(1, loss=1.0)
    assert ran == []
    stored = dlperf.Store(store_url).run(run.id)
    assert stored.status == "finished"
    assert stored.summary is not None
    assert list(stored.summary["phases"]) == ["forward"]  # nothing kept as "5", "None", ...
    shown = cli("--db", store_url, "runs", "show", str(run.id))
    assert shown.code == 0, shown.err


def test_a_list_as_a_phase_name_left_unhandled_fails_the_run_with_one_line(
    store_url: str,
) -> None:
    # before: TypeError "unhashable type: 'list'" from the phase's finally, after its body
    ran = []
    with (
        pytest.raises(UserError, match=r"^a phase name is text, got list"),
        dlperf.track("p", store=store_url) as run,
        run.phase(["a"]),  # type: ignore[arg-type]
    ):
        ran.append("the body")
    assert ran == []
    assert dlperf.Store(store_url).run(run.id).status == "failed"


BAD_NAMES = {
    "": r"^a phase name is not empty",
    "a\x00b": r"^phase name 'a\\x00b' holds a NUL character",
    "p" * 5000: r"^phase name 'p{20}'\.\.\. is 5000 characters long; .* at most 94",
    "a\ud800": r"^phase name 'a\\ud800' is not UTF-8 text",
}


def test_a_phase_name_is_held_to_the_limits_of_a_metric_key(store_url: str) -> None:
    ran = []

    def phase(name: str) -> None:
        with run.phase(name):
            ran.append("the body")

    with dlperf.track("p", store=store_url) as run:
        for name, match in BAD_NAMES.items():
            _refused(match, phase, name)
            if name:  # log refuses the same key for the same reason
                as_key = match.replace("^phase name", "^metric key")
                _refused(as_key, run.log, 1, **{name: 1.0})
    assert ran == []
    stored = dlperf.Store(store_url).run(run.id)
    assert stored.status == "finished"
    assert stored.summary is not None and stored.summary["phases"] is None


def test_a_phase_name_as_long_as_a_metric_key_may_be_is_kept(store_url: str) -> None:
    longest = "p" * 94  # a metric key without a slash: 100 characters with log's train/
    with dlperf.track("p", store=store_url) as run:
        with run.phase(longest):
            pass
        run.log(1, **{longest: 1.0})
        _refused("is 95 characters long", run.phase(longest + "p").__enter__)
    stored = dlperf.Store(store_url).run(run.id)
    assert stored.summary is not None and list(stored.summary["phases"]) == [longest]


def test_an_empty_metric_key_is_one_line_and_nothing_is_kept_as_train_slash(
    store_url: str,
) -> None:
    with dlperf.track("k", store=store_url) as run:
        run.log(0, loss=0.0)
        _refused(r"^a metric key is not empty", run.log, 1, loss=1.0, **{"": 1.0})
    store = dlperf.Store(store_url)
    assert store.run(run.id).status == "finished"
    assert store.metric_keys(run.id) == ["train/loss"]
    assert store.metrics(run.id, "loss") == [(0, 0.0)]


# --- C8: Store's reads ---------------------------------------------------------------------------


def test_metric_keys_of_a_run_not_stored_is_the_same_error_as_run(store_url: str) -> None:
    store = dlperf.Store(store_url)
    said = _refused("^no run 99", store.run, 99)
    assert _refused("^no run 99", store.metric_keys, 99) == said
    with dlperf.track("none logged", store=store_url) as run:
        pass
    assert store.metric_keys(run.id) == []  # a stored run without metrics: no error


def test_where_that_is_not_a_list_of_filters_is_one_line(store_url: str) -> None:
    # before: a str was walked one character at a time: "--where 't': expected KEY=VALUE";
    # bytes and a number in the list an AttributeError, a number a TypeError
    store = dlperf.Store(store_url)
    a_run(store_url)
    for where in ("train.lr=0.1", "", b"train.lr=0.1", ["train.lr=0.1", 5], 5):
        said = _refused(r"^where is a list of --where filters", store.runs, where=where)
        assert said.endswith(f", got {reprlib.repr(where)}"), said


def test_where_as_a_list_selects_as_runs_list_does(store_url: str) -> None:
    for lr in (0.1, 0.2):
        with dlperf.track("lr", config={"train": {"lr": lr}}, store=store_url) as run:
            run.log(1, loss=lr)
    store = dlperf.Store(store_url)
    assert [r.config for r in store.runs(where=["train.lr=0.1"])] == [{"train": {"lr": 0.1}}]
    assert [r.config for r in store.runs(where=("train.lr=0.2",))] == [{"train": {"lr": 0.2}}]
    assert len(store.runs(where=[])) == len(store.runs(where=None)) == 2
