"""A stored run as its readers see it: one typed record, its status as it stands."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from dlperf.procs import process_alive

if TYPE_CHECKING:
    from dlperf.records import RunSummary

RUNNING, LOST = "running", "lost"  # `lost` is shown, never stored
# What a run may be stored as (the store's check; SQLAlchemy-free, so listings read it too).
STATUSES = (RUNNING, "finished", "failed", "killed")


@dataclass(frozen=True)
class RunRecord:
    """One run of the store. `status` is the stored one, except that a run stored as
    `running` whose recording process is known to be gone (killed with SIGKILL, the machine
    rebooted...) reads `lost`; runs of other hosts, or of a dlperf that recorded no process,
    stay `running`. It is worked out when the run is read, never written, so any number of
    readers may look at once and a resumed run is simply `running` again."""

    id: int
    study_id: int | None
    name: str
    kind: str
    status: str
    config: dict[str, Any]
    config_hash: str | None
    system: dict[str, Any] | None
    summary: dict[str, Any] = field(default_factory=dict)
    started: str = ""
    ended: str | None = None
    error: str | None = None
    tags: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, stored_status: str, system: dict[str, Any] | None, **fields: Any) -> RunRecord:
        """The record of a row whose status column holds `stored_status`. A config stored as
        JSON null (a hand edit) reads as `{}`, no keys, for every reader alike, as a summary
        stored so does: compare and --where crashed on it where show and report coped."""
        if fields.get("config") is None:
            fields["config"] = {}
        return cls(status=current_status(stored_status, system), system=system, **fields)

    @property
    def unfinished(self) -> bool:
        """Stored as `running`: still running, or lost. Only such a run may be marked now."""
        return self.status in (RUNNING, LOST)

    @property
    def process(self) -> dict[str, Any] | None:
        """The recording process (host, pid, start time, boot id), when one was recorded."""
        return recorded_process(self.system)

    @property
    def trained(self) -> RunSummary:
        """A training run's summary, typed; every field at its default for runs of other
        kinds, whose summaries have their own shapes."""
        from dlperf.records import RunSummary  # lazily: `runs list` never needs it

        return RunSummary.stored(self.summary) if self.kind == "run" else RunSummary()

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON output and exports write it."""
        return asdict(self)


def current_status(stored: str, system: dict[str, Any] | None) -> str:
    """`stored`, or `lost` for a `running` run whose recording process is known to be gone."""
    if stored != RUNNING:
        return stored
    process = recorded_process(system)
    if process is not None and process_alive(process) is False:
        return LOST
    return RUNNING


def recorded_process(system: dict[str, Any] | None) -> dict[str, Any] | None:
    """The process a run's system record names, when one was recorded."""
    process = (system or {}).get("process")
    return process if isinstance(process, dict) else None
