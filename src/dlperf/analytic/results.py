"""The base of the analytic and convergence results: a `dlperf.records.Record` whose JSON
leaves out the keys its command never printed (a prediction's "measured" without
--measure), rather than printing them as null, and writes nested results through their own
`to_dict`, so a nested result leaves out its keys too. No torch, no NumPy: the command line
imports the results' modules at start-up."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from typing import Any, ClassVar

from dlperf.records import Record


def _plain(value: Any) -> Any:
    """`value` as JSON holds it: results through their `to_dict`, tuples as lists."""
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class Result(Record):
    """A frozen dataclass's one codec for `--json` and the store: its fields in order, less
    those `left_out` names."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ()
    """Fields that are absent from the JSON, not null, when they are None."""

    def left_out(self) -> Iterable[str]:
        return (name for name in self.OPTIONAL if getattr(self, name) is None)

    def to_dict(self) -> dict[str, Any]:
        absent = set(self.left_out())
        names = [f.name for f in fields(self)]  # type: ignore[arg-type]  # a dataclass's base
        return {name: _plain(getattr(self, name)) for name in names if name not in absent}
