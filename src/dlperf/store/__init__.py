"""The run store: studies, runs, metrics and artifacts in any SQLAlchemy database
(`runstore.RunStore`; the schema, its versions, the damage check and the readers beside it).

The names below are imported from `runstore` when first used, not with the package: that
module imports SQLAlchemy, most of the start-up of a command that only lists runs, which
reads a SQLite store with the standard library instead (`reading`).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dlperf.store.record import STATUSES
    from dlperf.store.runstore import (
        BUSY_TIMEOUT_S,
        DEFAULT_DB,
        Deleted,
        Recording,
        RunStore,
        masked_url,
        repair,
        went_on_in,
        writer_refusal,
    )

__all__ = [
    "BUSY_TIMEOUT_S",
    "DEFAULT_DB",
    "STATUSES",
    "Deleted",
    "Recording",
    "RunStore",
    "masked_url",
    "repair",
    "went_on_in",
    "writer_refusal",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("dlperf.store.runstore"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
