"""dlperf.engine.hooks: the hooks a trainer calls, loaded from DLPERF_HOOKS as
module:factory callables, called in order, and the loop-component face they show."""

from __future__ import annotations

from typing import Any

import pytest

from dlperf.engine.hooks import HOOKS_ENV, Hooks, StepEnd
from dlperf.errors import UserError

CALLS: list[str] = []


class Named:
    """A hook that writes each call it gets into CALLS."""

    def __init__(self, name: str) -> None:
        self.name = name

    def start(self, trainer: str, model: Any) -> None:
        CALLS.append(f"{self.name} start {trainer} {model}")

    def step_end(self, event: StepEnd) -> None:
        CALLS.append(f"{self.name} step {event.step}")


def first() -> Named:
    return Named("first")


def second() -> Named:
    return Named("second")


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    CALLS.clear()


def event(step: int) -> StepEnd:
    return StepEnd("run", step, x=None, y=None, stepped=None, model=None)


def test_no_hooks_when_the_variable_is_unset_or_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HOOKS_ENV, raising=False)
    assert Hooks.from_env().hooks == []
    monkeypatch.setenv(HOOKS_ENV, ",,")
    assert Hooks.from_env().hooks == []


def test_each_named_factory_is_called_once_and_the_hooks_run_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(HOOKS_ENV, f"{__name__}:second, {__name__}:first")
    hooks = Hooks.from_env()
    assert [h.name for h in hooks.hooks] == ["second", "first"]  # type: ignore[attr-defined]
    hooks.start("ddp", "M")
    hooks.step_end(event(3))
    assert CALLS == ["second start ddp M", "first start ddp M", "second step 3", "first step 3"]


@pytest.mark.parametrize("spec", ["no_colon_here", ":factory", "module:"])
def test_a_spec_without_module_and_factory_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    monkeypatch.setenv(HOOKS_ENV, spec)
    with pytest.raises(UserError, match="DLPERF_HOOKS names module:factory callables") as e:
        Hooks.from_env()
    assert repr(spec) in str(e.value)


def test_as_a_loop_component_only_the_step_end_reaches_the_hooks() -> None:
    hooks = Hooks([first()])
    hooks.on_epoch_start(1, [])
    hooks.on_step_end(event(7))
    hooks.on_epoch_end(1)
    assert CALLS == ["first step 7"]


def test_a_step_end_defaults_to_rank_0_of_one() -> None:
    done = event(1)
    assert (done.rank, done.world) == (0, 1)
    with pytest.raises(AttributeError):
        done.step = 2  # type: ignore[misc]  # frozen: a hook cannot change what others see


@pytest.mark.parametrize(
    ("spec", "wrong"),
    [
        ("dlperf_no_such_module:f", "no module named 'dlperf_no_such_module'"),
        (f"{__name__}:no_such_factory", f"module {__name__!r} has no attribute 'no_such_factory'"),
    ],
)
def test_a_spec_naming_a_missing_module_or_factory_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, spec: str, wrong: str
) -> None:
    monkeypatch.setenv(HOOKS_ENV, f"{__name__}:first,{spec}")
    with pytest.raises(UserError) as e:
        Hooks.from_env()
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"{HOOKS_ENV} entry {spec!r}: ")
    assert wrong in message
