"""Records one part of dlperf hands another, each a frozen dataclass with one codec that its
writer and its reader both use; the run summary every training run stores, and how a run
ended (`RunResult`).

`from_dict` refuses a missing or an unknown field with a `ContractError` naming the record
and the fields, rather than a KeyError far from the cause. No torch (the standard library
and dlperf.paths only): the TensorFlow worker, the doctor and the report read these.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self, get_args, get_origin, get_type_hints

from dlperf.paths import atomic_write


class ContractError(ValueError):
    """A record that does not have the fields its contract names."""


def checked(cls: type, data: object) -> dict[str, Any]:
    """`data` as `cls`'s keyword arguments: every field without a default present, none
    unknown."""
    name = cls.__name__
    if not isinstance(data, Mapping):
        raise ContractError(f"{name}: expected an object, got {type(data).__name__}")
    fields = dataclasses.fields(cls)
    required = {
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    missing = sorted(required - data.keys())
    unknown = sorted(data.keys() - {f.name for f in fields})
    if missing:
        raise ContractError(f"{name}: missing field(s) {', '.join(missing)}")
    if unknown:
        raise ContractError(f"{name}: unknown field(s) {', '.join(unknown)}")
    return dict(data)


def plain(value: Any) -> Any:
    """`value` as JSON holds it: tuples as lists, all the way down."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _decode(hint: Any, value: Any) -> Any:
    """`value`, as JSON holds it, as a field of type `hint`: records built, lists as tuples."""
    if value is None:
        return None
    if isinstance(hint, types.UnionType):  # X | None
        [hint] = [a for a in get_args(hint) if a is not type(None)]
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_dict(value)
    if get_origin(hint) is tuple:
        return tuple(_decode(get_args(hint)[0], v) for v in value)
    return value


class Record:
    """The one codec of every record dataclass: `to_dict` with tuples as lists, the strict
    `from_dict` (nested records and tuples rebuilt from the field types), a file of it, and
    `stored` for a summary a store may hold from another version, or none."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = plain(asdict(self))  # type: ignore[call-overload]
        return data

    @classmethod
    def from_dict(cls, data: object) -> Self:
        hints = get_type_hints(cls)
        return cls(**{k: _decode(hints[k], v) for k, v in checked(cls, data).items()})

    def write(self, path: Path) -> None:
        atomic_write(path, json.dumps(self.to_dict()))

    @classmethod
    def read(cls, path: Path) -> Self:
        return cls.from_dict(json.loads(path.read_text()))

    @classmethod
    def stored(cls, data: object) -> Self | None:
        """A stored run's summary, or None where it is not one (a run that failed first)."""
        try:
            return cls.from_dict(data)
        except ContractError:
            return None


Spread = dict[str, float]  # {"min": .., "median": .., "max": ..}


@dataclass(frozen=True)
class RunSummary(Record):
    """What a training run stores as its summary when it ends (`dlperf run`, a sweep's point,
    a distillation's student), read back by the doctor, the report, `runs show` and the API.

    Every field has a default: summaries stored by older versions lack the fields added
    since, and a run that stopped early has no test figures."""

    test_accuracy: float | None = None
    test_top5: float | None = None
    test_loss: float | None = None
    best_val_accuracy: float | None = None
    epochs: int = 0
    steps: int = 0
    steps_per_epoch: int | None = None
    samples_per_step: int | None = None
    epochs_to_target: int | None = None
    time_to_target_s: float | None = None
    throughput: float | None = None  # samples/s over the timed steps
    timed_samples: int | None = None  # after the warm-up and any profiled window
    throughput_spread: Spread | None = None  # over epochs
    train_time_s: float | None = None
    cpu_time_s: float | None = None
    # the share of the timed windows' runnable thread-time spent waiting for a CPU, and the
    # figures it comes from (dlperf.contention.Contention)
    cpu_wait_share: float | None = None
    contention: dict[str, Any] | None = None
    reliable: bool | None = None  # None: not judged (a run older than the marks)
    reliability_note: str | None = None  # why not, when not
    elapsed_s: float | None = None
    phases: dict[str, float] | None = None  # seconds per step in each phase
    phase_clock: str | None = None  # what timed the phases (cuda events, wall clock)
    step_time_spread: Spread | None = None
    peak_memory_bytes: int | None = None
    gpu_memory: dict[str, Any] | None = None
    gpu_utilization_pct: Spread | None = None
    device: str | None = None  # where it trained, e.g. cpu or cuda:0
    threads: int | None = None  # intra-op threads
    data: dict[str, Any] | None = None  # the data set it trained on, as the run resolved it
    transfer: dict[str, Any] | None = None  # what a fine-tuned run started from

    @classmethod
    def stored(cls, data: object) -> Self:
        """A stored summary as far as this version knows it: the readers (doctor, report)
        must not fail on a store written by another version, whose summaries may hold
        fields unknown here."""
        known = {f.name for f in dataclasses.fields(cls)}
        given = data if isinstance(data, Mapping) else {}
        return cls(**{k: v for k, v in given.items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        """The summary as it is stored; `transfer` only for a run that started from weights,
        as stored summaries of runs from scratch have never had the key."""
        data = super().to_dict()
        if self.transfer is None:
            del data["transfer"]
        return data


FINISHED, FAILED = "finished", "failed"


@dataclass(frozen=True)
class RunResult(Record):
    """How a training run this process recorded ended: `finished` with its summary, or
    `failed` softly (its loss diverged) with the error stored on the run. Any other end
    raises instead. `to_dict()` is `dlperf run --json`'s document: run_id and status, then
    the summary's fields or the error."""

    run_id: int
    status: str  # FINISHED | FAILED
    summary: RunSummary | None = None  # a finished run's
    error: str | None = None  # a failed run's

    @property
    def finished(self) -> bool:
        return self.status == FINISHED

    def __getitem__(self, key: str) -> Any:
        """The `to_dict()` document's `key`: `dlperf.run(...)["test_accuracy"]`, as docs/api.md
        has promised its callers since `run` returned that document."""
        return self.to_dict()[key]

    def to_dict(self) -> dict[str, Any]:
        head: dict[str, Any] = {"run_id": self.run_id, "status": self.status}
        if self.summary is None:
            return head | {"error": self.error}
        return head | self.summary.to_dict()

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """The result of `to_dict`'s document, as strictly as every record's."""
        if not isinstance(data, Mapping) or not {"run_id", "status"} <= data.keys():
            raise ContractError(f"{cls.__name__}: expected an object with run_id and status")
        rest = {k: v for k, v in data.items() if k not in ("run_id", "status")}
        if data["status"] != FINISHED:
            return cls(**checked(cls, {"run_id": data["run_id"], "status": data["status"], **rest}))
        return cls(data["run_id"], FINISHED, RunSummary.from_dict(rest))
