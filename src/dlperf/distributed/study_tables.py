"""A scaling study's result (`study.StudyResult`) as `dlperf scale` shows it: one table per
series, each prediction beside its measurement, each --synthetic interval, and the failures;
the command prints them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from dlperf.distributed import trace_split
from dlperf.distributed.contracts import PointRow, PointSummary
from dlperf.distributed.scaling import BATCH_KEY, point_name, series_name, workers_said
from dlperf.formatting import fmt
from dlperf.table import Table

if TYPE_CHECKING:
    from dlperf.distributed.study import StudyResult

COLUMNS = ["workers", "comm", "batch/w", "global", "samples/s", "step ms", "min-max", "compute",
           "comm", "ring", "overlap", "busbw", "epoch s", "$/epoch", "CPU wait",
           "status"]  # fmt: skip
UNRELIABLE = "unreliable"  # the status of a point whose figures carry a reliability note
# After samples/s, when the study compares its points: the efficiency on throughput and on time.
RELATIVE = ["speedup", "effic. X", "effic. T"]


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1e3


def _series(row: PointRow) -> str | None:
    return series_name(asdict(row))


def series(result: StudyResult) -> dict[str | None, list[PointRow]]:
    """The rows by series (mode and batch, in words), in the order the study ran them; one
    unnamed series when the study compares no points (scale max-batch: its rows differ in
    batch, not in workers)."""
    if not result.efficiency:
        return {None: result.rows}
    groups: dict[str | None, list[PointRow]] = {}
    for row in result.rows:
        groups.setdefault(_series(row), []).append(row)
    return groups


def _row(r: PointRow, compared: bool) -> list[Any]:
    s = r.summary
    figures: list[Any] = [None] * (14 if compared else 11)  # samples/s to CPU wait
    if s is not None:
        figures = [
            s.throughput,
            *([s.speedup, s.efficiency, s.efficiency_time] if compared else []),
            _ms(s.step_time_s),
            f"{s.step_time_min_s * 1e3:.3g}-{s.step_time_max_s * 1e3:.3g}",
            _ms(s.compute_s),
            _ms(s.comm_exposed_s),
            _ms(s.ring_predicted_s),
            _ms(s.overlap_predicted_s),
            s.busbw_gbps,
            s.epoch_time_s,
            s.cost_per_epoch,
            None if s.cpu_wait_share is None else f"{s.cpu_wait_share:.0%}",
        ]
    comm = r.comm if r.strategy == "ddp" else f"{r.strategy}/{r.comm}"
    status = f"{r.status}, {UNRELIABLE}" if s is not None and s.reliable is False else r.status
    return [r.workers, comm, r.per_worker_batch, r.global_batch, *figures, status]


def threads_per_worker(result: StudyResult) -> str:
    """The threads each worker ran with, in words, as the tables' titles state them."""
    threads = sorted({t for r in result.rows if r.summary and (t := r.summary.threads_per_worker)})
    if not threads:
        return ""
    return f", {'/'.join(map(str, threads))} thread{'s' * (threads != [1])} per worker"


def tables(result: StudyResult) -> list[Table]:
    """One table per series: throughput (speedup and efficiency when compared), step time,
    compute against exposed communication and its predictions, bus bandwidth, cost."""
    compared = bool(result.efficiency)
    columns = COLUMNS[:5] + (RELATIVE if compared else []) + COLUMNS[5:]
    what = f"scale study {result.study_id}" if compared else "largest-batch search"
    found = []
    for name, rows in series(result).items():
        title = f"{what} ({result.label}{threads_per_worker(result)})"
        title += f": {name}" if name else ""
        if not compared:
            title += f", study {result.study_id}"
        found.append(Table(title, columns, [_row(r, compared) for r in rows]))
    return found


def definitions(result: StudyResult) -> list[str]:
    """What speedup and the two efficiency columns mean, each stated once: the one on
    throughput is the same in every mode, the one on time is per mode."""
    if not result.efficiency:
        return []
    modes = result.efficiency.values()
    speedup = "speedup = X_N / X_base (base: the series' point with the fewest workers)"
    if any(r.summary and (r.summary.rounds or 1) > 1 for r in result.rows):
        # The columns are then medians over rounds, not the ratio of the shown throughputs.
        speedup += (
            "; measured in rounds, X_N / X_base here and in effic. X is the median of each "
            "round's ratio to the base's same round"
        )
    lines = [speedup, f"effic. X = {next(iter(modes))['efficiency']}"]
    return lines + [f"effic. T = {mode['efficiency_time']}" for mode in modes]


# The course's scaling tables: workers as rows, one group of columns per batch size of the
# mode; each table's name and its columns, (heading, key, scale of the shown value). Table 2
# is in the course's units, seconds per epoch (PER_EPOCH); the per-step figures are in --json.
COURSE: dict[str, list[tuple[str, str, float]]] = {
    "time and speedup": [("epoch s", "epoch_time_s", 1.0), ("speedup", "speedup", 1.0)],
    "compute and communication": [
        ("compute s/epoch", "compute_epoch_s", 1.0),
        ("comm s/epoch", "comm_epoch_s", 1.0),
    ],
    "bandwidth utilisation": [
        ("algbw GB/s", "algbw_gbps", 1.0),
        ("busbw GB/s", "busbw_gbps", 1.0),
        ("of B", "busbw_utilisation", 1.0),
    ],
}
# After a time and speedup table's columns when the study was given a price (a catalog
# --device or --price-per-hour): workers x epoch hours x price per worker-hour.
COST = ("$/epoch", "cost_per_epoch", 1.0)
# Table 2's figures per epoch from their per-step medians: per-step seconds x steps per epoch,
# the steps = training images / global batch, unrounded, over the images epoch_time_s counts
# (epoch_time_s = images / throughput, so steps = epoch_time_s x throughput / global_batch).
# Their sum is an epoch of median steps, step_time_s x steps, not epoch_time_s, which counts
# every step's time (slow steps included).
PER_EPOCH = {"compute_epoch_s": "compute_s", "comm_epoch_s": "comm_exposed_s"}
# Beside every point's figures in the CSV: how far contention and spread let them be read.
MARKS = ("cpu_wait_share", "reliable", "reliability_note")
BATCH_SYMBOL = {"weak": "b", "strong": "B"}  # per-worker b, global B, as docs/scale.md writes


@dataclass(frozen=True)
class Cell:
    """A point in the course's tables: its summary (None: the point failed), and the figures
    the tables add to it: its busbw over the bandwidth B of the ring model fitted to the
    all-reduce benchmark (the share of what the all-reduce reaches on large messages), and
    the PER_EPOCH figures."""

    summary: PointSummary | None
    busbw_utilisation: float | None = None
    compute_epoch_s: float | None = None
    comm_epoch_s: float | None = None

    def figure(self, key: str) -> Any:
        """A figure by its stored name (the keys of COURSE, COST and MARKS); None where the
        point has none."""
        if key in ADDED:
            return getattr(self, key)
        return None if self.summary is None else getattr(self.summary, key)


ADDED = ("busbw_utilisation", *PER_EPOCH)  # Cell's own figures
MISSING = Cell(None)  # where a grid has no point
Grid = dict[int, dict[int, Cell]]  # that mode's batch -> workers -> point


def course_columns(result: StudyResult) -> dict[str, list[tuple[str, str, float]]]:
    """COURSE, with the cost of an epoch after each batch's speedup when the study was given a
    price (its points have a cost_per_epoch); without one the tables keep their shape."""
    if not any(r.summary and r.summary.cost_per_epoch is not None for r in result.rows):
        return COURSE
    return {**COURSE, "time and speedup": [*COURSE["time and speedup"], COST]}


def per_epoch(s: PointSummary) -> dict[str, float | None]:
    """A point's PER_EPOCH figures, None where the per-step one is missing (a row read from
    a document that lacks figures, as a test's may, has None for them too)."""
    epoch, throughput = s.epoch_time_s, s.throughput
    steps = None if epoch is None or throughput is None else epoch * throughput / s.global_batch
    return {
        key: None if steps is None or (v := getattr(s, step)) is None else v * steps
        for key, step in PER_EPOCH.items()
    }


def cell(summary: PointSummary | None, ring: dict[str, Any] | None) -> Cell:
    """A point's figures in the course's tables, `ring` the study's ring model."""
    if summary is None:
        return MISSING
    busbw = summary.busbw_gbps
    share = busbw * 1e9 / ring["bandwidth_bytes_per_s"] if busbw is not None and ring else None
    return Cell(summary, share, **per_epoch(summary))


def grids(result: StudyResult) -> dict[tuple[Any, ...], Grid]:
    """The compared points in the course's shape, one grid per (mode, comm, strategy,
    bucket): batch of the mode (weak: per worker, strong: global) -> workers -> its Cell.
    Empty when the study compares no points."""
    found: dict[tuple[Any, ...], Grid] = {}
    if not result.efficiency:
        return found
    for row in result.rows:
        assert row.mode is not None  # a compared study's points have one
        key = (row.mode, row.comm, row.strategy, row.bucket_mb)
        points = found.setdefault(key, {}).setdefault(getattr(row, BATCH_KEY[row.mode]), {})
        points[row.workers] = cell(row.summary, result.ring)
    return {key: dict(sorted(grid.items())) for key, grid in found.items()}


def _grid_name(key: tuple[Any, ...]) -> str:
    mode, comm, strategy, bucket = key
    size = f" bucket {bucket:g}MB" if bucket else ""
    batch = "per-worker batch b" if mode == "weak" else "global batch B"
    return f"{mode}, {strategy}/{comm}{size}: workers × {batch}"


def _cells(grid: Grid, columns: list[tuple[str, str, float]]) -> list[list[Any]]:
    """One row per worker count: each batch's columns, None where the point is missing."""
    workers = sorted({n for points in grid.values() for n in points})
    rows = []
    for n in workers:
        row: list[Any] = [n]
        for points in grid.values():
            point = points.get(n, MISSING)
            row += [None if (v := point.figure(key)) is None else v * k for _, key, k in columns]
        rows.append(row)
    return rows


def course_tables(result: StudyResult) -> list[Table]:
    """The course's three scaling tables (time and speedup, and the cost of an epoch when
    priced; compute and communication in seconds per epoch; bandwidth utilisation) for each
    grid of the study that has several batch sizes; none for a study of one batch size,
    whose series table says it all."""
    found = []
    course = course_columns(result)
    for key, grid in grids(result).items():
        if len(grid) < 2:
            continue
        symbol = BATCH_SYMBOL[key[0]]
        for name, columns in course.items():
            heads = [f"{symbol}={b} {head}" for b in grid for head, _, _ in columns]
            title = f"scale study {result.study_id} ({result.label}): {name}; {_grid_name(key)}"
            found.append(Table(title, ["workers", *heads], _cells(grid, columns)))
    return found


def course_csv(result: StudyResult) -> tuple[list[str], list[list[Any]]]:
    """The course's tables as one CSV: a row per (grid, workers); the grid's keys, then for
    each batch of a mode (`b=32` per worker, `B=256` global) every column of the three
    tables (cost_per_epoch only when priced), in the stored keys and units (seconds, GB/s,
    the price's currency), then the point's CPU wait and reliability mark (MARKS); empty
    where a grid lacks it."""
    found = grids(result)
    batches = dict.fromkeys((key[0], b) for key, grid in found.items() for b in grid)
    course = course_columns(result)
    keys = [key for columns in course.values() for _, key, _ in columns] + list(MARKS)
    heads = [f"{BATCH_SYMBOL[mode]}={b} {key}" for mode, b in batches for key in keys]
    rows = []
    for key, grid in found.items():
        for n in sorted({n for points in grid.values() for n in points}):
            row: list[Any] = [*key, n]
            for mode, b in batches:
                point = grid.get(b, {}).get(n, MISSING) if mode == key[0] else MISSING
                row += [point.figure(k) for k in keys]
            rows.append(row)
    return ["mode", "comm", "strategy", "bucket_mb", "workers", *heads], rows


def _prediction(row: PointRow, s: PointSummary, several: bool) -> str | None:
    """A point's predicted exposed communication beside the measured, with the errors."""
    parts = []
    for name, value, error in (
        ("ring", s.ring_predicted_s, s.ring_error),
        ("overlap", s.overlap_predicted_s, s.overlap_error),
    ):
        if value is not None:
            how = "" if error is None else f" ({error:+.0%})"
            parts.append(f"{name} {fmt(value * 1e3, 3)} ms{how}")
    if not parts:
        return None
    exposed, ci = s.comm_exposed_s, s.comm_exposed_ci95_s
    spread = "" if ci is None else f" ± {fmt(ci * 1e3, 2)}"
    measured = "not measured" if exposed is None else f"{fmt(exposed * 1e3, 3)}{spread} ms measured"
    return (
        f"{point_name(asdict(row), several)}: exposed comm {measured}; predicted {', '.join(parts)}"
    )


def _chunks(row: PointRow, s: PointSummary, several: bool) -> str:
    """--synthetic: the point's mean throughput over chunks of steps and its 95% interval."""
    where = point_name(asdict(row), several, bucket=False)
    mean, ci, n = s.throughput_mean, s.throughput_ci95, s.chunks
    if ci is None:
        return f"{where}: {fmt(mean)} samples/s in 1 chunk (no interval)"
    return (
        f"{where}: {fmt(mean)} ± {fmt(ci, 2)} samples/s "
        f"(mean of {n} chunks ± 95% confidence interval, Student's t)"
    )


def _rounds(row: PointRow, s: PointSummary, several: bool) -> str:
    """scale.repeat: the point's speedup over its rounds, with the 95% interval."""
    per_round = ", ".join(fmt(x) for x in s.throughput_rounds or ())
    return (
        f"{point_name(asdict(row), several)}: speedup {fmt(s.speedup, 3)} ± "
        f"{fmt(s.speedup_ci95, 2)} over {s.rounds} interleaved rounds (median, 95% interval, "
        f"Student's t); samples/s per round: {per_round}"
    )


def findings(result: StudyResult) -> list[str]:
    """Each finished point's predictions with their errors (predicted / measured - 1), the
    basis of each prediction (what it was calibrated on, and when: one line per distinct
    one), and each --synthetic point's interval."""
    several = len(series(result)) > 1
    summarised = [(r, r.summary) for r in result.rows if r.summary]
    lines = [line for r, s in summarised if (line := _prediction(r, s, several))]
    for name, bases in (
        ("ring", [s.ring_basis for _, s in summarised]),
        ("overlap", [s.overlap_basis for _, s in summarised]),
    ):
        lines += [f"{name}: {b}" for b in dict.fromkeys(bases) if b]
    lines += [_chunks(r, s, several) for r, s in summarised if s.throughput_mean is not None]
    lines += [_rounds(r, s, several) for r, s in summarised if s.speedup_ci95 is not None]
    lines += [
        f"{UNRELIABLE}: {point_name(asdict(r), several)}: {s.reliability_note}"
        for r, s in summarised
        if s.reliable is False
    ]
    return lines


def failures(result: StudyResult) -> list[str]:
    """Each failed point and its error."""
    several = len(series(result)) > 1
    lines = []
    for r in result.rows:
        if r.status == "failed":
            name = _series(r) if several else None
            where = workers_said(r.workers) + (f" ({name})" if name else "")
            lines.append(failed(where, r.error))
    return lines


def failed(where: str, error: str | None) -> str:
    """`where` failed, and why: a one-line reason on the same line, a traceback below it."""
    error = (error or "").strip()
    return f"{where} failed:{chr(10) if chr(10) in error else ' '}{error}".rstrip()


def missing_ring(result: StudyResult) -> bool:
    """True when torch points over several workers have no ring model to predict with."""
    other = ("tensorflow", "horovod")
    torch_rows = [r for r in result.rows if not (r.summary and r.summary.backend in other)]
    return result.ring is None and any(r.workers > 1 for r in torch_rows)


LEGEND = (
    "ms per step, median (min-max) of the slowest rank; comm = exposed communication, "
    "ring = ring-model all-reduce, overlap = the exposed part the bucket/overlap model "
    "predicts; busbw GB/s"
)
NO_RING = (
    "hint: no stored all-reduce benchmark for this backend, so no ring-model column; "
    "run `dlperf scale allreduce --workers 2`"
)


def every_table(result: StudyResult) -> list[Table]:
    """The tables `dlperf scale` prints, in order: the course's, one per series, and the
    traces' split of each step when the study was profiled."""
    traced = trace_split.table(result.rows)
    return [*course_tables(result), *tables(result), *([traced] if traced else [])]


def notes(result: StudyResult) -> list[str]:
    """The lines after the tables: what their columns mean, then what the study found."""
    return [LEGEND, *definitions(result), *findings(result)]


def problems(result: StudyResult) -> list[str]:
    """The lines for stderr: the hint when no ring model could predict, then each failure."""
    return [NO_RING] * missing_ring(result) + failures(result)


def document(result: StudyResult, artifacts: list[Any]) -> dict[str, Any]:
    """What `dlperf scale --json` prints."""
    return {
        "study_id": result.study_id,
        "label": result.label,
        "warnings": result.warnings,
        "ring_model": result.ring,
        "max_per_worker_batch": result.max_per_worker_batch,
        "efficiency_definitions": result.efficiency,
        "artifacts": artifacts,
        "rows": [r.to_dict() for r in result.rows],
    }
