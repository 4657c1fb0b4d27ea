"""Options naming a file or folder to write, checked as they are parsed: '' and blanks
(`OutPath`), the run store itself or a file its runs keep (`_out_file`), and a figure's
format (`_plot_path`), so that a path that cannot be written costs no work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from typer.models import TyperPath

from dlperf.parsing import not_blank


def _plot_path(path: Path | None) -> Path | None:
    """--plot is checked as it is parsed, so that a figure that cannot be saved costs no fit."""
    if path is not None:
        from dlperf.report.curves import check_path

        check_path(path)
    return path


def _out_file(ctx: typer.Context, param: typer.CallbackParam, path: Path | None) -> Path | None:
    """An output file refused as it is parsed where it is the run store the command line names
    (--db, DLPERF_DB, else the default) or a file the store keeps (`reading.not_the_store`)."""
    if path is not None:
        from dlperf.store.reading import not_the_store

        not_the_store(path, param.opts[0], ctx.find_root().params.get("db"))
    return path


def _plot_option(ctx: typer.Context, param: typer.CallbackParam, path: Path | None) -> Path | None:
    return _plot_path(_out_file(ctx, param, path))


class OutPath(TyperPath):
    """The type of a path to write, refused in one line as it is parsed when it is '' or
    blanks (`parsing.not_blank`, report's check: "WHAT, not '' (give its path, e.g.
    EXAMPLE)"). Typer makes '' Path('.'): `data samples --out ''` wrote its images into the
    current directory, exit 0, and '  ' made a folder named by the blanks."""

    def __init__(self, what: str, example: str) -> None:
        super().__init__()  # as Typer makes a Path parameter's type
        self.what, self.example = what, example

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str):  # a default is a Path already
            not_blank(value, self.what, self.example)
        return super().convert(value, param, ctx)


PLOT = typer.Option(
    None,
    "--plot",
    help="Save a figure (PNG, PDF, SVG).",
    callback=_plot_option,
    click_type=OutPath("--plot names the figure to write", "--plot fig.png"),
)


def out_file(
    default: Any, help: str, name: str = "--out", thing: str = "file", example: str = "FILE"
) -> Any:
    """An option naming a file to write (`_out_file`): an ONNX file, a figure or a checkpoint
    saved over the store replaced every run in it. '' is refused (`OutPath`): "NAME names the
    THING to write, not '' (give its path, e.g. NAME EXAMPLE)"."""
    out = OutPath(f"{name} names the {thing} to write", f"{name} {example}")
    return typer.Option(default, name, help=help, callback=_out_file, click_type=out)
