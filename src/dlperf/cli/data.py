"""`dlperf data describe`: what a data set holds."""

from __future__ import annotations

from pathlib import Path

import typer

from dlperf.cli import console
from dlperf.cli.app import app
from dlperf.errors import UserError

data_app = typer.Typer(
    help="Look at a data set before training on it.\n\nExample: dlperf data describe digits",
    no_args_is_help=True,
)
app.add_typer(data_app, name="data")


@data_app.command("describe")
def describe(
    dataset: str = typer.Argument(..., help="A data set name (see `dlperf datasets`)."),
    set_: list[str] = typer.Option(
        [], "--set", help="A [data] key, e.g. --set data.root=~/data (repeatable)."
    ),
    out: Path = typer.Option(
        None, "--out", help="Directory for the figures (default dlperf_runs/data-NAME)."
    ),
    per_class: int = typer.Option(8, "--per-class", help="Sample images shown per class."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Classes, training images per class, split sizes, image shape, per-channel mean and
    std, a bar chart of the classes and a grid of sample images.

    Example: dlperf data describe mnist5k --per-class 6 --out figures
    """
    from dlperf.config import load_experiment
    from dlperf.data.describe import describe as describe_data

    if per_class < 1:
        raise UserError(f"--per-class must be at least 1, got {per_class}")
    for assignment in set_:
        if not assignment.startswith("data."):
            raise UserError(f"--set {assignment!r}: only [data] keys apply here", "data.KEY=V")
    exp = load_experiment(None, [f'data.name="{dataset}"', *set_])
    where = out if out is not None else Path("dlperf_runs") / f"data-{exp.data.name}"
    result = describe_data(exp.data, where, per_class)
    if as_json:
        console.print_json(result)
        return
    shape = "x".join(map(str, result["image_shape"]))
    console.print_table(
        f"{result['name']}: {len(result['classes'])} classes, images {shape}",
        ["", "value"],
        [
            *([f"{split} images", n] for split, n in result["splits"].items()),
            ["mean per channel", ", ".join(f"{m:.4f}" for m in result["mean"])],
            ["std per channel", ", ".join(f"{s:.4f}" for s in result["std"])],
        ],
    )
    console.print_table(
        "training images per class", ["class", "images"], list(result["counts"].items())
    )
    console.tell([], result["plots"]["counts"])
    console.tell([], result["plots"]["samples"])
