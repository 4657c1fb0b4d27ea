"""Shared by the benchmarks: interleaved repetitions, spreads, a table, a JSON record."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def interleaved(contenders: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run every contender once per round, in turn, so drifts in machine load hit all alike.
    Each contender returns its own measurement (e.g. images/s)."""
    results: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, measure in contenders.items():
            results[name].append(measure())
    return results


def machine() -> dict[str, Any]:
    from dlperf.system import system_info

    info = system_info()
    keep = ("host", "cpu", "cores", "usable_cores", "memory_gb", "gpus", "torch", "git_commit")
    return {k: info[k] for k in keep}


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in columns]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = [title] + [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in cells
    ]
    lines.insert(2, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def save(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    record = {
        "benchmark": name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        **payload,
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
