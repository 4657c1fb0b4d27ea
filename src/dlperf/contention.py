"""How much other work took the CPUs from a timed window, measured rather than inferred.

A busy host does not only slow a measurement, it can bend a comparison: two OpenMP threads
sharing one free core wait on each other at every parallel region, so a 2-thread point slows
50x while the 1-thread points beside it barely move, and a study reports a "41x speedup".
Wall time against CPU time cannot see it (spinning threads burn CPU while they wait), so
the kernel's own figures are read instead:

- per-thread run delay, `/proc/<pid>/task/*/schedstat` (Linux's schedstats: nanoseconds on
  a CPU, nanoseconds runnable but waiting on a run queue): `cpu_wait_share` is the share of
  the window's runnable thread-time spent waiting, summed over the process's threads;
- involuntary context switches, from getrusage (a thread taken off its CPU);
- the host's CPU pressure, `/proc/pressure/cpu` (PSI "some": the share of the window in
  which at least one task waited for a CPU), where the kernel has it;
- the CPU other processes took: the host's busy time on the usable CPUs (`/proc/stat`) less
  that of the measured process's family (itself and its descendants, or the roots given:
  a scale worker's are its launcher's, so that its sibling workers count as its own), as a
  share of the usable cores (`others_share`). Both are kept in clock ticks (10 ms at
  100 Hz), so over a window too short to resolve a tenth of a core (a few dozen
  milliseconds read 0% or 100% of a core by chance) the share is left unmeasured
  (`others_too_short`), and over a window of several stretches it is read once, from the
  first's start to the last's end.

A window is contended when its threads waited 10% or more of their runnable time and, where
it can be measured, other processes took 10% or more of the cores: two workers and their
communication threads sharing a 2-core host wait on each other (24% here, idle), but that is
what a single-host study measures, not a neighbour spoiling it.

Where schedstat is missing (macOS, a kernel without it) the share is estimated from the load
average against the usable cores (1 - cores/load: the share of its time an average
runnable task waits), and `source` says so.

A process stopped (SIGSTOP, Ctrl-Z's SIGTSTP) and continued is neither on nor waiting for a
CPU while stopped, so the figures above cannot see it, yet its wall time runs on: a run
stopped for 20 s counts them as training. While `watching_stops` is in force the process
counts its continuations (a SIGCONT handler: the exact sign that a stop happened), and a
`Stopwatch` over spans (a run's epochs) measures how long each was stopped. Two bounds,
each at least the stop, the smaller taken: the span's wall time less the busiest thread's
time on or waiting for a CPU (schedstat; a sleeping thread counts as stopped, so a span that
saw no continuation is never measured), and the time from the last `beat()` (a training
step's end) to the continuation (which counts the work since as stopped). A span stopped for
`STOPPED` of its wall time or more marks the measurement (`judge`), naming the span.

No torch here: every worker (TensorFlow's too) and the CLI import it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import statistics
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from types import FrameType
from typing import Any, Literal

# A window whose threads waited for a CPU this share of their runnable time or more is
# contended: its numbers describe the neighbours as much as the work. An idle 2-core host
# measures under 1%; one busy process on one of its cores, 30-60% for two threads.
CONTENDED = 0.10
# ... and where other processes took this share of the usable cores or more over it.
OTHERS = 0.10
# Repetitions whose interquartile range exceeds this share of their median are too spread to
# rank (torch.utils.benchmark's Measurement warns at the same 10%).
WIDE = 0.10
# A span stopped (SIGSTOP, Ctrl-Z) for this share of its wall time or more is marked: a
# continuation (SIGCONT) sent to a process that was not stopped measures its main thread's
# sleep, about nothing on a CPU.
STOPPED = 0.01

PROC = Path("/proc")


def usable_cpus() -> set[int]:
    """The CPUs this process may run on (affinity masks, container cpusets)."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return set(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class Reading:
    """One snapshot of a process: per-thread (ns on a CPU, ns waiting for one), its
    involuntary context switches, the host's PSI total (µs) and load average."""

    at: float
    threads: dict[int, tuple[int, int]] = field(repr=False)
    involuntary_switches: int
    pressure_us: int | None
    load1: float
    host_busy_s: float | None = None  # busy time of the usable CPUs, summed (/proc/stat)
    family_cpu_s: float | None = None  # CPU time of the measured process's family
    family_processes: int = 1  # how many processes that time was read from


@dataclass(frozen=True)
class Contention:
    """What a window's threads lost to other work. `cpu_wait_share`: runnable thread-time
    spent waiting for a CPU (0 = never waited). `host_pressure`: the share of the window
    in which some task on the host waited (None without PSI)."""

    wall_s: float
    cpu_wait_share: float
    source: Literal["schedstat", "loadavg"]
    run_s: float | None = None
    wait_s: float | None = None
    involuntary_switches: int | None = None
    host_pressure: float | None = None
    others_share: float | None = None  # of the usable cores, taken by other processes
    others_too_short: bool = False  # the window was too short to measure others_share
    # continuations (SIGCONT) after a stop (SIGSTOP, Ctrl-Z): a `Stopwatch`'s; None where none
    # counts them (serve bench's windows: neither it nor the server watches its stops)
    stops: int | None = 0
    stopped_s: float | None = None  # about how long it was stopped (None: not measured)
    stopped_in: tuple[str, ...] = ()  # the spans (epochs) stopped for STOPPED or more

    @property
    def contended(self) -> bool:
        others = self.others_share is None or self.others_share >= OTHERS
        return self.cpu_wait_share >= CONTENDED and others

    def stop_note(self) -> str:
        """One clause for a mark: how often and how long the process was stopped, and where."""
        times = "once" if self.stops == 1 else f"{self.stops} times"
        how_long = (
            f"for about {self.stopped_s:.1f} s in"
            if self.stopped_s is not None
            else "for a time schedstat could not measure, in"
        )
        return (
            f"the process was stopped (SIGSTOP or Ctrl-Z) and continued {times}, {how_long} "
            f"{', '.join(self.stopped_in)}: its times count that as training"
        )

    def note(self) -> str:
        """One clause for a mark: how much the window waited, and on what evidence."""
        how = "per-thread run delay" if self.source == "schedstat" else "load average"
        text = f"its threads waited for a CPU {self.cpu_wait_share:.0%} of their runnable time"
        if self.others_share is not None:
            text += f", other processes took {self.others_share:.0%} of the cores"
        elif self.others_too_short:
            text += (
                f", {self.wall_s:.2f} s too short to tell other processes' CPU time from its own"
            )
        if self.host_pressure is not None:
            text += f", host CPU pressure {self.host_pressure:.0%}"
        return f"{text} ({how})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def stored(cls, data: dict[str, Any]) -> Contention:
        """A window as another version stored it: the fields this one knows."""
        known = {f.name for f in fields(cls)}
        window = cls(**{k: v for k, v in data.items() if k in known})
        return replace(window, stopped_in=tuple(window.stopped_in))  # a list, from JSON

    @classmethod
    def worst(cls, windows: list[Contention]) -> Contention | None:
        """The most contended of several windows (a point's ranks): one slowed rank slows the
        step of all."""
        return max(windows, key=lambda c: c.cpu_wait_share, default=None)


def _threads(pid: int) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            on_cpu, waiting, _ = (task / "schedstat").read_text().split()
        except (OSError, ValueError):  # the thread ended, or schedstats are off
            continue
        out[int(task.name)] = (int(on_cpu), int(waiting))
    return out


def _pressure() -> int | None:
    try:
        some = (PROC / "pressure" / "cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return int(some.rsplit("total=", 1)[1])


TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _cpu_ticks() -> dict[int, tuple[int, int]]:
    """Per usable CPU, its (idle, total) clock ticks since boot from /proc/stat; idle counts
    iowait too. Raises OSError where there is no /proc/stat."""
    cpus, out = usable_cpus(), {}
    for line in (PROC / "stat").read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
            out[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks))
    return out


def _host_busy() -> float | None:
    """Seconds the usable CPUs spent busy since boot (all but idle and iowait)."""
    try:
        ticks = _cpu_ticks()
    except OSError:
        return None
    return sum(total - idle for idle, total in ticks.values()) * TICK_S


def _family_cpu(roots: Collection[int]) -> tuple[float, int] | None:
    """CPU seconds (user + system) of the processes `roots` and their descendants, and how
    many processes they are."""
    parent, cpu = {}, {}
    try:
        entries = list(PROC.glob("[0-9]*"))
    except OSError:
        return None
    for entry in entries:
        try:
            text = (entry / "stat").read_text()
        except OSError:  # gone, or not ours to read
            continue
        rest = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and brackets
        pid = int(entry.name)
        parent[pid], cpu[pid] = int(rest[1]), (int(rest[11]) + int(rest[12])) * TICK_S
    if not any(root in cpu for root in roots):
        return None
    total, members, family = 0.0, 0, set(roots)
    for pid in sorted(cpu):  # a child's pid may be lower than its parent's: walk up instead
        ancestor, seen = pid, 0
        while ancestor not in family and ancestor in parent and seen < 64:
            ancestor, seen = parent[ancestor], seen + 1
        if ancestor in family:
            total, members = total + cpu[pid], members + 1
    return total, members


def read(pid: int | None = None, family: Collection[int] | None = None) -> Reading:
    """Snapshot `pid` (default: this process; involuntary switches are this process's) and
    the CPU time of `family` (default: `pid`), roots of the processes counted as its own."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    pid = pid or os.getpid()
    family_cpu = _family_cpu(family or {pid})
    return Reading(
        at=time.perf_counter(),
        threads=_threads(pid),
        involuntary_switches=usage.ru_nivcsw,
        pressure_us=_pressure(),
        load1=os.getloadavg()[0],
        host_busy_s=_host_busy(),
        family_cpu_s=family_cpu[0] if family_cpu else None,
        family_processes=family_cpu[1] if family_cpu else 1,
    )


def between(start: Reading, end: Reading) -> Contention:
    """The contention of the window from `start` to `end`. A thread born in the window
    counts from its birth; one that ended in it is lost (its figures go with it)."""
    wall = max(end.at - start.at, 1e-9)
    pressure = None
    if start.pressure_us is not None and end.pressure_us is not None:
        pressure = min(1.0, (end.pressure_us - start.pressure_us) / 1e6 / wall)
    switches = end.involuntary_switches - start.involuntary_switches
    others, too_short = _others_share(start, end, wall)
    on_cpu = waiting = 0
    for tid, (run_ns, wait_ns) in end.threads.items():
        run0, wait0 = start.threads.get(tid, (0, 0))
        on_cpu, waiting = on_cpu + run_ns - run0, waiting + wait_ns - wait0
    if on_cpu + waiting > 0:
        return Contention(
            wall_s=wall, cpu_wait_share=waiting / (on_cpu + waiting), source="schedstat",
            run_s=on_cpu / 1e9, wait_s=waiting / 1e9, involuntary_switches=switches,
            host_pressure=pressure, others_share=others, others_too_short=too_short,
        )  # fmt: skip
    load = max(start.load1, end.load1)
    share = max(0.0, 1 - len(usable_cpus()) / load) if load > 0 else 0.0
    return Contention(
        wall_s=wall, cpu_wait_share=share, source="loadavg", involuntary_switches=switches,
        host_pressure=pressure, others_share=others, others_too_short=too_short,
    )  # fmt: skip


def _others_share(start: Reading, end: Reading, wall: float) -> tuple[float | None, bool]:
    """The share of the usable cores other processes took from `start` to `end`, and
    whether the window was too short to tell. Each CPU's busy time and each family
    process's CPU time is cut to whole ticks at both ends: the difference can be off by a
    tick per CPU and per process, and that error must stay under half the OTHERS mark."""
    busy = (start.host_busy_s, end.host_busy_s, start.family_cpu_s, end.family_cpu_s)
    if None in busy:
        return None, False
    b0, b1, f0, f1 = (float(x or 0.0) for x in busy)
    cpus = len(usable_cpus())
    error = (cpus + max(start.family_processes, end.family_processes)) * TICK_S / (wall * cpus)
    if error > OTHERS / 2:
        return None, True
    return min(1.0, max(0.0, (b1 - b0) - (f1 - f0)) / (wall * cpus)), False


class Window:
    """Contention over spans of a process's life, summed: `start()` and `stop()` around each
    timed stretch (an epoch's steps after warm-up, a chunk of a point's steps), `result()`
    for the whole (None before any stretch ended). Other processes' share is read once over
    the whole, from the first stretch's start to the last one's end: a gap between
    stretches is the process's own work (evaluation, a compute-only copy's steps), and
    stretches too short to resolve the share alone resolve it together."""

    def __init__(self, pid: int | None = None, family: Collection[int] | None = None) -> None:
        self.pid, self.family = pid, family
        self._start: Reading | None = None
        self._spans: list[Contention] = []
        self._first: Reading | None = None
        self._last: Reading | None = None

    def start(self) -> None:
        self._start = read(self.pid, self.family)
        self._first = self._first or self._start

    def stop(self) -> Contention | None:
        """End the current stretch; its own contention (None when none was started)."""
        if self._start is None:
            return None
        self._last = read(self.pid, self.family)
        span, self._start = between(self._start, self._last), None
        self._spans.append(span)
        return span

    def result(self) -> Contention | None:
        whole = combine(self._spans)
        if whole is None or self._first is None or self._last is None:
            return None
        others, too_short = _others_share(self._first, self._last, self._last.at - self._first.at)
        return replace(whole, others_share=others, others_too_short=too_short)


def combine(spans: list[Contention]) -> Contention | None:
    """Several stretches as one: thread-times and switches summed, pressure weighted by
    wall time, the share recomputed from the sums (or wall-weighted where estimated).
    Other processes' share is left to `Window.result`, which reads it over the whole."""
    if not spans:
        return None
    wall = sum(s.wall_s for s in spans)
    pressures = [(s.host_pressure, s.wall_s) for s in spans if s.host_pressure is not None]
    pressure = sum(p * w for p, w in pressures) / wall if len(pressures) == len(spans) else None
    switches = [s.involuntary_switches for s in spans if s.involuntary_switches is not None]
    if all(s.source == "schedstat" for s in spans):
        run = sum(s.run_s or 0.0 for s in spans)
        wait = sum(s.wait_s or 0.0 for s in spans)
        share = wait / (run + wait) if run + wait > 0 else 0.0
        return Contention(wall, share, "schedstat", run, wait, sum(switches), pressure)
    share = sum(s.cpu_wait_share * s.wall_s for s in spans) / wall
    return Contention(wall, share, "loadavg", None, None, sum(switches), pressure)


def free_cores(interval_s: float = 0.1) -> float:
    """The usable cores other work left idle over `interval_s` (from /proc/stat's per-CPU
    idle time: 10 ticks a CPU at 100 Hz, a tenth of a core, enough to round to whole cores;
    elsewhere, usable cores minus the load average), never below 0."""
    try:
        before = _cpu_ticks()
        time.sleep(interval_s)
        after = _cpu_ticks()
    except OSError:
        return max(0.0, len(usable_cpus()) - os.getloadavg()[0])
    free = 0.0
    for cpu, (idle, total) in after.items():
        idle0, total0 = before.get(cpu, (idle, total))
        if total > total0:
            free += (idle - idle0) / (total - total0)
    return free


_SIGCONT: int | None = getattr(signal, "SIGCONT", None)  # none on Windows
_continued = 0  # continuations seen while `watching_stops` was in force
_gaps: list[float] = []  # for each, the seconds since the last beat (or continuation)
_beat = 0.0  # the last moment the process was known to run: perf_counter's
_watching = False  # whether it is: a nested one counts nothing more


def continued() -> int:
    """How many continuations (SIGCONT) this process has counted."""
    return _continued


def beat() -> None:
    """The process runs now (a training step ended): a stop began after this."""
    global _beat
    _beat = time.perf_counter()


@contextlib.contextmanager
def watching_stops() -> Iterator[None]:
    """Count this process's continuations (SIGCONT: `fg` after Ctrl-Z, `kill -CONT` after a
    SIGSTOP) while in force, calling the handler that was there too, and put it back after.
    Only the main thread takes signals in Python: elsewhere (the API run from a thread), and
    under a handler set outside Python, which could not be called, nothing is counted; nested,
    it leaves the outer one to count."""
    global _watching
    if _SIGCONT is None or _watching or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(_SIGCONT)
    if previous is None:  # set outside Python: it could be neither called nor put back
        yield
        return

    def on_continue(signum: int, frame: FrameType | None) -> None:
        global _continued, _beat
        now = time.perf_counter()
        _gaps.append(now - _beat)
        _continued, _beat = _continued + 1, now
        if callable(previous):
            previous(signum, frame)

    signal.signal(_SIGCONT, on_continue)
    signal.siginterrupt(_SIGCONT, False)  # restart a call it lands in: no EINTR in libraries
    _watching = True
    try:
        yield
    finally:
        _watching = False
        signal.signal(_SIGCONT, previous)


@dataclass(frozen=True)
class _Mark:
    at: float
    continued: int
    threads: dict[int, tuple[int, int]]


class Stopwatch:
    """How long a process was stopped within labelled spans (a run's epochs): `start()` and
    `stop(label)` around each; `result()` is (continuations, seconds stopped, the labels of
    the spans stopped for STOPPED of their wall time or more). Only spans with a continuation
    in them are measured (see the module's docstring)."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid
        self._start: _Mark | None = None
        self.stops = 0
        self.stopped_s: float | None = None
        self.stopped_in: list[str] = []

    def _mark(self) -> _Mark:
        return _Mark(time.perf_counter(), _continued, _threads(self.pid or os.getpid()))

    def start(self) -> None:
        beat()
        self._start = self._mark()

    def stop(self, label: str) -> None:
        """End the current span (nothing when none was started)."""
        start, self._start = self._start, None
        if start is None or _continued == start.continued:
            return  # no continuation in the span: nothing to measure, no schedstat to read
        end = self._mark()
        stops = end.continued - start.continued
        self.stops += stops
        wall = end.at - start.at
        active = [
            (run + wait) - sum(start.threads.get(tid, (0, 0)))
            for tid, (run, wait) in end.threads.items()
        ]
        if not active:  # no schedstat: stopped for a time it cannot tell
            self.stopped_in.append(label)
            return
        since_beat = sum(_gaps[start.continued : end.continued])
        seconds = max(0.0, min(wall - max(active) / 1e9, since_beat))
        self.stopped_s = (self.stopped_s or 0.0) + seconds
        if seconds >= STOPPED * wall:
            self.stopped_in.append(label)

    def result(self) -> tuple[int, float | None, tuple[str, ...]]:
        return self.stops, self.stopped_s, tuple(self.stopped_in)


@dataclass(frozen=True)
class Reliability:
    """Whether a number can be read as it stands, and if not, why: its window was contended,
    or its repetitions spread too wide to rank it. The mark every table, file, figure and
    report entry carries beside the number (`reliable`, `reliability_note`)."""

    reliable: bool
    note: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"reliable": self.reliable, "reliability_note": self.note}


def judge(window: Contention | None, repetitions: Sequence[float] = ()) -> Reliability:
    """Mark a measurement: `window` its contention (None: not measured) and the stops in it,
    `repetitions` the values its figure summarises (epochs' throughputs, a point's rounds);
    four or more are needed to judge a spread."""
    notes = []
    if window is not None and window.stopped_in:
        notes.append(f"stopped: {window.stop_note()}")
    if window is not None and window.contended:
        notes.append(f"contended: {window.note()}")
    if len(repetitions) >= 4:
        low, _, high = statistics.quantiles(repetitions, n=4)
        middle = statistics.median(repetitions)
        if middle > 0 and (high - low) / middle > WIDE:
            notes.append(
                f"too spread to rank: the interquartile range of {len(repetitions)} "
                f"repetitions is {(high - low) / middle:.0%} of their median"
            )
    return Reliability(not notes, "; ".join(notes) or None)
