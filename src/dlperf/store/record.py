"""A stored run as its readers see it: one typed record, its status as it stands."""

from __future__ import annotations

import contextlib
import functools
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from dlperf.parsing import flatten
from dlperf.procs import process_alive

if TYPE_CHECKING:
    from dlperf.records import RunSummary

RUNNING, LOST = "running", "lost"  # `lost` is shown, never stored
# What a run may be stored as (the store's check; SQLAlchemy-free, so listings read it too).
STATUSES = (RUNNING, "finished", "failed", "killed")


def read_place(recorded: str | None) -> dict[str, Any] | None:
    """A PostgreSQL store's place as its `home`, its `copy_file` and its runs' `process.store`
    record it (`runstore._server_place`), read back; None for a SQLite file's path."""
    if recorded is None or not recorded.startswith("{"):
        return None
    with contextlib.suppress(ValueError, TypeError):
        place = json.loads(recorded)["postgresql"]
        if isinstance(place, dict):
            return place
    return None


def place_named(place: dict[str, Any]) -> tuple[tuple[int, int], str] | None:
    """A place's database and schema oids, and the words a line names it by; None for one
    that cannot be read (set by hand)."""
    try:
        database, schema = place["database"], place["schema"]
        key = (int(database[0]), int(schema[0]))
        return key, f"PostgreSQL database {database[1]}, schema {schema[1]}"
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def place_words(recorded: Any) -> Any:
    """A recorded store place as a table shows it: a PostgreSQL store's database and schema
    (and its server's system identifier) in words, where its record is JSON that `runs show`
    and the report printed as it was; a SQLite file's path, or anything else, as it is."""
    place = read_place(recorded) if isinstance(recorded, str) else None
    named = place_named(place) if place is not None else None
    if place is None or named is None:
        return recorded
    server = place.get("server")
    return named[1] if server is None else f"{named[1]} (server {server})"


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

    # Worked out once a record: `--where` reads them for every run at every clause, and a
    # 100,000-run store spent 15 s a clause flattening the same configs again.
    @functools.cached_property
    def flat_config(self) -> dict[str, Any]:
        """The config's keys dotted (`flatten`): train.lr. Read only."""
        return flatten(self.config)

    @functools.cached_property
    def flat_summary(self) -> dict[str, Any]:
        """The summary by its own keys and its nested ones dotted (final.train/loss). Read
        only."""
        return self.summary | flatten(self.summary)

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
