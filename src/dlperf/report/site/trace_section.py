"""A run page's trace section: for each stored trace (one per rank of a scaling point), its
phases, its top operators by self time with their share of the step and of their phase,
and, where the trace shows communication, each step's compute/communication split."""

from __future__ import annotations

from dlperf import traces
from dlperf.errors import UserError
from dlperf.report.site.html import esc, table
from dlperf.store import RunStore
from dlperf.store.record import RunRecord

TOP = 10  # operators shown per trace; `dlperf runs trace RUN --top N` lists more


def trace_section(store: RunStore, run: RunRecord) -> str:
    """The section's HTML; empty when the run has no trace. A trace deleted, damaged or too
    large since costs its own tables, said in a note: the rest of the report is drawn."""
    if not traces.has_trace(store, run.id):
        return ""
    parts = ["<h2>Profiler trace</h2>"]
    try:
        paths = traces.run_traces(store, run.id)
    except UserError as e:
        return "".join([*parts, f'<p class="note">{esc(e)}</p>'])
    for path in paths:
        try:
            s = traces.summarise(path)
        except UserError as e:
            parts.append(f'<p class="note">{esc(e)}</p>')
            continue
        phases = s.phase_table()
        parts.append(
            f'<p class="note">{esc(phases.title)} (open it in ui.perfetto.dev or '
            "TensorBoard's profiler)</p>"
        )
        tables = [phases, s.operator_table(TOP)] + ([s.overlap_table()] if s.communicates() else [])
        parts += [table(t.columns, t.rows) for t in tables]
    return "".join(parts)
