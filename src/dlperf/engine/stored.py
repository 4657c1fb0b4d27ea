"""What the engine reads of stored runs, as protocols that dlperf.store's `RunStore` and
`RunRecord` meet: starting weights `run:ID` and a run's last checkpoint are found through
them, so the engine never imports the store. Opening and marking runs, leases and studies
belong to the layer above (dlperf.experiment).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from dlperf.records import RunSummary


class StoredRun(Protocol):
    """A run as the store reads it back."""

    @property
    def id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...  # "run" for a training run

    @property
    def status(self) -> str: ...

    @property
    def config(self) -> dict[str, Any]: ...

    @property
    def config_hash(self) -> str | None: ...

    @property
    def trained(self) -> RunSummary: ...


class StoredRuns(Protocol):
    """The reads of a run store the engine makes."""

    @property
    def id(self) -> str: ...  # the store's own id, stamped on every checkpoint

    def get_run(self, run_id: int) -> StoredRun: ...

    def list_runs(self, kind: str | None = None) -> Sequence[StoredRun]: ...

    def artifacts(self, run_id: int) -> list[dict[str, Any]]: ...

    def last_step(self, run_id: int, key: str) -> int | None: ...
