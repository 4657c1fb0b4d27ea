"""`dlperf data describe | samples`: what a data set holds, and its images as files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from dlperf.cli import console, outputs
from dlperf.cli.app import Json, app
from dlperf.errors import UserError
from dlperf.parsing import name_text

data_app = typer.Typer(
    help="Look at a data set before training on it, or write some of its images as PNG "
    "files.\n\nExample: dlperf data describe digits",
    no_args_is_help=True,
)
app.add_typer(data_app, name="data")


CLASSES_HELP = (
    "Classes: N (the first N) or a comma list of names or indices (cat,dog or 3,7; one class: "
    "7,). Default: all."
)
# '' is refused as parsed, not taken as the current directory (outputs.OutPath).
FIGURES_DIR = outputs.OutPath("data describe writes its figures into a directory", "--out figures")
SAMPLES_DIR = outputs.OutPath("data samples writes its PNG files into a directory", "--out samples")


def _data_sets(dataset: str, set_: list[str], allowed: tuple[str, ...]) -> list[str]:
    """The --set assignments with data.name, refusing keys outside `allowed` sections."""
    for assignment in set_:
        if not assignment.startswith(allowed):
            keys = " and ".join(f"[{a.rstrip('.')}]" for a in allowed)
            raise UserError(
                f"--set {assignment!r}: only {keys} keys apply here",
                " or ".join(f"{a}KEY=V" for a in allowed),
            )
    return [f'data.name="{dataset}"', *set_]


def _classes(value: str | None) -> int | list[str] | None:
    """--classes N (the first N) or A,B,... (names or indices; any comma makes it a list).
    Each name is kept as typed: a class folder may be named 'cat ' (`pick_classes` matches a
    name without its spaces only where that names one class, as "a, b" does)."""
    if value is None:
        return None
    if value.strip().lstrip("-").isdigit():
        return int(value)
    return [item for item in value.split(",") if item.strip()]


@data_app.command("describe")
def describe(
    dataset: str = typer.Argument(..., help="A data set name (see `dlperf datasets`)."),
    set_: list[str] = typer.Option(
        [],
        "--set",
        help="A [data] or [augment] key, e.g. --set data.root=~/data or --set augment.cutout=8 "
        "(repeatable); an [augment] key shows each sample beside its augmented copies.",
    ),
    out: Path = typer.Option(
        None,
        "--out",
        help="Directory for the figures (default dlperf_runs/data-NAME).",
        click_type=FIGURES_DIR,
    ),
    classes: str = typer.Option(None, "--classes", help=f"In the sample grid. {CLASSES_HELP}"),
    per_class: int = typer.Option(8, "--per-class", help="Sample images shown per class."),
    as_json: Json = False,
) -> None:
    """Classes, training images per class, split sizes, image shape, per-channel mean and
    std, a bar chart of the classes and a grid of sample images; with an [augment] key set,
    each sample beside what training's augmentation makes of it.

    Example: dlperf data describe digits --set augment.cutout=4 --classes 2 --per-class 2
    """
    from dlperf.config import load_experiment
    from dlperf.data.describe import describe as describe_data
    from dlperf.data.describe import outside_the_set
    from dlperf.paths import made_dir
    from dlperf.report.data import plot_counts, plot_samples

    if per_class < 1:
        raise UserError(f"--per-class must be at least 1, got {per_class}")
    exp = load_experiment(None, _data_sets(dataset, set_, ("data.", "augment.")))
    where = out if out is not None else Path("dlperf_runs") / f"data-{exp.data.name}"
    outside_the_set(exp.data, where)  # before made_dir makes a folder in the set
    # the folder made before the reading, removed if the data is refused; the reading reported
    with console.reporter() as rep, made_dir(where):
        desc = describe_data(exp.data, exp.augment, _classes(classes), per_class, rep)
    changed = desc.augment.model_dump(exclude_defaults=True) if desc.augment else {}
    setting = ", ".join(f"{k}={v}" for k, v in changed.items())
    name = desc.name
    counts = plot_counts(where / f"{name}-counts.png", name, desc.classes, desc.counts)
    grid = plot_samples(
        where / f"{name}-samples.png", name, desc.shown, desc.samples, desc.augmented, setting
    )
    plots = {"counts": str(counts), "samples": str(grid)}
    result = {**desc.summary(), "plots": plots}
    for warning in desc.warnings:  # with --json too: on stderr, beside the document
        console.err_line(f"warning: {warning}")  # one line, however long
    if console.printed_json(as_json, result):
        return
    console.print_table(
        _title(result),
        ["", "value"],
        [
            *([f"{split} images", n] for split, n in result["splits"].items()),
            ["mean per channel", ", ".join(f"{m:.4f}" for m in result["mean"])],
            ["std per channel", ", ".join(f"{s:.4f}" for s in result["std"])],
            ["mean/std measured on", desc.stats_basis],
        ],
    )
    console.print_table("training images per class", ["class", "images"], _shown(result["counts"]))
    console.tell([], plots["counts"], plots["samples"])


def _title(summary: dict[str, Any]) -> str:
    """The title of `data describe`'s table, of a `Description.summary()`."""
    shape = "x".join(map(str, summary["image_shape"]))
    classes = _counted(len(summary["classes"]), "class", "classes")
    return f"{summary['name']}: {classes}, images {shape}"


def _counted(n: int, noun: str, nouns: str | None = None) -> str:
    """`n` of `noun`, its plural (`nouns`, else noun + s) unless n is 1: a one-class folder's
    summary said "1 classes", its sample "wrote 1 images"."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


SHOWN_CLASSES = 200  # rows of the per-class table; --json lists every class


def _shown(counts: dict[str, int]) -> list[list[object]]:
    """Every class in order, or past SHOWN_CLASSES the half with the most training images and
    the half with the fewest, a row between saying how many more --json lists: 100,000 rows
    took rich 42 s to print and no reader reads them."""
    # name_text: "a" and "a " are two classes, and a cell's padding showed both as a.
    pairs = [(name_text(name), n) for name, n in counts.items()]
    if len(pairs) <= SHOWN_CLASSES:
        return [[name, n] for name, n in pairs]
    half = SHOWN_CLASSES // 2
    ranked = sorted(pairs, key=lambda kv: -kv[1])
    more = (
        f"... {_counted(len(ranked) - SHOWN_CLASSES, 'more class', 'more classes')} (all in --json)"
    )
    return [[name, n] for name, n in [*ranked[:half], (more, None), *ranked[-half:]]]


@data_app.command("samples")
def samples(
    dataset: str = typer.Argument(..., help="A data set name (see `dlperf datasets`)."),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Directory to write the PNG files into.",
        click_type=SAMPLES_DIR,
    ),
    per_class: int = typer.Option(1, "--per-class", help="Images written per class."),
    classes: str = typer.Option(None, "--classes", help=CLASSES_HELP),
    split: str = typer.Option("test", "--split", help="train | val | test."),
    set_: list[str] = typer.Option(
        [], "--set", help="A [data] key, e.g. --set data.root=~/data (repeatable)."
    ),
    as_json: Json = False,
) -> None:
    """Write a few images of each class of a data set's split as PNG files (SPLIT-INDEX-
    CLASS.png, at the images' own size, as the loader holds them), to run inference on or
    look at.

    Example: dlperf data samples digits --per-class 1 --out samples
    """
    from dlperf.config import load_experiment
    from dlperf.data.samples import write_samples

    exp = load_experiment(None, _data_sets(dataset, set_, ("data.",)))
    with console.reporter() as rep:  # 10^5 files of an image folder take minutes to read
        done = write_samples(exp.data, out, per_class, _classes(classes), split, rep)
    console.tell(done["warnings"])
    if console.printed_json(as_json, done):
        return
    console.print_table(
        f"{done['dataset']}: {_counted(len(done['files']), done['split'] + ' image')}",
        ["file", "class", "index"],
        [[f["path"], name_text(f["class"]), f["index"]] for f in done["files"]],
    )
    console.err.print(f"wrote {_counted(len(done['files']), 'image')} to {out}")
