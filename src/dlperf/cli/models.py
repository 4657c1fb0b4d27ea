"""`dlperf models` and `dlperf datasets`: what the registries hold.

Both read tables shipped beside the registries (dlperf.shipped) rather than the registries
themselves, which import torch: listing names answers at once.
"""

from __future__ import annotations

from importlib import metadata

from dlperf.cli import console
from dlperf.cli.app import Json, app
from dlperf.shipped import dataset_table, shipped


def model_names() -> dict[str, list[str]]:
    """The registry's names and torchvision's zoo; from names.toml when it was written for the
    installed torchvision, else from torchvision itself."""
    table = shipped("models/names.toml")
    if table["torchvision_version"] != metadata.version("torchvision"):
        from dlperf.models import list_models

        return list_models()
    return {"dlperf": table["dlperf"], "torchvision": table["torchvision"]}


@app.command()
def models(as_json: Json = False) -> None:
    """List model names: dlperf's own networks and torchvision's classification zoo.

    Any of them, or path/to/file.py:factory, goes in [model] name.

    Example: dlperf models --json
    """
    names = model_names()
    if console.printed_json(as_json, names):
        return
    for source, listed in names.items():
        console.out.print(f"{source} ({len(listed)}): {', '.join(listed)}")


@app.command()
def datasets(as_json: Json = False) -> None:
    """List data set names for [data] name: where each reads from, its classes and image shape.

    Example: dlperf datasets
    """
    table = dataset_table()
    if console.printed_json(as_json, table):
        return
    rows = [
        [
            name,
            meta.get("classes"),
            "x".join(map(str, meta["shape"])) if "shape" in meta else None,
            meta["source"],
        ]
        for name, meta in table.items()
    ]
    console.print_table(None, ["name", "classes", "image", "source"], rows)
