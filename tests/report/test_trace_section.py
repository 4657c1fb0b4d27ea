"""dlperf.report.site.trace_section: a run page's trace tables, and the note that stands in
for a trace that is gone or damaged."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from dlperf.report.site.trace_section import trace_section
from dlperf.store import RunStore


def _trace(path: Path) -> Path:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100,
         "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::<mm>", "ts": 10, "dur": 60, "pid": 1,
         "tid": 1},
    ]  # fmt: skip
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return path


def _run(store: RunStore, *traces: Path) -> int:
    run_id = store.create_run("r", "run", {})
    for path in traces:
        store.add_artifact(run_id, "trace", path)
    return run_id


def test_a_run_without_a_trace_has_no_section(store: RunStore) -> None:
    assert trace_section(store, store.get_run(_run(store))) == ""


def test_a_trace_gets_its_phase_and_operator_tables_escaped(
    store: RunStore, tmp_path: Path
) -> None:
    run_id = _run(store, _trace(tmp_path / "t.json.gz"))
    html = trace_section(store, store.get_run(run_id))
    assert html.startswith("<h2>Profiler trace</h2>")
    assert (
        "t.json.gz: 1 steps profiled on cpu, 0.100 ms per step (open it in ui.perfetto.dev or "
        "TensorBoard's profiler)</p>"
    ) in html
    assert html.count("<table>") == 2  # no communication: no overlap table
    assert "aten::&lt;mm&gt;" in html and "aten::<mm>" not in html


def test_a_trace_that_is_gone_is_a_note_not_an_error(store: RunStore, tmp_path: Path) -> None:
    run_id = _run(store, tmp_path / "gone.json.gz")
    html = trace_section(store, store.get_run(run_id))
    assert html.startswith('<h2>Profiler trace</h2><p class="note">')
    assert "trace is gone" in html and "<table>" not in html


def test_a_damaged_trace_costs_only_its_own_tables(store: RunStore, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip")
    good = _trace(tmp_path / "good.json.gz")
    html = trace_section(store, store.get_run(_run(store, bad, good)))
    assert html.count('<p class="note">') == 2  # the damaged one's, the good one's title
    assert html.count("<table>") == 2
