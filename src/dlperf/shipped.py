"""The tables shipped beside the registries (models/names.toml, data/datasets.toml), read
without importing the registries themselves, which import torch: listing names, or the doctor
looking up a data set's classes, answers at once."""

from __future__ import annotations

import functools
import tomllib
from importlib import resources
from typing import Any


def shipped(path: str) -> dict[str, Any]:
    """A TOML table shipped in the package, by its path inside it."""
    return tomllib.loads((resources.files("dlperf") / path).read_text())


@functools.cache
def dataset_table() -> dict[str, dict[str, Any]]:
    """Each data set's source, and its classes and image shape where the set fixes them."""
    return shipped("data/datasets.toml")
