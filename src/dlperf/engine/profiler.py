"""A profiled window of a run: torch.profiler records a few steps after the warm-up and the
trace is written as gzipped Chrome trace JSON, the format Perfetto, chrome://tracing and
TensorBoard's PyTorch profiler plugin open.

The window starts when the run's warm-up ends (compilation and cache filling stay out of it)
and the trainer's clock counts its steps as warm-up too, so the profiler's overhead never
reaches throughput or phase timings. Each training phase is labelled in the trace by a
`dlperf::<phase>` range (engine.timers.PhaseLabels, driven by the phase timer's marks), so
that a reader of the trace can attribute every operator to data, h2d, forward, backward or
optimizer. A window that crosses the end of an epoch holds that epoch's evaluation and
checkpoint inside a profiler step: they are labelled `dlperf::epoch_end`.

The trace file is named `<worker>.pt.trace.json.gz` (`trace_name`): TensorBoard's plugin
finds a run's workers by that pattern in a log directory.
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from dlperf.config import ProfileConfig, RunConfig
from dlperf.engine.hooks import StepEnd
from dlperf.engine.timers import PhaseLabels
from dlperf.engine.train_loop import Batch, Component
from dlperf.errors import UserError
from dlperf.paths import part_name, replaced, writing
from dlperf.system import profiler_quiet


def trace_name(worker: str) -> str:
    return f"{worker}.pt.trace.json.gz"


def check_fits(run: RunConfig, steps: int) -> None:
    """The window, and one timed step after it, must fit in the `steps` this process trains."""
    if not run.profile.enabled:
        return
    last = run.warmup_steps + run.profile.steps
    if steps <= last:
        raise UserError(
            f"run.profile records steps {run.warmup_steps + 1}..{last} and throughput is timed "
            f"after them, but this run trains {steps} steps",
            "lower run.warmup_steps or run.profile.active, or train longer",
        )


def _whole(raw: Path) -> bool:
    """Whether Kineto wrote its whole trace to `raw`: a JSON object, whose last byte (trailing
    white space aside) closes it; a refused write leaves the file empty or cut."""
    if not raw.is_file() or raw.stat().st_size == 0:
        return False
    with raw.open("rb") as f:
        f.seek(max(0, raw.stat().st_size - 64))
        return f.read().rstrip().endswith(b"}")


def _unwritten(folder: Path) -> OSError:
    """Why Kineto wrote no whole trace into `folder`, as far as can be told: its disk is full
    (said as any full disk is), or something refused the write unsaid (a file size limit)."""
    if os.statvfs(folder).f_bavail == 0:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    why = "a full disk, or a file size limit: ulimit -f"
    return OSError(errno.EIO, f"torch's profiler could not write it ({why})")


class ProfileWindow(Component):
    """Records `cfg.warmup + cfg.active` steps of this process, starting after `start_after`
    steps, into `path`. A component of the training loop (or call `after_step()` once per
    training step); `close()` when training ends (or stops); `labels` goes to the phase
    timer, and labels phases inside the window; `on_written(path)` is called once the trace
    is written (a run stores it as an artifact)."""

    def __init__(
        self, cfg: ProfileConfig, device: torch.device, start_after: int, path: Path
    ) -> None:
        self.cfg, self.path = cfg, path
        self.start_after, self.steps = start_after, 0
        self.labels = PhaseLabels()
        self.written = False
        self.on_written: Callable[[Path], None] = lambda _: None
        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self._profiler = profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=cfg.warmup, active=cfg.active, repeat=1),
            on_trace_ready=self._write,
            record_shapes=cfg.record_shapes,
            profile_memory=cfg.profile_memory,
            with_stack=cfg.with_stack,
        )
        self._running = False
        if cfg.enabled and start_after == 0:
            self._start()

    def on_epoch_start(self, epoch: int, batches: Iterable[Batch]) -> None:
        self.labels.begin()

    def on_step_end(self, done: StepEnd) -> None:
        if self.after_step():
            self.on_written(self.path)

    def on_epoch_end(self, epoch: int) -> None:
        # Evaluation and the checkpoint fall in the next ProfilerStep range: labelled, they
        # can be told from the training step's phases (dlperf.traces leaves them out).
        self.labels.end_epoch()

    def after_step(self) -> bool:
        """One training step is done (its phases marked); True when the trace has just been
        written."""
        if not self.cfg.enabled or self.written:
            return False
        self.steps += 1
        if self._running:
            self.labels.close()
            with profiler_quiet():  # the schedule stops it, and calls _write, at its end
                self._profiler.step()
            if self.written:
                self._stop()
                return True
            self.labels.begin()
        elif self.steps == self.start_after:
            self._start()
        return False

    def close(self) -> None:
        """Stop the profiler if the run ended inside the window (nothing is written then)."""
        if self._running:
            self._stop()

    def _start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with profiler_quiet():
            self._profiler.__enter__()  # type: ignore[no-untyped-call]
        self._running = True
        self.labels.active = True
        self.labels.begin()

    def _stop(self) -> None:
        self.labels.close()
        self.labels.active = False
        self._running = False
        with profiler_quiet():
            self._profiler.__exit__(None, None, None)  # type: ignore[no-untyped-call]

    def _write(self, prof: profile) -> None:
        # Beside its name and renamed when whole: torch gzipped straight onto the name, and a
        # full disk left a cut-off trace there. A refused write names no file: the one line
        # names the trace.
        with writing(self.path), replaced(self.path) as part:
            # The raw JSON beside it too (not in TMPDIR, whose disk a line would not name; not
            # named .gz, which torch would gzip itself), a part a killed writer's successor
            # sweeps away (paths.sweep_parts)
            raw = part_name(self.path.with_suffix(".json"))
            try:
                with profiler_quiet():  # its "Failed to write to log file!": told below instead
                    prof.export_chrome_trace(str(raw))
                # Kineto only logs a write it could not make (a file size limit, a full disk)
                # and leaves its file empty or cut; torch then gzipped the empty file into
                # place, a run stored finished with a trace that reads as nothing.
                if not _whole(raw):
                    raise _unwritten(raw.parent)
                with raw.open("rb") as source, gzip.open(part, "wb") as target:
                    shutil.copyfileobj(source, target)
            finally:  # Kineto writes NAME.tmp, renamed when whole
                for left in (raw, raw.with_name(raw.name + ".tmp")):
                    left.unlink(missing_ok=True)
        self.written = True

    def __enter__(self) -> ProfileWindow:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
