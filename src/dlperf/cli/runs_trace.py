"""`dlperf runs trace`: a stored run's profiler trace, operator by operator."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from dlperf.cli import console
from dlperf.cli.app import open_store
from dlperf.cli.runs import runs_app
from dlperf.errors import UserError

if TYPE_CHECKING:
    from dlperf.traces import TraceSummary

PHASE_ORDER = ("data", "h2d", "forward", "backward", "optimizer", "other")


@runs_app.command("trace")
def runs_trace(
    run_id: int = typer.Argument(..., help="Run ID.", show_default=False),
    rank: int = typer.Option(None, "--rank", help="One rank of a scaling point (default: all)."),
    top: int = typer.Option(15, "--top", help="Operators to list, by self time.", min=1),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Summarise a run's profiler trace: its phases, and its top operators by self time with
    their share of the step and of their phase (CPU and, on a GPU, CUDA time).

    The trace itself (a gzipped Chrome trace, its path in `dlperf runs show RUN`) opens in
    https://ui.perfetto.dev and in TensorBoard's profiler: tensorboard --logdir DIR_OF_TRACE.

    Example: dlperf run examples/digits_smallcnn.toml --profile && dlperf runs trace 1
    """
    from dlperf import traces

    store = open_store()
    paths = traces.run_traces(store, run_id)
    if rank is not None:
        if not 0 <= rank < len(paths):
            raise UserError(f"--rank must be 0..{len(paths) - 1} for run {run_id}, got {rank}")
        paths = [paths[rank]]
    summaries = [traces.summarise(p) for p in paths]
    if as_json:
        console.print_json({"run_id": run_id, "traces": [s.to_dict(top) for s in summaries]})
        return
    for s in summaries:
        _print(s, top)


def _print(s: TraceSummary, top: int) -> None:
    step_ms = s.per_step(s.step_us)
    phases = {p: s.phases_us[p] for p in PHASE_ORDER if p in s.phases_us}
    console.print_table(
        f"{s.path}: {s.steps} steps profiled on {s.device}, {step_ms:.3f} ms per step",
        ["phase", "ms/step", "share of step"],
        [[p, f"{s.per_step(us):.3f}", f"{us / s.step_us:.1%}"] for p, us in phases.items()],
    )
    cuda = s.device == "cuda"
    rows = []
    for op in s.operators[:top]:
        phase, in_phase = max(op.by_phase_us.items(), key=lambda kv: kv[1])
        phase_total = s.phases_us.get(phase)
        row = [
            op.name,
            f"{op.calls / s.steps:g}",
            f"{s.per_step(op.cpu_self_us):.3f}",
            f"{op.cpu_self_us / s.step_us:.1%}",
            f"{phase} {in_phase / phase_total:.1%}" if phase_total else phase,
        ]
        if cuda:
            row.insert(4, f"{s.per_step(op.cuda_us):.3f}")
        rows.append(row)
    columns = ["operator", "calls/step", "self CPU ms/step", "share of step"]
    columns += ["CUDA ms/step"] if cuda else []
    console.print_table(None, [*columns, "phase (share of phase)"], rows)
    if s.overlap:
        o = s.mean_overlap()
        console.print_table(
            "per step (ms): computation and communication, from the trace",
            ["compute only", "comm only", "both", "idle"],
            [[f"{o[k]:.3f}" for k in ("compute_only_ms", "comm_only_ms", "both_ms", "idle_ms")]],
        )
