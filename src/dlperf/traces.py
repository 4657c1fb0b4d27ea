"""What a profiler trace says: operators by self time, the training phases, and how much of
each step computes, communicates, does both at once, or waits.

A trace is the Chrome trace JSON that torch.profiler writes (gzipped or not): complete
events ("ph": "X") with a category. Operators are `cpu_op` events; their self time is their
duration less that of the events nested directly inside them on the same thread (what
torch's `key_averages()` and TensorBoard's profiler plugin call self time). GPU work is a
`kernel`, `gpu_memcpy` or `gpu_memset` event, tied by its `correlation` to the runtime call
that launched it and so to the innermost operator around that call. The training phases are
the `dlperf::<phase>` ranges that dlperf's profiled window writes (engine.profiler), and the
steps the `ProfilerStep#N` ranges that torch.profiler writes. A window that crosses the end of
an epoch holds that epoch's evaluation and checkpoint inside a step, as `dlperf::epoch_end`:
the summary is of training steps, so that range's time and operators are left out of it (and
its length said), or a 2-convolution model read as 5.33 convolutions a step, in no phase.

Communication is what moves gradients between processes: NCCL kernels on a GPU; on a CPU,
the collectives' operators and ranges (`c10d::`, `gloo:`, `nccl:` and `record_param_comms`, on
whichever thread runs them: gloo runs each all-reduce on a thread of its own). Computation is
every other operator or kernel. Overlap is measured on the wall clock of each step: the union
of computation intervals, of communication intervals, their intersection, and the rest of the
step (idle: waiting, Python, the framework's own work).

A trace is read within bounds whatever the file holds, and only from a regular file (a FIFO
would block the reader, a device feed it without end): at most `MAX_TRACE_MB` of JSON (a
small gzip can hold gigabytes), and without recursion limits (json's parser recurses once a
level, and a document nested 100,000 deep stops it): the events are parsed one at a time,
and a value nested deeper than json's parser reaches is skipped, counting brackets, rather
than built.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import re
import reprlib
import stat
import zlib
from collections import defaultdict
from collections.abc import Generator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf.errors import UserError
from dlperf.parsing import one_line
from dlperf.progress import NullReporter, Reporter
from dlperf.table import Table

if TYPE_CHECKING:
    from dlperf.store import RunStore

PHASE_ORDER = ("data", "h2d", "forward", "backward", "optimizer", "other")
PHASE_PREFIX = "dlperf::"  # engine.timers.SPAN: kept here too so reading needs no torch
EPOCH_END = "epoch_end"  # engine.timers.EPOCH_END: the work between epochs, left out
STEP_PREFIX = "ProfilerStep#"
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
COMM_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms", "ncclDevKernel", "ncclKernel")
# The most JSON a trace may hold, decompressed. dlperf's profiled window (a few steps) writes
# a few MiB on a CPU and tens on a GPU with stacks; a larger trace is read in the viewers.
MAX_TRACE_MB = 256


@dataclass(frozen=True)
class Event:
    name: str
    category: str
    thread: tuple[Any, Any]  # (pid, tid)
    start: float  # µs
    end: float
    correlation: int | None = None


@dataclass
class Operator:
    name: str
    calls: int = 0
    cpu_self_us: float = 0.0
    cuda_us: float = 0.0
    by_phase_us: dict[str, float] = field(default_factory=dict)  # self CPU time per phase


@dataclass
class StepOverlap:
    """One step's wall time split four ways (µs); the four add up to `step_us`."""

    step_us: float
    compute_only_us: float
    comm_only_us: float
    both_us: float
    idle_us: float


@dataclass
class TraceSummary:
    path: str
    steps: int
    device: str  # "cpu" or "cuda": where the operators' time was measured
    step_us: float  # the profiled steps' total wall time, less the time between epochs
    phases_us: dict[str, float]
    operators: list[Operator]  # by CPU self time, largest first
    overlap: list[StepOverlap]
    epoch_end_us: float = 0.0  # the time between epochs inside the steps, left out of them

    def per_step(self, us: float) -> float:
        """Milliseconds per step of a total in µs."""
        return us / self.steps / 1000.0 if self.steps else 0.0

    def mean_overlap(self) -> dict[str, float]:
        """Milliseconds per step of computation only, communication only, both, idle."""
        if not self.overlap:
            return {}
        keys = ("compute_only_us", "comm_only_us", "both_us", "idle_us")
        n = len(self.overlap)
        return {
            k.removesuffix("_us") + "_ms": sum(getattr(o, k) for o in self.overlap) / n / 1000.0
            for k in keys
        }

    def phase_table(self) -> Table:
        """The phases' time per step and share of the step, titled with the trace (and the
        time between epochs it leaves out)."""
        left_out = (
            f"; {self.epoch_end_us / 1000:.3f} ms between epochs (evaluation, checkpoint) left out"
            if self.epoch_end_us
            else ""
        )
        return Table(
            f"{self.path}: {self.steps} steps profiled on {self.device}, "
            f"{self.per_step(self.step_us):.3f} ms per step{left_out}",
            ["phase", "ms/step", "share of step"],
            [
                [p, f"{self.per_step(us):.3f}", f"{us / self.step_us:.1%}"]
                for p in PHASE_ORDER
                if (us := self.phases_us.get(p)) is not None
            ],
        )

    def operator_table(self, top: int) -> Table:
        """The `top` operators by self time: calls, self CPU time per step, share of the
        step, CUDA time per step (on a GPU), and the phase most of it falls in, with its share
        of that phase."""
        cuda = self.device == "cuda"
        rows = []
        for op in self.operators[:top]:
            phase, in_phase = max(op.by_phase_us.items(), key=lambda kv: kv[1])
            total = self.phases_us.get(phase)
            rows.append(
                [
                    op.name,
                    f"{op.calls / self.steps:g}",
                    f"{self.per_step(op.cpu_self_us):.3f}",
                    f"{op.cpu_self_us / self.step_us:.1%}",
                    *([f"{self.per_step(op.cuda_us):.3f}"] if cuda else []),
                    f"{phase} {in_phase / total:.1%}" if total else phase,
                ]
            )
        columns = ["operator", "calls/step", "self CPU ms/step", "share of step"]
        columns += ["CUDA ms/step"] if cuda else []
        return Table(None, [*columns, "phase (share of phase)"], rows)

    def overlap_table(self) -> Table:
        """Milliseconds per step of computation only, communication only, both, idle."""
        split = self.mean_overlap()
        keys = ("compute_only_ms", "comm_only_ms", "both_ms", "idle_ms")
        return Table(
            "per step (ms): computation and communication, from the trace",
            ["compute only", "comm only", "both", "idle"],
            [[f"{split[k]:.3f}" for k in keys]] if split else [],
        )

    def communicates(self) -> bool:
        split = self.mean_overlap()
        return split.get("comm_only_ms", 0) + split.get("both_ms", 0) > 0

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        d = asdict(self)
        d["operators"] = d["operators"][:top] if top else d["operators"]
        d["step_ms"] = self.per_step(self.step_us)
        d["overlap_ms"] = self.mean_overlap()
        return d


PROGRESS_EVENTS = 10_000  # events read between two progress reports
LONG_TRACE_CHARS = 20_000_000  # about 150,000 events, read in about 15 s: said as it starts


def load(path: Path, reporter: Reporter | None = None) -> list[Event]:
    """The complete events of a trace file; UserError when it is not a readable trace.
    `reporter` hears how many events are read: a trace of a million takes minutes."""
    reporter = reporter or NullReporter()
    text = _text(path)
    if len(text) > LONG_TRACE_CHARS:  # worth a line; a short one's errors stay one line
        reporter.task(one_line(f"reading the trace {path}"))
    try:
        events = []
        n = 0
        for seen, item in enumerate(_elements(text), 1):
            if seen % PROGRESS_EVENTS == 0:
                reporter.advance(PROGRESS_EVENTS, "events")
            if not (item.get("ph") == "X" and "dur" in item):
                continue
            n += 1  # its place among the complete events, which the fault line gives
            event = _event(item)
            fault = _time_fault(event, item)
            if fault:  # the first bad event, by its place among the complete events
                name = reprlib.repr(str(item.get("name", "")))
                raise ValueError(f"complete event {n} ({name}) {fault}")
            events.append(event)
        return events
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"cannot read the trace {path}: {err}") from None


# The largest time a trace may give, in µs: 2**53, the last integer a float holds exactly
# (about 285 years; torch writes µs since the epoch, about 1.8e15). Beyond it a duration is
# lost in the start's rounding (ts 1e300 plus any dur is 1e300: steps of no time).
MAX_TRACE_US = float(2**53)


def _time_fault(event: Event, item: dict[str, Any]) -> str | None:
    """What is wrong with an event's times, or None: a ts or dur that is not a finite
    number, a negative dur, or a span past MAX_TRACE_US."""
    for key in ("ts", "dur"):
        if not math.isfinite(float(item[key])):
            return f"has {key} {item[key]!r:.40}, not a finite number of µs"
    if event.end < event.start:
        return f"has dur {item['dur']!r:.40}, a negative duration"
    if not (abs(event.start) <= MAX_TRACE_US and abs(event.end) <= MAX_TRACE_US):
        return (
            f"spans {event.start:g} to {event.end:g} µs, past the {MAX_TRACE_US:.4g} µs "
            "(285 years) a trace's times can hold"
        )
    return None


def _text(path: Path) -> str:
    """The trace's JSON text, decompressed if gzipped, refused past MAX_TRACE_MB."""
    limit = MAX_TRACE_MB * 2**20
    try:
        # Before opening: opening a FIFO waits for a writer, forever for a trace.
        if not stat.S_ISREG(path.stat().st_mode):
            raise UserError(f"the trace {path} is not a regular file")
        with path.open("rb") as f:
            zipped = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            stream = gzip.GzipFile(fileobj=f) if zipped else f
            raw = stream.read(limit + 1)  # never more than the cap, whatever it unpacks to
        if len(raw) > limit:
            held = "decompresses to" if zipped else "holds"
            raise UserError(
                f"the trace {path} {held} more than {MAX_TRACE_MB} MiB of JSON, the most dlperf "
                "reads",
                "open it in ui.perfetto.dev, or profile fewer steps: run.profile.active",
            )
        if not raw.strip(b" \t\r\n"):  # JSON's own error read "Expecting value: line 1 ..."
            held = "holds nothing but white space" if raw else "is empty"
            held = "decompresses to nothing" if zipped and not raw else held
            raise UserError(f"cannot read the trace {path}: it {held} {NOT_A_TRACE}")
        try:
            return raw.decode(json.detect_encoding(raw), "surrogatepass")
        except UnicodeDecodeError:  # a codec's error named a byte, not what the file is
            what = "is gzip, but not of JSON text" if zipped else "is neither JSON text nor gzip"
            raise UserError(f"cannot read the trace {path}: it {what} {NOT_A_TRACE}") from None
    except (OSError, EOFError, zlib.error, ValueError) as err:
        raise UserError(f"cannot read the trace {path}: {err}") from None


_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
# What a deep value is skipped by: a string whole, a run of brackets, a run of anything else.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[{]+|[\]}]+|[^"\[\]{}]+')


class _Deep:
    """A value nested deeper than json's parser reaches, skipped rather than built."""

    def __repr__(self) -> str:
        return "a value nested too deep"


_DEEP = _Deep()


def _space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]  # matches the empty string


def _expect(text: str, pos: int, char: str) -> int:
    """The index after `char` at `pos` (after whitespace); ValueError if it is not there."""
    pos = _space(text, pos)
    if not text.startswith(char, pos):
        found = repr(text[pos]) if pos < len(text) else "the end"
        raise ValueError(f"expected {char!r} at character {pos}, found {found}")
    return _space(text, pos + 1)


def _skip(text: str, pos: int) -> int:
    """The index after the container at `pos`, found by counting brackets (no recursion)."""
    depth = 0
    for token in _TOKEN.finditer(text, pos):
        kind = token.group()[0]
        if kind in "[{":
            depth += len(token.group())
        elif kind in "]}":
            if depth <= len(token.group()):
                return token.start() + depth
            depth -= len(token.group())
    raise ValueError(f"unterminated value from character {pos}")


def _value(text: str, pos: int) -> tuple[Any, int]:
    """The JSON value at `pos` (json's own parser) and the index after it; _DEEP for a value
    nested deeper than that parser recurses."""
    try:
        return _DECODER.raw_decode(text, pos)
    except RecursionError:
        return _DEEP, _skip(text, pos)


def _key(text: str, pos: int) -> tuple[str, int]:
    """An object's key at `pos` and the index after its colon."""
    key, pos = _DECODER.raw_decode(text, pos)
    if not isinstance(key, str):
        raise ValueError(f"an object's key is {key!r:.40}, not a string")
    return key, _expect(text, pos, ":")


def _open(text: str, pos: int, opening: str) -> tuple[bool, int]:
    """Into the container opening at `pos`: (True, the index after it) if it is empty, else
    (False, its first member's start)."""
    pos = _expect(text, pos, opening)
    closing = "]" if opening == "[" else "}"
    return (True, pos + 1) if text.startswith(closing, pos) else (False, pos)


def _next(text: str, pos: int, closing: str) -> tuple[bool, int]:
    """Past a member: (True, the index after the container) at its end, else (False, the
    next member's start)."""
    pos = _space(text, pos)
    if text.startswith(closing, pos):
        return True, pos + 1
    return False, _expect(text, pos, ",")


def _entry(text: str, pos: int) -> tuple[Any, int]:
    """An element of the event array: like `_value`, but an object too deep to parse whole
    keeps its shallow fields (one deep `args` costs an event its correlation, not its time)."""
    value, end = _value(text, pos)
    if value is not _DEEP or not text.startswith("{", pos):
        return value, end
    fields: dict[str, Any] = {}
    done, pos = _open(text, pos, "{")
    while not done:
        key, pos = _key(text, pos)
        fields[key], pos = _value(text, pos)
        done, pos = _next(text, pos, "}")
    return fields, pos


def _array(text: str, pos: int) -> Generator[Any, None, int]:
    """The elements of the array at `pos`, one at a time; returns the index after it."""
    done, pos = _open(text, pos, "[")
    while not done:
        element, pos = _entry(text, pos)
        yield element
        done, pos = _next(text, pos, "]")
    return pos


NOT_A_TRACE = "(not a Chrome/Kineto trace)"


def _elements(text: str) -> Iterator[dict[str, Any]]:
    """The trace's event objects, one at a time: of the "traceEvents" array of a JSON object
    (its other keys skipped unread), or of a bare JSON array, as Chrome's trace format allows.
    A file with neither is no trace, and said so: one with no traceEvents was told
    `'traceEvents'` (a KeyError's repr), and one whose array held no object (a top-level
    [1, 2], a traceEvents nested 100,000 lists deep) read as a trace of no events, which the
    summary blamed on the profiler's schedule."""
    pos = _space(text, 0)
    no_objects: list[str] = []  # the arrays that held elements and no object: said last
    if text.startswith("[", pos):
        pos = yield from _events(text, pos, "top-level array", no_objects)
    elif text.startswith("{", pos):
        found = False
        done, pos = _open(text, pos, "{")
        while not done:
            key, pos = _key(text, pos)
            if key == "traceEvents":
                found = True
                pos = yield from _events(text, pos, "traceEvents array", no_objects)
            else:
                pos = _value(text, pos)[1]
            done, pos = _next(text, pos, "}")
        if not found:
            raise ValueError(f"it has no traceEvents array {NOT_A_TRACE}")
    else:  # a number, a string, null, true or false: JSON, and no trace
        try:
            _value(text, pos)
        except ValueError:  # JSON's own error, "Expecting value: line 1 column 1 (char 0)"
            raise ValueError(f"it is not JSON {NOT_A_TRACE}") from None
        raise ValueError(f"it has no traceEvents array {NOT_A_TRACE}")
    if _space(text, pos) != len(text):
        raise ValueError(f"extra data after the trace at character {pos}")
    if no_objects:  # after the whole text is read: JSON's own errors come first
        raise ValueError(f"its {no_objects[0]} holds no event objects {NOT_A_TRACE}")


def _events(
    text: str, pos: int, where: str, no_objects: list[str]
) -> Generator[dict[str, Any], None, int]:
    """The objects of the event array at `pos` and the index after it. Other elements are
    skipped (a value nested too deep to read costs the trace that element alone), but an
    array that holds some and no object is no trace: `where` (which array) is added to
    `no_objects`."""
    array = _array(text, pos)
    skipped = objects = 0
    while True:
        try:
            element = next(array)
        except StopIteration as end:
            if skipped and not objects:
                no_objects.append(where)
            return int(end.value)
        if isinstance(element, dict):
            objects += 1
            yield element
        else:
            skipped += 1


def _event(item: dict[str, Any]) -> Event:
    """An event from its JSON object; ValueError for fields of the wrong kind (a name that
    is a list would be drawn as one, and a list as a thread cannot be looked up)."""
    scalars = (str, int, float, bool, type(None))
    for key in ("name", "cat", "pid", "tid"):
        if not isinstance(item.get(key), scalars):
            raise ValueError(f"an event's {key!r} is {type(item[key]).__name__}, not a scalar")
    for key in ("ts", "dur"):  # a number, or a string of one (float() reads it)
        if isinstance(item.get(key), bool) or not isinstance(item.get(key), (int, float, str)):
            raise ValueError(f"an event's {key!r} is {item.get(key)!r:.40}, not a number")
    args = item.get("args")
    correlation = args.get("correlation") if isinstance(args, dict) else None
    start = float(item["ts"])
    return Event(
        name=str(item.get("name", "")),
        category=str(item.get("cat", "")),
        thread=(item.get("pid"), item.get("tid")),
        start=start,
        end=start + float(item["dur"]),
        correlation=correlation if isinstance(correlation, int) else None,
    )


def _is_comm(name: str) -> bool:
    return name.startswith(COMM_PREFIXES)


class _Phases:
    """The time intervals of the dlperf::<phase> ranges, to look an instant's phase up: the
    host's ranges only. On CUDA Kineto copies each range onto the GPU's timeline
    (gpu_user_annotation), later than the host's: counted too, they doubled the totals and,
    overlapping the host's next phase, hid it from the lookup."""

    def __init__(self, events: list[Event]) -> None:
        ranges = sorted(
            (e.start, e.end, e.name.removeprefix(PHASE_PREFIX))
            for e in events
            if e.name.startswith(PHASE_PREFIX) and e.category == "user_annotation"
        )
        self.starts = [r[0] for r in ranges]
        self.ranges = ranges

    def at(self, instant: float) -> str:
        i = bisect.bisect_right(self.starts, instant) - 1
        if i >= 0 and instant < self.ranges[i][1]:
            return self.ranges[i][2]
        return "other"

    def totals(self) -> dict[str, float]:
        """Each training phase's time (the time between epochs is no phase)."""
        out: dict[str, float] = defaultdict(float)
        for start, end, name in self.ranges:
            if name != EPOCH_END:
                out[name] += end - start
        return dict(out)

    def between_epochs(self) -> list[tuple[float, float]]:
        return [(start, end) for start, end, name in self.ranges if name == EPOCH_END]


def _operators(events: list[Event], phases: _Phases) -> list[Operator]:
    """Self CPU time per operator (and per phase), and the GPU time it launched."""
    ops: dict[str, Operator] = {}
    launched_by: dict[int, str] = {}  # correlation id -> innermost operator at the launch
    by_thread: dict[tuple[Any, Any], list[Event]] = defaultdict(list)
    for e in events:
        if e.category in ("cpu_op", "user_annotation", *LAUNCH_CATEGORIES):
            by_thread[e.thread].append(e)
    for thread_events in by_thread.values():
        _sweep(thread_events, ops, launched_by, phases)
    for e in events:
        if e.category in DEVICE_CATEGORIES and e.correlation in launched_by:
            ops[launched_by[e.correlation]].cuda_us += e.end - e.start
    return sorted(ops.values(), key=lambda o: (-o.cpu_self_us, -o.cuda_us, o.name))


def _sweep(
    events: list[Event], ops: dict[str, Operator], launched_by: dict[int, str], phases: _Phases
) -> None:
    """One thread's events in time order, nested on a stack: each operator's self time is its
    duration less its direct children's; each launch belongs to the innermost operator."""
    events = sorted(events, key=lambda e: (e.start, -(e.end - e.start)))
    stack: list[tuple[Event, list[float]]] = []  # (event, [its children's time])

    def pop_until(instant: float) -> None:
        while stack and stack[-1][0].end <= instant:
            done, children = stack.pop()
            phase = phases.at(done.start)
            if done.category == "cpu_op" and phase != EPOCH_END:
                op = ops.setdefault(done.name, Operator(done.name))
                self_us = max(done.end - done.start - children[0], 0.0)
                op.calls += 1
                op.cpu_self_us += self_us
                op.by_phase_us[phase] = op.by_phase_us.get(phase, 0.0) + self_us
            if stack:
                stack[-1][1][0] += done.end - done.start

    for e in events:
        pop_until(e.start)
        if e.category in LAUNCH_CATEGORIES:
            around = [s for s, _ in stack if s.category == "cpu_op"]
            if e.correlation is not None and around and phases.at(e.start) != EPOCH_END:
                launched_by[e.correlation] = around[-1].name
            continue
        stack.append((e, [0.0]))
    pop_until(float("inf"))


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _clip(events: list[Event], start: float, end: float) -> list[tuple[float, float]]:
    return _clip_spans([(e.start, e.end) for e in events], start, end)


def _clip_spans(
    spans: list[tuple[float, float]], start: float, end: float
) -> list[tuple[float, float]]:
    return [(max(a, start), min(b, end)) for a, b in spans if b > start and a < end]


def _between_epochs_us(step: Event, phases: _Phases) -> float:
    """The time between epochs inside `step`."""
    return _length(_union(_clip_spans(phases.between_epochs(), step.start, step.end)))


def _overlap(
    events: list[Event], steps: list[Event], on_gpu: bool, phases: _Phases
) -> list[StepOverlap]:
    """Each step's computation-only, communication-only, both-at-once and idle time, less
    the time between epochs and the work begun in it. On a GPU the kernels are the work; on
    a CPU the operators (nested ones add no time to a union)."""
    if on_gpu:
        work = [e for e in events if e.category in DEVICE_CATEGORIES]
    else:  # gloo runs a collective on its own thread, as a user_annotation range
        work = [
            e
            for e in events
            if e.category == "cpu_op" or (e.category == "user_annotation" and _is_comm(e.name))
        ]
    work = [e for e in work if phases.at(e.start) != EPOCH_END]
    comm_events = [e for e in work if _is_comm(e.name)]
    compute_events = [e for e in work if not _is_comm(e.name)]
    out = []
    for step in steps:
        compute = _union(_clip(compute_events, step.start, step.end))
        comm = _union(_clip(comm_events, step.start, step.end))
        busy = _length(_union(compute + comm))
        both = _length(compute) + _length(comm) - busy  # each a union: |A∩B| = |A|+|B|-|A∪B|
        length = step.end - step.start - _between_epochs_us(step, phases)
        out.append(
            StepOverlap(
                step_us=length,
                compute_only_us=_length(compute) - both,
                comm_only_us=_length(comm) - both,
                both_us=both,
                idle_us=max(length - busy, 0.0),
            )
        )
    return out


def summarise(path: Path, reporter: Reporter | None = None) -> TraceSummary:
    """Read the trace at `path` and summarise it (see the module docstring); `reporter`
    hears the reading's progress."""
    events = load(path, reporter)
    steps = sorted(
        (e for e in events if e.name.startswith(STEP_PREFIX) and e.category == "user_annotation"),
        key=lambda e: e.start,
    )
    if not steps:
        raise UserError(
            f"the trace {path} has no ProfilerStep ranges",
            "it was not recorded with a torch.profiler schedule (dlperf run --profile records one)",
        )
    total = sum(s.end - s.start for s in steps)
    phases = _Phases(events)
    between = sum(_between_epochs_us(s, phases) for s in steps)
    if total - between <= 0:
        held = " but the time between epochs" if between else ""
        raise UserError(
            f"the trace {path}'s {len(steps)} ProfilerStep ranges last no time{held}",
            "it is not a trace torch.profiler wrote as it is: profile the run again",
        )
    on_gpu = any(e.category in DEVICE_CATEGORIES for e in events)
    return TraceSummary(
        path=str(path),
        steps=len(steps),
        device="cuda" if on_gpu else "cpu",
        step_us=total - between,
        phases_us=phases.totals(),
        operators=_operators(events, phases),
        overlap=_overlap(events, steps, on_gpu, phases),
        epoch_end_us=between,
    )


def has_trace(store: RunStore, run_id: int) -> bool:
    return any(a["kind"] == "trace" for a in store.artifacts(run_id))


def run_traces(store: RunStore, run_id: int) -> list[Path]:
    """The trace files stored with run `run_id` (one per rank of a scaling point), in rank
    order; UserError when it has none or they are gone."""
    store.get_run(run_id)  # an unknown run is said as such, not as one without a trace
    paths = [Path(a["path"]) for a in store.artifacts(run_id) if a["kind"] == "trace"]
    if not paths:
        raise UserError(
            f"run {run_id} has no trace",
            "record one with dlperf run EXP --profile (or dlperf scale EXP --profile)",
        )
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UserError(f"run {run_id}'s trace is gone: {', '.join(missing)}")
    return sorted(paths, key=rank_order)


def rank_order(path: Path) -> tuple[int, str]:
    """The sort key of a trace named after its worker: rank0, rank1, ..., rank10."""
    worker = path.name.split(".", 1)[0]
    digits = worker.removeprefix("rank")
    return (int(digits) if digits.isdigit() else 0, worker)
