"""dlperf.distributed.crash: DLPERF_SCALE_CRASH parsed for one rank (RANK:STEP, with :kill
for a SIGKILL), refused when malformed, and the crash made at the named step only. The
SIGKILL is taken by a fake os.kill: this process must live."""

from __future__ import annotations

import os
import signal

import pytest

from dlperf.distributed import crash
from dlperf.distributed.crash import CRASH_ENV, Crash


def test_unset_or_empty_never_crashes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CRASH_ENV, raising=False)
    assert Crash.from_env(0) == Crash(None, False)
    monkeypatch.setenv(CRASH_ENV, "")
    assert Crash.from_env(0) == Crash()
    for step in range(5):
        Crash.from_env(0).at(step)


def test_the_named_rank_crashes_at_its_step_and_others_never(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CRASH_ENV, "1:12")
    assert Crash.from_env(1) == Crash(12, False)
    assert Crash.from_env(0) == Crash()
    assert Crash.from_env(11) == Crash()  # "1" is not a prefix match of 11
    monkeypatch.setenv(CRASH_ENV, "0:3:kill")
    assert Crash.from_env(0) == Crash(3, True)


@pytest.mark.parametrize("value", ["1", "a:2", "1:2:term", " 1:2", "1:-2", "1:2:kill:x"])
def test_a_malformed_value_names_the_variable_and_the_format(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(CRASH_ENV, value)
    with pytest.raises(ValueError) as e:
        Crash.from_env(0)
    assert str(e.value) == f"{CRASH_ENV}={value!r}: expected RANK:STEP or RANK:STEP:kill"


def test_the_crash_raises_at_its_step_only() -> None:
    hook = Crash(3)
    hook.at(2)
    hook.at(4)
    with pytest.raises(RuntimeError, match=r"injected crash at step 3 \(DLPERF_SCALE_CRASH\)"):
        hook.at(3)


def test_the_kill_crash_sigkills_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))

    monkeypatch.setattr(crash.os, "kill", kill)
    Crash(2, kill=True).at(1)
    assert sent == []
    with pytest.raises(RuntimeError):  # the fake kill returns; the real one never does
        Crash(2, kill=True).at(2)
    assert sent == [(os.getpid(), signal.SIGKILL)]
