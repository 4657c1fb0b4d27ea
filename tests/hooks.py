"""The test hooks (dlperf.engine.hooks), kept out of the library: a test turns one on in the
trainers it starts, in this process or in subprocesses, with `hook_env` or `install`.

- pause_at_step, DLPERF_TEST_PAUSE_AT_STEP="N:PATH": when global step N is done (its losses
  flushed as usual, its epoch not yet evaluated or checkpointed), write the file PATH
  atomically and wait there until a signal ends the process, so that a test can interrupt a
  run at an exact step however busy the machine is.
- first_step, DLPERF_TEST_FIRST_STEP=PREFIX: every trainer saves its first step's batch,
  loss and updated parameters to PREFIX.<trainer>.pt, so that a test can hold the launchers'
  steps against each other.
- signal_in_exec, DLPERF_TEST_SIGNAL_IN_EXEC="N:SIGNAL": when global step N is done, the
  process sends itself SIGNAL (TERM, INT) from code run by `exec` of a string, and the
  signal's KeyboardInterrupt lands there, as one does while a lazy import makes a dataclass:
  the moment CPython up to 3.13 takes for an unhandled interrupt (dlperf.stopping).
- signal_at_save, DLPERF_TEST_SIGNAL_AT_SAVE="N:SIGNAL": as the run's Nth checkpoint starts
  to be written (its epoch evaluated and logged), the process sends itself SIGNAL (TERM,
  KILL, ...), so that a test can stop a run in the window between an epoch's end and its
  checkpoint however busy the machine is.
- dump_grads, DLPERF_SCALE_DUMP_GRADS=PREFIX: each DDP rank saves its first batch and its
  trained parameters' gradients as the first step leaves them (all-reduced, unscaled,
  clipped) to PREFIX.w<world>.rank<r>.pt; the model trains with dropout off, so that one
  process can reproduce the step.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dlperf.engine.hooks import HOOKS_ENV, StepEnd
from dlperf.errors import UserError
from dlperf.paths import atomic_write

PAUSE_ENV = "DLPERF_TEST_PAUSE_AT_STEP"
SIGNAL_ENV = "DLPERF_TEST_SIGNAL_IN_EXEC"
SAVE_SIGNAL_ENV = "DLPERF_TEST_SIGNAL_AT_SAVE"
FIRST_STEP_ENV = "DLPERF_TEST_FIRST_STEP"
DUMP_GRADS_ENV = "DLPERF_SCALE_DUMP_GRADS"
ROOT = Path(__file__).resolve().parents[1]  # where `tests` imports from


def on_cpu(value: Any) -> Any:
    """A batch (a tensor, or detection's lists of images and target dicts) on the CPU."""
    if isinstance(value, list):
        return [on_cpu(v) for v in value]
    if isinstance(value, dict):
        return {k: on_cpu(v) for k, v in value.items()}
    return value.cpu()


class PauseAt:
    def __init__(self) -> None:
        value = os.environ.get(PAUSE_ENV, "")
        step, _, marker = value.partition(":")
        if value and not (step.isdigit() and marker):
            raise UserError(f"{PAUSE_ENV} must be STEP:PATH, not {value!r}")
        self.step = int(step) if value else None
        self.marker = Path(marker)

    def start(self, trainer: str, model: nn.Module) -> None:
        pass

    def step_end(self, event: StepEnd) -> None:
        if event.step != self.step:
            return
        atomic_write(self.marker, f"{event.step}\n")  # the test sees the whole file or none
        while True:  # left only by a signal that ends the process (SIGINT, SIGTERM, SIGKILL)
            time.sleep(60)


class SignalInExec:
    # The handler runs at the first bytecode after the signal arrives: inside the loop, which
    # it ends. An ignored signal (nohup's SIGHUP) has no handler to end it: no loop then, where
    # 10**8 empty turns cost 5 CPU-s.
    CODE = "os.kill(os.getpid(), sig)\nfor _ in range(turns):\n    pass\n"

    def __init__(self) -> None:
        step, _, name = os.environ[SIGNAL_ENV].partition(":")
        self.step, self.signal = int(step), signal.Signals[f"SIG{name}"]

    def start(self, trainer: str, model: nn.Module) -> None:
        pass

    def step_end(self, event: StepEnd) -> None:
        if event.step == self.step:
            turns = 0 if signal.getsignal(self.signal) == signal.SIG_IGN else 10**8
            exec(self.CODE, {"os": os, "sig": self.signal, "turns": turns})


class SignalAtSave:
    def __init__(self) -> None:
        count, _, name = os.environ[SAVE_SIGNAL_ENV].partition(":")
        self.count, self.signal = int(count), signal.Signals[f"SIG{name}"]

    def start(self, trainer: str, model: nn.Module) -> None:
        from dlperf.engine import checkpoint

        save, saves = checkpoint.save, [0]

        def signalled(slot: Any, state: dict[str, Any]) -> None:
            saves[0] += 1
            if saves[0] == self.count:
                os.kill(os.getpid(), self.signal)
            save(slot, state)

        checkpoint.save = signalled  # type: ignore[assignment]  # this process only

    def step_end(self, event: StepEnd) -> None:
        pass


class FirstStep:
    def __init__(self) -> None:
        self.prefix = os.environ[FIRST_STEP_ENV]

    def start(self, trainer: str, model: nn.Module) -> None:
        pass

    def step_end(self, event: StepEnd) -> None:
        if event.step != 1 or event.rank != 0:
            return
        params = {name: p.detach().cpu().clone() for name, p in event.model.named_parameters()}
        loss = event.stepped.loss.float().cpu()
        state = {"x": on_cpu(event.x), "y": on_cpu(event.y), "loss": loss, "params": params}
        torch.save(state, f"{self.prefix}.{event.trainer}.pt")


class DumpGrads:
    def __init__(self) -> None:
        self.prefix = os.environ[DUMP_GRADS_ENV]

    def start(self, trainer: str, model: nn.Module) -> None:
        if trainer == "ddp":
            model.eval()  # dropout off: one process can then reproduce the first step

    def step_end(self, event: StepEnd) -> None:
        if event.trainer != "ddp" or event.step != 1:
            return
        trained = [p for p in event.model.parameters() if p.requires_grad]
        grads = [p.grad.detach().cpu() for p in trained if p.grad is not None]
        path = f"{self.prefix}.w{event.world}.rank{event.rank}.pt"
        torch.save({"x": event.x.cpu(), "y": event.y.cpu(), "grads": grads}, path)


pause_at_step, first_step, dump_grads, signal_in_exec = PauseAt, FirstStep, DumpGrads, SignalInExec
signal_at_save = SignalAtSave
VARIABLES = {
    "pause_at_step": PAUSE_ENV,
    "first_step": FIRST_STEP_ENV,
    "dump_grads": DUMP_GRADS_ENV,
    "signal_in_exec": SIGNAL_ENV,
    "signal_at_save": SAVE_SIGNAL_ENV,
}


def hook_env(name: str, value: str) -> dict[str, str]:
    """The environment that turns hook `name` on with `value` in trainers started with it."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {HOOKS_ENV: f"tests.hooks:{name}", VARIABLES[name]: value, "PYTHONPATH": path}


def install(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    """Turn hook `name` on with `value` for this test and the processes it starts."""
    for key, text in hook_env(name, value).items():
        monkeypatch.setenv(key, text)
