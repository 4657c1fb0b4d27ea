"""`dlperf runs export`: stored runs to MLflow or TensorBoard (optional extras)."""

from __future__ import annotations

from pathlib import Path

import typer

from dlperf import stopping
from dlperf.cli import console
from dlperf.cli.app import Json, PathText, open_store
from dlperf.cli.runs import runs_app
from dlperf.errors import UserError, causes, noted_left
from dlperf.parsing import not_blank

TARGETS = ("mlflow", "tensorboard")  # dlperf.exporters.TARGETS, without importing it for --help


@runs_app.command("export")
def runs_export(
    ctx: typer.Context,
    run_ids: list[int] = typer.Argument(..., help="Run IDs.", show_default=False),
    to: str = typer.Option(..., "--to", help="mlflow or tensorboard."),
    uri: str = typer.Option(
        None,
        "--uri",
        envvar="MLFLOW_TRACKING_URI",
        help="MLflow tracking URI (sqlite:///mlflow.db, http://host:5000) for --to mlflow.",
    ),
    # Text, not a Path: Path('') is '.', which wrote the event files into the current directory.
    out: str = typer.Option(
        None,
        "--out",
        help="Directory for the event files (one per run) for --to tensorboard.",
        click_type=PathText(),
    ),
    experiment: str = typer.Option("dlperf", "--experiment", help="MLflow experiment name."),
    as_json: Json = False,
) -> None:
    """Export runs to MLflow (params, metrics, tags, artifacts) or TensorBoard (scalars).

    Needs the extra: pip install 'dlperf[mlflow]' or 'dlperf[tensorboard]'. TensorBoard
    gets one directory per run, OUT/run-ID-NAME: tensorboard --logdir OUT.

    Example: dlperf runs export 1 2 --to mlflow --uri sqlite:///mlflow.db
    """
    if to not in TARGETS:
        raise UserError(f"--to must be one of {', '.join(TARGETS)}, got {to!r}")
    if to == "mlflow" and out is not None:
        raise UserError("--out is for --to tensorboard; MLflow takes --uri")
    if to == "tensorboard" and _given(ctx, "uri"):
        raise UserError("--uri is for --to mlflow; TensorBoard takes --out DIR")
    if to == "tensorboard" and _given(ctx, "experiment"):  # was dropped, exit 0 (round 42)
        raise UserError("--experiment is for --to mlflow; TensorBoard names each run's folder")
    if to == "mlflow" and uri is None:
        raise UserError("--to mlflow needs --uri", "e.g. --uri sqlite:///mlflow.db")
    if to == "tensorboard" and out is None:
        raise UserError("--to tensorboard needs --out DIR", "e.g. --out tb")
    if to == "mlflow":
        not_blank(uri, "--uri names MLflow's tracking store", "--uri sqlite:///mlflow.db")
    else:
        not_blank(out, "runs export writes TensorBoard's event files into a directory", "--out tb")

    from dlperf import exporters

    store = open_store(create=False)
    if to == "mlflow":
        try:
            result = exporters.export_mlflow(store, run_ids, uri, experiment)
        except KeyboardInterrupt as stop:  # a run it left part-written in MLflow is named
            with stopping.spared():  # a stopped command's last words
                # a second Ctrl-C's interrupt, raised as the first's mark was made, holds it
                for cause in causes(stop):
                    if isinstance(cause, KeyboardInterrupt):
                        for left in noted_left(cause):
                            console.err_line(left)
            raise
    else:
        result = exporters.export_tensorboard(store, run_ids, Path(out))
    # The export is in place: a stop signal from here on does not unsay it, as `run`'s once
    # its run is stored. It exited 130 after "exported to ...", the table cut off. (The
    # TensorBoard export settles already as its runs are moved into place: a stop that waited
    # for the move counts no more than one that comes now.)
    stopping.settle()
    console.tell(result["warnings"])
    console.gone(result.pop("gone", []), "runs export")  # said here, as by report and doctor
    if console.printed_json(as_json, result):
        return
    if to == "mlflow":
        keys = ("mlflow_run_id", "params", "metrics", "points", "tags", "artifacts")
        console.print_table(
            f"exported to MLflow {result['uri']}, experiment {experiment} "
            f"({result['experiment_id']})",
            ["run", "mlflow run", "params", "metrics", "points", "tags", "artifacts"],
            [[int(i), *(r[k] for k in keys)] for i, r in result["runs"].items()],
        )
    else:
        console.print_table(
            f"exported to TensorBoard: tensorboard --logdir {out}",
            ["run", "event directory", "metrics", "points"],
            [[int(i), r["dir"], r["metrics"], r["points"]] for i, r in result["runs"].items()],
        )


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether an option was on the command line (MLFLOW_TRACKING_URI alone does not count)."""
    source = ctx.get_parameter_source(name)  # typer's own click: compare by name
    return getattr(source, "name", None) == "COMMANDLINE"
