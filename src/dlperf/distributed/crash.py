"""The scale workers' crash hook, for the fault tests: DLPERF_SCALE_CRASH="RANK:STEP" makes
rank RANK raise at its STEP-th training step of the point (counted from 1, warm-up included,
the compute-only steps not counted); "RANK:STEP:kill" makes it SIGKILL itself there instead.
The torch, Horovod and TensorFlow workers all read it here. No torch here: the TensorFlow
worker imports this module."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass

CRASH_ENV = "DLPERF_SCALE_CRASH"
_FORMAT = re.compile(r"(\d+):(\d+)(:kill)?")


@dataclass(frozen=True)
class Crash:
    """Where this rank crashes: at `step` (None: never), by SIGKILL or by an exception."""

    step: int | None = None
    kill: bool = False

    @classmethod
    def from_env(cls, rank: int) -> Crash:
        value = os.environ.get(CRASH_ENV, "")
        if not value:
            return cls()
        match = _FORMAT.fullmatch(value)
        if match is None:
            raise ValueError(f"{CRASH_ENV}={value!r}: expected RANK:STEP or RANK:STEP:kill")
        if int(match.group(1)) != rank:
            return cls()
        return cls(int(match.group(2)), match.group(3) is not None)

    def at(self, step: int) -> None:
        """Crash if `step` is the one named."""
        if step != self.step:
            return
        if self.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"injected crash at step {step} ({CRASH_ENV})")
