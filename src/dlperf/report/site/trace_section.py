"""A run page's trace section: for each stored trace (one per rank of a scaling point), its
phases, its top operators by self time with their share of the step and of their phase,
and, where the trace shows communication, each step's compute/communication split."""

from __future__ import annotations

from dlperf import traces
from dlperf.errors import UserError
from dlperf.report.site.html import esc, table
from dlperf.store import Store
from dlperf.store.record import RunRecord

TOP = 10  # operators shown per trace; `dlperf runs trace RUN --top N` lists more
PHASES = ("data", "h2d", "forward", "backward", "optimizer", "other")


def trace_section(store: Store, run: RunRecord) -> str:
    """The section's HTML; empty when the run has no trace."""
    if not any(a["kind"] == "trace" for a in store.artifacts(run.id)):
        return ""
    parts = ["<h2>Profiler trace</h2>"]
    try:
        summaries = [traces.summarise(p) for p in traces.run_traces(store, run.id)]
    except UserError as e:  # a trace deleted or damaged since: say so, draw the rest
        return "".join([*parts, f'<p class="note">{esc(e)}</p>'])
    for s in summaries:
        parts.append(
            f'<p class="note">{esc(s.path)}: {s.steps} steps profiled on {s.device}, '
            f"{s.per_step(s.step_us):.3f} ms per step (open it in ui.perfetto.dev or "
            "TensorBoard's profiler)</p>"
        )
        parts.append(_phases(s))
        parts.append(_operators(s))
        split = s.mean_overlap()
        if split.get("comm_only_ms", 0) + split.get("both_ms", 0) > 0:
            parts.append(
                table(
                    ["compute only ms", "comm only ms", "both ms", "idle ms"],
                    [[split[k] for k in ("compute_only_ms", "comm_only_ms", "both_ms", "idle_ms")]],
                )
            )
    return "".join(parts)


def _phases(s: traces.TraceSummary) -> str:
    rows = [
        [p, s.per_step(s.phases_us[p]), f"{s.phases_us[p] / s.step_us:.1%}"]
        for p in PHASES
        if p in s.phases_us
    ]
    return table(["phase", "ms/step", "share of step"], rows)


def _operators(s: traces.TraceSummary) -> str:
    cuda = s.device == "cuda"
    rows = []
    for op in s.operators[:TOP]:
        phase, in_phase = max(op.by_phase_us.items(), key=lambda kv: kv[1])
        total = s.phases_us.get(phase)
        rows.append(
            [
                op.name,
                op.calls / s.steps,
                s.per_step(op.cpu_self_us),
                f"{op.cpu_self_us / s.step_us:.1%}",
                *([s.per_step(op.cuda_us)] if cuda else []),
                f"{phase} {in_phase / total:.1%}" if total else phase,
            ]
        )
    columns = ["operator", "calls/step", "self CPU ms/step", "share of step"]
    columns += ["CUDA ms/step"] if cuda else []
    return table([*columns, "phase (share of phase)"], rows)
