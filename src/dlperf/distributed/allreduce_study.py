"""`dlperf scale allreduce`: the all-reduce microbenchmark (dlperf.distributed.allreduce)
under torchrun for each worker count, kept as a study of kind `allreduce` whose runs carry
the ring model fitted over all of them, their own measured times and the cost of overlapping
an all-reduce with compute at their worker count (the scale table's predictions read them).
Each row carries its timed calls' CPU wait (`cpu_wait_share`, also the run's metric
`allreduce/cpu_wait_share` by message size); the study's result carries the most contended
worker count's window (`contention`, `cpu_wait_share`) and its mark (`reliable`,
`reliability_note`, also reported as an `unreliable: ...` line). `AllreduceStudy` is the
result, `table` and `lines` what the command prints of it."""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dlperf import stopping
from dlperf.contention import Contention, judge
from dlperf.distributed.allreduce import check_room, fit_ring_model, overlap_cost, parse_sizes
from dlperf.distributed.contracts import AllreduceSummary
from dlperf.distributed.launch import run_torchrun
from dlperf.distributed.planning import resolve_backend, threads_per_worker
from dlperf.distributed.scaling import workers_said
from dlperf.errors import UserError
from dlperf.progress import NullReporter, Reporter
from dlperf.records import Record
from dlperf.store import Recording, RunStore
from dlperf.system import system_info, usable_cores
from dlperf.table import Table


@dataclass(frozen=True)
class AllreduceFailure(Record):
    """A worker count whose benchmark failed, and torchrun's error."""

    workers: int
    error: str | None


@dataclass(frozen=True)
class AllreduceStudy(Record):
    """What `dlperf scale allreduce` measured: its rows (per worker count and message size),
    the ring model fitted over all of them (RingModel as a dict; None, and why, when none
    fits), the overlap rows and their cost per worker count, the failed worker counts, and
    the most contended worker count's window with its mark. `to_dict` is the --json
    document."""

    study_id: int
    backend: str
    rows: list[dict[str, Any]]
    ring_model: dict[str, Any] | None
    fit_error: str | None
    overlap: list[dict[str, Any]]
    overlap_cost: dict[int, float]
    failures: list[AllreduceFailure]
    cpu_wait_share: float | None
    contention: dict[str, Any] | None
    reliable: bool
    reliability_note: str | None


def check_study(
    workers: list[int], sizes: str, backend: str, iters: int, allow_oversubscribe: bool
) -> str:
    """Refuse what `run_allreduce_study` cannot measure, before anything is launched or
    stored (the command calls it before it opens the store, which a refusal left made):
    returns the backend resolved."""
    if iters < 1:  # before torchrun starts, not after
        raise UserError(f"--iters must be at least 1, got {iters}")
    backend = resolve_backend(backend)
    parsed = parse_sizes(sizes)
    if not workers or min(workers) < 1:
        raise UserError("--workers needs positive counts", "e.g. --workers 2")
    if backend == "gloo" and max(workers) > usable_cores() and not allow_oversubscribe:
        raise UserError(
            f"{max(workers)} workers but this host has {usable_cores()} usable cores",
            "use fewer workers or --allow-oversubscribe",
        )
    check_room(parsed, max(workers), backend)
    return backend


def run_allreduce_study(
    store: RunStore,
    workers: list[int],
    sizes: str,
    backend: str,
    out_dir: Path,
    iters: int = 20,
    warmup: int = 5,
    allow_oversubscribe: bool = False,
    reporter: Reporter | None = None,
) -> AllreduceStudy:
    """Benchmark the all-reduce of `sizes` at each of `workers`, store each worker count as
    a run of one `allreduce` study, and return what was measured."""
    reporter = reporter or NullReporter()
    backend = check_study(workers, sizes, backend, iters, allow_oversubscribe)
    study_id = store.create_study(f"allreduce {backend}", "allreduce")
    measured: list[tuple[Recording, int, list[dict[str, Any]]]] = []
    overlap: dict[int, list[dict[str, Any]]] = {}  # per worker count: measure_overlap's rows
    windows: dict[int, Contention] = {}  # per worker count: its most contended rank's window
    failures: list[AllreduceFailure] = []
    # Every run stays open until the ring model, fitted over all of them, is in its summary.
    with contextlib.ExitStack() as runs:
        for n in sorted(set(workers)):
            threads = threads_per_worker(n, usable_cores()) if backend == "gloo" else 1
            run = runs.enter_context(
                store.new_run(
                    name=f"allreduce {backend} {n} worker{'' if n == 1 else 's'}",
                    kind="allreduce",
                    config={"workers": n, "sizes": sizes, "iters": iters, "warmup": warmup},
                    system={**system_info(None, threads), "backend": backend},
                    study_id=study_id,
                )
            )
            reporter.task(f"all-reduce, {workers_said(n)}")
            directory = out_dir / f"allreduce-{study_id}" / f"w{n}"
            args = ["--sizes", sizes, "--iters", str(iters), "--warmup", str(warmup)]
            args += ["--backend", backend, "--threads", str(threads)]
            args += ["--out", str(directory / "result.json")]
            env = {"OMP_NUM_THREADS": str(threads)}
            launch = run_torchrun(directory, n, "dlperf.distributed.allreduce", args, env=env)
            if launch.returncode != 0:
                # A rank's own line (out of memory at a size), not torchrun's account
                said = sorted(directory.glob("rank-*.failure"))
                error = said[0].read_text() if said else launch.error
                run.fail(error or "torchrun failed")
                failures.append(AllreduceFailure(n, error))
                continue
            result = json.loads((directory / "result.json").read_text())
            rows = [{"workers": n, **row} for row in result["rows"]]
            overlap[n] = result["overlap"]
            if result.get("contention"):
                windows[n] = Contention(**result["contention"])
            store.log_metrics(
                run.id,
                [("allreduce/time_s", r["bytes"], r["time_s"]) for r in rows]
                + [("allreduce/cpu_wait_share", r["bytes"], r["cpu_wait_share"]) for r in rows],
            )
            measured.append((run, n, rows))
        every_row = [row for _, _, rows in measured for row in rows]
        try:
            ring: dict[str, Any] | None = asdict(fit_ring_model(every_row))
            fit_error = None
        except UserError as e:
            ring, fit_error = None, str(e)
        for run, n, rows in measured:
            stored = AllreduceSummary(backend, n, rows, ring, overlap[n], overlap_cost(overlap[n]))
            run.summary = asdict(stored)
    stopping.settle()  # every worker count is stored: one stop now does not unsay it
    worst = Contention.worst(list(windows.values()))
    mark = judge(worst)
    if not mark.reliable:
        contended = [n for n, w in windows.items() if w.contended]
        reporter.log(f"unreliable: {_workers(contended)}: {mark.note}")
    return AllreduceStudy(
        study_id=study_id,
        backend=backend,
        rows=every_row,
        ring_model=ring,
        fit_error=fit_error,
        overlap=[{"workers": n, **row} for n, rows in overlap.items() for row in rows],
        overlap_cost={n: overlap_cost(rows) for n, rows in overlap.items()},
        failures=failures,
        cpu_wait_share=worst.cpu_wait_share if worst else None,
        contention=worst.to_dict() if worst else None,
        reliable=mark.reliable,
        reliability_note=mark.note,
    )


def table(result: AllreduceStudy) -> Table:
    """Time and bandwidth per worker count and message size, with the CPU wait (a marked
    study's `unreliable: N workers: NOTE` was said as it ran)."""
    return Table(
        f"all-reduce study {result.study_id} ({result.backend})",
        ["workers", "bytes", "time (us)", "algbw GB/s", "busbw GB/s", "CPU wait"],
        [
            [
                r["workers"],
                r["bytes"],
                r["time_s"] * 1e6,
                r["algbw_gbps"],
                r["busbw_gbps"],
                None if (w := r.get("cpu_wait_share")) is None else f"{w:.0%}",
            ]
            for r in result.rows
        ],
    )


def lines(result: AllreduceStudy) -> list[str]:
    """The ring model fitted (none: `fit_error` says why), then per worker count the compute
    an all-reduce in flight costs, at the sizes measured."""
    ring, found = result.ring_model, []
    if ring:
        found.append(
            f"ring model T = 2(n-1)a + 2(n-1)/n S/B: a = {ring['alpha_s'] * 1e6:.1f} us, "
            f"B = {ring['bandwidth_bytes_per_s'] / 1e9:.3g} GB/s, "
            f"rms error {ring['rmse_pct']:.1f}% over {ring['n_points']} points"
        )
    for n, cost in result.overlap_cost.items():
        sizes = ", ".join(
            f"{r['bytes'] / 2**20:g} MiB" for r in result.overlap if r["workers"] == n
        )
        found.append(
            f"overlap cost at {workers_said(n)}: {cost:.2f} s of compute lost per s of all-reduce "
            f"in flight (measured at {sizes})"
        )
    return found


def _workers(counts: list[int]) -> str:
    return f"{', '.join(map(str, counts))} worker{'s' * (counts != [1])}"
