"""`dlperf models` and `dlperf datasets`: what the registries hold."""

from __future__ import annotations

import typer

from dlperf.cli import console
from dlperf.cli.app import app


@app.command()
def models(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """List model names: dlperf's own networks and torchvision's classification zoo.

    Any of them, or path/to/file.py:factory, goes in [model] name.

    Example: dlperf models --json
    """
    from dlperf.models import list_models

    names = list_models()
    if as_json:
        console.print_json(names)
        return
    for source, listed in names.items():
        console.out.print(f"{source} ({len(listed)}): {', '.join(listed)}", markup=False)


@app.command()
def datasets(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """List data set names for [data] name, with where each reads from.

    Example: dlperf datasets
    """
    from dlperf.data.sources import DATASETS

    rows = [[name, (fn.__doc__ or "").strip().splitlines()[0]] for name, fn in DATASETS.items()]
    if as_json:
        console.print_json(dict(rows))
        return
    console.print_table(None, ["name", "source"], rows)
