"""Shared by the benchmarks: spreads, a table, a JSON record (dlperf.timing times them and
runs their contenders in interleaved rounds)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dlperf.timing import Spread

RESULTS = Path(__file__).resolve().parent / "results"


def spread(values: Sequence[float]) -> dict[str, float]:
    """min / median / max, the columns of the tables and the keys of the saved records."""
    return Spread.of(values).min_median_max()


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
