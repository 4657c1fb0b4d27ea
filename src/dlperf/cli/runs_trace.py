"""`dlperf runs trace`: a stored run's profiler trace, operator by operator."""

from __future__ import annotations

import typer

from dlperf.cli import console
from dlperf.cli.app import Json, open_store
from dlperf.cli.runs import runs_app
from dlperf.errors import UserError


@runs_app.command("trace")
def runs_trace(
    run_id: int = typer.Argument(..., help="Run ID.", show_default=False),
    rank: int = typer.Option(None, "--rank", help="One rank of a scaling point (default: all)."),
    top: int = typer.Option(15, "--top", help="Operators to list, by self time."),
    as_json: Json = False,
) -> None:
    """Summarise a run's profiler trace: its phases, and its top operators by self time with
    their share of the step and of their phase (CPU and, on a GPU, CUDA time).

    The trace itself (a gzipped Chrome trace, its path in `dlperf runs show RUN`) opens in
    https://ui.perfetto.dev and in TensorBoard's profiler: tensorboard --logdir DIR_OF_TRACE.

    Example: dlperf run examples/digits_smallcnn.toml --profile && dlperf runs trace 1
    """
    from dlperf import traces

    if top < 1:  # said here, in one line: Click's own range check prints its usage block
        raise UserError(f"--top must be at least 1, got {top}", "e.g. --top 15")
    store = open_store(create=False)
    paths = traces.run_traces(store, run_id)
    if rank is not None:
        if not 0 <= rank < len(paths):
            raise UserError(f"--rank must be 0..{len(paths) - 1} for run {run_id}, got {rank}")
        paths = [paths[rank]]
    with console.reporter() as rep:  # a trace of a million events takes minutes to read
        summaries = [traces.summarise(p, rep) for p in paths]
    if console.printed_json(
        as_json, {"run_id": run_id, "traces": [s.to_dict(top) for s in summaries]}
    ):
        return
    for s in summaries:
        overlap = [s.overlap_table()] if s.overlap else []
        console.print_tables([s.phase_table(), s.operator_table(top), *overlap])
