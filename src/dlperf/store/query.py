"""Reading runs as `dlperf runs list | show | compare | delete` and `dlperf.api.Store` do: runs
as they stand (`lost` for a dead `running` one), the `--where KEY=VALUE` filters, one run with
its per-epoch metrics, what differs between runs with the numeric change of each result, the
tags `runs tag` sets, and which runs may be deleted (and stopping those still running first)."""

from __future__ import annotations

import contextlib
import decimal
import difflib
import json
import math
import os
import re
import signal
import time
import tomllib
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf import clocks
from dlperf.errors import NoSuchRun, UserError
from dlperf.formatting import FIXED_MAX, few, fmt, scaled
from dlperf.parsing import (
    clipped,
    did_you_mean,
    flatten,
    has_control,
    name_text,
    nameable,
    quoted,
    same_text,
    stored_as,
    unprintable,
)
from dlperf.procs import PROCESS_KEYS, process_alive, this_process
from dlperf.procs import stopped as is_stopped
from dlperf.store.record import LOST, place_words
from dlperf.store.record import STATUSES as STORED

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

    from dlperf.store import RunStore
    from dlperf.store.reading import Listing
    from dlperf.store.record import RunRecord

SUMMARY_KEYS = (
    "test_accuracy",
    "best_val_accuracy",
    "epochs_to_target",
    "time_to_target_s",
    "elapsed_s",
    "throughput",
    "cpu_wait_share",
    "reliability_note",
    "train_time_s",
    "epochs",
    "peak_memory_bytes",
)
# Summary keys `runs show` prints in places of their own: the device at the top, the phase
# breakdown as a table.
SHOWN_APART = ("device", "phases")
# The run's own fields that --where reads (besides summary keys, config keys and tag.NAME).
RUN_FIELDS = ("id", "study_id", "name", "kind", "status", "config_hash", "error")
# The prefix of a --where key read from the run's config alone: a tracked run's config may
# hold `name`, `status` or a table `tag` at its top, which the plain key reads elsewhere.
CONFIG = "config."
# The statuses a run reads as: those it is stored as, and `lost`.
STATUSES = (*STORED, LOST)
# The kinds of run dlperf writes. A store may hold others (made by hand, by another version),
# which a run holding them makes known too.
KINDS = ("run", "scale", "allreduce", "detect", "calibrate", "predict", "staleness", "select")
MIB = 2**20


# The execution option of a stand-in store (`RunStore._empty`): why the store is not there.
ABSENT = "dlperf_absent"
# How many keys of a table the refusal of `--where TABLE=...` names (`train` has 22).
TABLE_KEYS_NAMED = 5
# How to name the store, for a reader of a store that is not there.
GIVE_STORE = (
    "give the store with --db or DLPERF_DB (by default: ./dlperf.db, in the current directory)"
)


def no_such_run(bind: Engine | Connection, ids: str, then: str = "") -> NoSuchRun:
    """`no run IDS in the store`, the words `then` after; of the stand-in of a store that is
    not there (a mistyped --db, most likely), that the store is not there and how to give it."""
    absent = bind.get_execution_options().get(ABSENT)
    if absent:
        return NoSuchRun(f"no run {ids}: {absent}{then}", GIVE_STORE)
    return NoSuchRun(f"no run {ids} in the store{then}", "see `dlperf runs list`")


def no_such_study(bind: Engine | Connection, study_id: int) -> UserError:
    """`no study N in the store`; of the stand-in of a store that is not there, that the store
    is not there and how to give it, as `no_such_run` says it."""
    absent = bind.get_execution_options().get(ABSENT)
    if absent:
        return UserError(f"no study {study_id}: {absent}", GIVE_STORE)
    return UserError(f"no study {study_id} in the store")


def no_runs(bind: Engine | Connection) -> UserError:
    """The refusal of a reader of the newest runs (`report`, `doctor`) where there are none:
    "the run store holds no runs" of a store that is there; of the stand-in of a store that
    is not there, what `no_such_run` says of it (its path, that it is not there, how to give
    it). A mistyped path was told it held no runs, as if there and empty, and to train one."""
    absent = bind.get_execution_options().get(ABSENT)
    if absent:
        return UserError(absent, GIVE_STORE)
    return UserError("the run store holds no runs", "train one: dlperf run EXP.toml")


def config_value(config: dict[str, Any], dotted: str) -> Any:
    """A config key by its dotted name (model.name), None when the run has none."""
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _shown(key: str, values: list[Any], epochs: list[Any]) -> tuple[str, list[Any]]:
    """A result's label and values as tables show them, of runs that trained `epochs`: peak
    memory in MiB, each clock labelled with what it counts (dlperf.clocks)."""
    if key == "peak_memory_bytes":
        return "peak memory MiB", [v / MIB if _number(v) else v for v in values]
    return clocks.label(key, epochs), values


def summary_rows(summary: dict[str, Any], own: bool = False) -> list[tuple[str, Any]]:
    """The run's results that it has, in SUMMARY_KEYS order, peak memory in MiB. `own`: then
    every other key of its summary (a detect run's mAP, a scale point's speedup), flattened
    and with its unit as the report shows it (12.5 s, 87.5%), less SHOWN_APART."""
    epochs = [summary.get("epochs")]
    shown = [_shown(key, [summary[key]], epochs) for key in SUMMARY_KEYS if key in summary]
    rows = [(label, value) for label, (value,) in shown]
    if own:
        rows += [(key, scaled(key, value) or value) for key, value in own_results(summary).items()]
    return rows


def own_results(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary's keys besides SUMMARY_KEYS and SHOWN_APART, flattened (`final.train/loss`):
    the results of a run that is not a training run (see `shows_own`), as stored. An empty
    table is no result: a tracked run that logged nothing keeps `final: {}`, which `runs
    compare` showed as a row of `{}` cells (round 70)."""
    rest = {k: v for k, v in summary.items() if k not in (*SUMMARY_KEYS, *SHOWN_APART)}
    return {k: v for k, v in flatten(rest).items() if v != {}}


def shows_own(run: RunRecord) -> bool:
    """Whether `runs show` and `runs compare` list the run's own summary keys (`own_results`):
    those of every run but a training one (a detect, scale or tracked run), whose results
    SUMMARY_KEYS, a training run's, leave out."""
    return not (run.kind == "run" and not tracked(run))


def setting(value: Any) -> str:
    """A config value as --set takes it: 0.05, true, [1, 2], a string bare where --set reads
    it back as itself (resnet20, a/b), else quoted (`_toml_string`): "a b", "123", "a\\\\b"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        items = (_toml_string(v) if isinstance(v, str) else setting(v) for v in value)
        return "[" + ", ".join(items) + "]"  # TOML: strings in a list are quoted
    if isinstance(value, dict):  # in a list (a top-level table is its keys' rows): TOML's
        # inline table, which --set and --where read back, where Python's {'d': 1} was shown
        pairs = (
            f"{k if _BARE_KEY.fullmatch(k) else _toml_string(k)} = "
            f"{_toml_string(v) if isinstance(v, str) else setting(v)}"
            for k, v in value.items()
        )
        return "{" + ", ".join(pairs) + "}"
    if isinstance(value, str) and not _bare(value):
        return _toml_string(value)
    return str(value)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
"""A TOML key written without quotes."""


def _bare(text: str) -> bool:
    """Whether --set reads `text`, written bare, as this very string: what TOML cannot read
    is taken as it is (dlperf.config.parse_value), but 123, true, 1e-1, 2026-11-27 or [1] are
    TOML's int, bool, float, date and list, --set strips white space at the edges, and a
    table would print a control character escaped, which --set would read as its escape."""
    if not text or not text.isprintable() or text != text.strip():
        return False
    if text == "-":  # a table's cell of None (a config section set to none)
        return False
    if any(c in text for c in " =\"'"):  # a space would end the pair in a config line
        return False
    try:
        tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return True
    except (RecursionError, ValueError):  # parse_value refuses these: quoted, they are text
        return False
    return False


# TOML's short escapes; any other character that is not printable is written \uXXXX.
_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _toml_string(text: str) -> str:
    """`text` as a TOML basic string that reads back as `text` and prints as it reads: its
    quotes and backslashes escaped (a stored `a\\new` was shown as "a\\new", which --set read
    as a newline), and every character that is not printable as TOML's escape of it, so that
    a table has nothing to escape its own way (DEL, which JSON's escaping leaves, TOML
    refuses bare)."""
    out: list[str] = []
    for c in text:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif not c.isprintable() and c != " ":
            out.append(f"\\u{ord(c):04X}" if ord(c) < 0x10000 else f"\\U{ord(c):08X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def config_settings(config: dict[str, Any]) -> list[tuple[str, str | None]]:
    """One (section, its keys as KEY=VALUE) per section, unset keys left out: compact enough
    to read in one screen, and each pair is what --set SECTION.KEY=VALUE takes; a cell past
    CELL_CHARS cut, saying so (`cut_text`)."""
    rows: list[tuple[str, str | None]] = []
    for section, value in config.items():
        if not isinstance(value, dict):  # None (detect's `weights`) as "-", as elsewhere
            rows.append((section, None if value is None else setting(value)))
            continue
        pairs = [
            f"{k}={setting(v)}"
            for k, v in flatten(value).items()
            if v is not None and v != {} and v != []
        ]
        rows.append((section, " ".join(pairs) or None))
    return [(cut_text(section), cut_text(keys)) for section, keys in rows]


# The sections of an experiment, every one of which a dlperf run's config holds.
EXPERIMENT_SECTIONS = ("model", "data", "train", "run")


# The key of a run's `system` that `dlperf.track` sets (to true) on the runs it records.
TRACKED = "tracked"


def from_experiment(kind: str, config: Any, system: Any = None) -> bool:
    """Whether a run of `kind`, `config` and `system` was trained from an experiment (`dlperf
    run`, `dlperf.run`, a sweep's point): what `dlperf run --resume` continues. Not a
    dlperf.track run (the user's own loop, marked TRACKED in its system, its config the
    user's, which may hold every section of an experiment), nor a scale study's point."""
    if kind != "run" or not isinstance(config, dict):
        return False
    if isinstance(system, dict) and system.get(TRACKED) is True:
        return False
    return all(isinstance(config.get(section), dict) for section in EXPERIMENT_SECTIONS)


def tracked(run: RunRecord) -> bool:
    """Whether `dlperf.track` recorded the run: its keys, val/* too, are at the steps the user
    gave. Told by the mark `track` sets (TRACKED): the user's config may hold every section
    of an experiment (a Hydra config). A run stored before the mark is a run of kind "run"
    whose config is not an experiment's; the engine's runs are never marked."""
    system = run.system if isinstance(run.system, dict) else {}
    if system.get(TRACKED) is True:
        return True
    return run.kind == "run" and not from_experiment(run.kind, run.config)


# The key of a run's `system` that holds the process which started it with `dlperf.run` (the
# API, in the user's own program), beside "process", the one writing it now.
API_PROCESS = "api_process"


def run_by_api(run: RunRecord) -> bool:
    """Whether the process writing `run` is the one that started it with `dlperf.run`: the
    user's own program, not a dlperf command. A run resumed since by `dlperf run --resume`
    is written by that command, whose process differs from the one recorded."""
    system = run.system if isinstance(run.system, dict) else {}
    started = system.get(API_PROCESS)
    # "store": the store the writer writes (RunStore.writes_elsewhere), not the process's
    writer = {k: v for k, v in (run.process or {}).items() if k != "store"}
    return isinstance(started, dict) and started == writer


def that_stores(run_id: int, process: dict[str, Any] | None, elsewhere: str) -> str:
    """Whose run `run_id` is, in a copy of the store `elsewhere` that its `process` writes
    (`RunStore.writes_elsewhere`): the words of every refusal of that run in the copy."""
    who = f" in pid {process.get('pid')} on {process.get('host')}" if process else ""
    return (
        f"run {run_id} runs{who}, which writes {elsewhere} (this store is a copy of it): it is "
        "that store's run"
    )


def copy_delete_refusal(runs: Sequence[tuple[int, dict[str, Any] | None, str]]) -> UserError:
    """`runs delete` without --force of a copy's rows of `runs` (id, process, the store that
    process writes) that were training when the store was copied: each is the original's run,
    and the row here is a copy nothing updates. "Stop it first", a running run's advice,
    would stop the original's training; --force deletes the row here only, sending no signal
    (`query.stop`)."""
    them, processes = (
        ("it", "its process is") if len(runs) == 1 else ("them", "their processes are")
    )
    return UserError(
        f"{'; '.join(that_stores(*run) for run in runs)}; nothing deleted",
        f"pass --force to delete {them} from this store only: {processes} not stopped",
    )


def system_rows(system: dict[str, Any]) -> dict[str, Any]:
    """A run's `system` as `runs show` and the report show it: dotted keys, with the store its
    process writes (`process.store`, a PostgreSQL store's place recorded as JSON) in words."""
    rows = flatten(system)
    if "process.store" in rows:
        rows["process.store"] = place_words(rows["process.store"])
    return rows


# Per-epoch table: column header -> metric key, in reading order (a clock by what it counts).
EPOCH_COLUMNS = {
    "train loss": "epoch/train_loss",
    "train acc": "epoch/train_acc1",
    "val loss": "val/loss",
    "val acc": "val/acc1",
    "val top5": "val/acc5",
    "lr": "epoch/lr",
    clocks.EPOCH_TIME: "epoch/time_s",  # training steps, warm-up included, no evaluation
    "samples/s": "epoch/throughput",
}


# `runs show`'s per-epoch (a tracked run's per-step) table: every row up to TABLE_ROWS; of a run
# with more, its first and last END_ROWS rows, the only ones read, and a line of how many were
# left out (a table of every row of 10^5 steps was minutes of silence and 0.5 GB).
TABLE_ROWS = 60
END_ROWS = 10


def nth_at_step(steps: Iterable[int]) -> list[tuple[int, int]]:
    """Each of a metric's steps, in its order, with how many values that step had before it:
    (step, n). Every value logged is kept, as MLflow and TensorBoard keep them (a resumed loop
    logs a step again), so the views give a step logged twice two rows, the n-th value of each
    metric at a step on the n-th row."""
    seen: Counter[int] = Counter()
    at = []
    for step in steps:
        at.append((step, seen[step]))
        seen[step] += 1
    return at


@dataclass
class RunView:
    """A run as `runs show` shows it: the run as it stands, its per-epoch metrics and its
    artifacts, each marked whether its file exists. A tracked run's metrics are at the steps
    it logged them, not at epochs (see `tracked`)."""

    run: RunRecord
    epochs: dict[str, list[tuple[int, float]]]  # per-epoch metric key -> (epoch, value)
    artifacts: list[dict[str, Any]]

    @property
    def axis(self) -> str:
        """What the metrics' stored steps count: "step" for a tracked run, else "epoch"."""
        return _axis(self.run)

    def per_epoch(self) -> tuple[list[str], list[list[Any]]]:
        """The per-epoch table of every value: the headers of the metrics the run has, one
        row per epoch (per `axis`); see `_columns` and `_lined_up`."""
        shown = _columns(self.axis, self.epochs)
        numbered = {
            key: list(zip(nth_at_step(s for s, _ in pairs), (v for _, v in pairs), strict=True))
            for key, pairs in self.epochs.items()
        }
        return list(shown), _lined_up(shown.values(), numbered)

    def results(self) -> list[tuple[str, Any]]:
        """The run's results as `runs show` lists them (see `summary_rows`): a training run's
        SUMMARY_KEYS, every key of any other run's summary (a detect, scale or tracked run's:
        SUMMARY_KEYS are a training run's)."""
        return summary_rows(self.run.summary, own=shows_own(self.run))

    def to_dict(self) -> dict[str, Any]:
        """What `runs show --json` prints; for a tracked run, also each key's steps."""
        epochs = {k: [v for _, v in pairs] for k, pairs in self.epochs.items()}
        steps = {k: [s for s, _ in pairs] for k, pairs in self.epochs.items()}
        at = {"steps": steps} if self.axis == "step" else {}
        return {**self.run.to_dict(), "epochs": epochs, **at, "artifacts": self.artifacts}


def _axis(run: RunRecord) -> str:
    return "step" if tracked(run) else "epoch"


def _columns(axis: str, keys: Iterable[str]) -> dict[str, str]:
    """The per-epoch table's columns of a run with metric `keys`, header -> key. A tracked
    run's keys are the user's, each a column headed as stored (what `runs plot --key` takes):
    EPOCH_COLUMNS alone showed none of them."""
    if axis == "step":
        return {key: key for key in keys}
    return {h: k for h, k in EPOCH_COLUMNS.items() if k in keys}


Numbered = list[tuple[tuple[int, int], float]]  # ((step, n), value): a value at its row


def _lined_up(columns: Iterable[str], values: dict[str, Numbered]) -> list[list[Any]]:
    """The rows of `values` with a cell for each key in `columns`, in step order. A step
    logged twice is two rows (a row a step kept its last value alone), lined up as
    Store.frame lines them: by (step, the how-manieth value at that step)."""
    keys = list(columns)
    by_row: dict[tuple[int, int], dict[str, float]] = {}
    for key, pairs in values.items():
        for at, value in pairs:
            by_row.setdefault(at, {})[key] = value
    return [[at[0], *(by_row[at].get(k) for k in keys)] for at in sorted(by_row)]


def _table_keys(store: RunStore, run: RunRecord) -> list[str]:
    """The keys of a run's per-epoch table: a training run's val/ and epoch/ keys (its train/
    ones are per step), every key of a tracked run (its train/loss too)."""
    every = tracked(run)
    return [
        key
        for key in store.metric_keys(run.id)  # in one order on every backend
        if every or key.startswith(("val/", "epoch/"))
    ]


def show(store: RunStore, run_id: int, values: bool = True) -> RunView:
    """One run with its per-epoch metrics (`_table_keys`) and artifacts. `values=False` reads
    none of the metrics (`epochs` is empty): `runs show`'s table reads its own rows
    (`metric_table`), only the first and last of a run of many."""
    run = store.get_run(run_id)
    keys = _table_keys(store, run) if values else []
    epochs = {key: store.metrics(run_id, key) for key in keys}
    artifacts = [{**a, "exists": Path(a["path"]).exists()} for a in store.artifacts(run_id)]
    return RunView(run, epochs, artifacts)


@dataclass
class MetricTable:
    """`runs show`'s per-epoch (per-step) table of a run (`metric_table`): every row of the
    table, or of one of more than TABLE_ROWS, the first and last END_ROWS."""

    axis: str  # what its first column counts, "step" or "epoch"
    headers: list[str]
    rows: list[list[Any]]
    total: int  # the rows the whole table has
    gap: tuple[int, int] | None = None  # the steps (epochs) between which rows were left out

    def note(self, run_id: int) -> str | None:
        """The line that says which rows were left out and where to read them all; None
        when none were."""
        if self.gap is None:
            return None
        first, last = self.gap
        # One step logged many times leaves out rows of that one step. The steps stay bare, as
        # the table's first column prints them; the counts are separated, as other counts are.
        axis = self.axis
        where = (
            f"at {axis} {first}" if first == last else f"between {axis} {first} and {axis} {last}"
        )
        return (
            f"{self.total - len(self.rows):,} of {self.total:,} rows left out, {where}; every "
            f"row: dlperf runs show {run_id} --json (or runs export, runs plot)"
        )


def metric_table(store: RunStore, run: RunRecord) -> MetricTable:
    """`run`'s per-epoch table (see `RunView.per_epoch`) as `runs show` prints it: every row
    up to TABLE_ROWS, else the first and last END_ROWS. Only those rows' values are read, so
    the table takes the same memory however many steps the run logged (a table of every row
    of 10^5 steps was minutes and 0.5 GB); counting the rows is one query."""
    keys = _table_keys(store, run)
    axis = _axis(run)
    columns = _columns(axis, keys)
    total = _row_count(store.engine, run.id, keys)
    ends = total if total <= TABLE_ROWS else END_ROWS
    head = _lined_up(columns.values(), {k: _ends(store, run.id, k, ends) for k in keys})[:ends]
    if ends == total:
        return MetricTable(axis, list(columns), head, total)
    ending = {k: _ends(store, run.id, k, ends, last=True) for k in keys}
    tail = _lined_up(columns.values(), ending)[-ends:]
    gap = (head[-1][0], tail[0][0]) if head and tail else None  # none: the run went meanwhile
    return MetricTable(axis, list(columns), head + tail, total, gap)


def _row_count(engine: Engine, run_id: int, keys: list[str]) -> int:
    """The rows of the per-epoch table of `keys`: at each step, as many as the key logged
    most often at that step has values there (`nth_at_step`)."""
    if not keys:
        return 0
    import sqlalchemy as sa  # here: `runs list` reads a SQLite store without SQLAlchemy

    from dlperf.store.schema import Metric

    per_key = (
        sa.select(Metric.step, sa.func.count().label("n"))
        .where(Metric.run_id == run_id, Metric.key.in_(keys))
        .group_by(Metric.key, Metric.step)
        .subquery()
    )
    per_step = sa.select(sa.func.max(per_key.c.n).label("n")).group_by(per_key.c.step).subquery()
    with engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.coalesce(sa.func.sum(per_step.c.n), 0))) or 0)


def _ends(store: RunStore, run_id: int, key: str, n: int, last: bool = False) -> Numbered:
    """The first `n` values of `key` (`last`: the last n), in step order, each at its row:
    (step, the how-manieth value at that step)."""
    pairs = store.metrics(run_id, key, limit=n, last=last)
    if not pairs:
        return []
    # The last n may begin within a step: its values before them come first in its rows.
    first = pairs[0][0]
    before = 0
    if last:
        import sqlalchemy as sa

        from dlperf.store.schema import Metric

        of_first = (Metric.run_id == run_id, Metric.key == key, Metric.step == first)
        with store.engine.connect() as conn:
            at_first = conn.scalar(sa.select(sa.func.count()).where(*of_first)) or 0
        before = at_first - sum(1 for step, _ in pairs if step == first)
    ats = nth_at_step(step for step, _ in pairs)
    return [
        ((step, k + before if step == first else k), value)
        for (step, k), (_, value) in zip(ats, pairs, strict=True)
    ]


# --- --where --------------------------------------------------------------------------------


def _undecodable(value: str, what: str, part: str = "value") -> bool:
    """Whether `value` holds a byte that is not UTF-8 (a surrogate escape, as Python reads one
    from argv); refused here with the locale hint where the bytes are UTF-8 all the same,
    read as ASCII in a C locale (`what` names where: "runs tag note"; `part` which text: its
    "value" or its "key"), where retyping it cannot help."""
    if not any("\ud800" <= c <= "\udfff" for c in value):
        return False
    from dlperf.config.base import LOCALE_FIX, read_as_ascii  # pydantic's import: only here

    if read_as_ascii(value):
        shown = value.encode("utf-8", "surrogateescape").decode("utf-8")
        raise UserError(
            f"{what}: the {part} is UTF-8, but Python read it as ASCII: {shown!r}", LOCALE_FIX
        )
    return True


@dataclass(frozen=True)
class Condition:
    """One KEY=VALUE filter, the value read as --set reads it; `text` is the value as given,
    which a stored text (a run's name, a string in its config, a tag) also matches."""

    key: str
    value: Any
    text: str | None = field(default=None, compare=False)
    typed: str | None = field(default=None, compare=False)  # the key with its edges as given

    @classmethod
    def parse(cls, text: str) -> Condition:
        key, sep, given = text.partition("=")
        typed, key, value = key, key.strip(), given.strip()
        # `train.lr!=0.1` was read as the key `train.lr!`, and told "did you mean 'train.lr'?",
        # which selects the opposite. (`tag.x==y` is kept: the tag "=y", as `runs tag` sets it.)
        if key.endswith(("!", "<", ">")) or (not sep and any(op in text for op in "<>")):
            raise UserError(
                f"--where {quoted(text)}: only KEY=VALUE is supported (equal to VALUE); "
                "comparisons (!=, <, >, <=, >=) are not",
                "e.g. --where train.lr=0.1",
            )
        if sep and key and not value:  # `KEY=` meant the empty text, which TOML writes ""
            raise UserError(
                f"--where {quoted(text)}: expected KEY=VALUE, got no VALUE",
                f"to select an empty text: --where '{clipped(key)}=\"\"'",
            )
        if not sep or not key or not value:
            raise UserError(
                f"--where {quoted(text)}: expected KEY=VALUE",
                "e.g. --where model.name=resnet20, --where status=lost, --where tag.baseline=yes",
            )
        # A byte that is not UTF-8 (a surrogate here) is in no stored text: such a value
        # selected nothing without a word (`tag.note=jä` in a C locale listed no run).
        if _undecodable(value, f"--where {clipped(key)}"):
            raise UserError(
                f"--where {quoted(text)}: the value holds a byte that is not UTF-8",
                "give the value as UTF-8 text",
            )
        # A config key (TOML's keys may be any text) typed so was refused as no run's key.
        if _undecodable(key, "--where", "key"):
            raise UserError(
                f"--where {quoted(text)}: the key holds a byte that is not UTF-8",
                "give the key as UTF-8 text",
            )
        return cls(key, _value(value), given, typed)

    @property
    def pair(self) -> str:
        """`KEY=VALUE` as an error names it: a long key or value by its start (`clipped`)."""
        return f"{clipped(self.key)}={clipped(str(self.text))}"

    @property
    def said(self) -> str:
        return f"--where {self.pair}"

    def as_typed(self, runs: list[RunRecord]) -> Condition:
        """Spaces around the = are spacing, as documented, where one of `runs` holds the key
        without them; where none does but one holds it as typed, white space at an edge kept
        (a config's `lr `, stored as given), the condition is on that key: stripped, `train.lr
        =0.3` selected nothing, without a word. (Taking the typed key first left out, without
        a word, the runs holding `train.lr` where another held `train.lr `.) A key no run
        holds, where one differs from it only by such white space, is refused naming that key
        (it selected nothing). A key held in another Unicode normalisation is held (`_field`)."""
        typed = self.typed or self.key
        if any(_field(r, self.key)[0] for r in runs):
            return self
        if typed != self.key and any(_field(r, typed)[0] for r in runs):
            return replace(self, key=typed)
        held = {k for run in runs for k in (*run.flat_summary, *run.flat_config)}
        alike = sorted(k for k in held if k != self.key and _unspaced(k) == _unspaced(typed))
        if alike:
            raise UserError(
                f"{self.said}: no listed run holds the key {clipped(self.key)}; "
                f"{clipped(name_text(alike[0]))} differs from it only by white space",
                "to select by that key, write it as stored: "
                f"--where '{clipped(alike[0])}={clipped(str(self.text))}'",
            )
        return self

    def holds(self, run: RunRecord) -> bool:
        has, value = _field(run, self.key)
        if not has:
            return False
        # A text field compared with its text as written: read as TOML, `name=123` was the
        # int 123 and `name=2026-11-27` a date, and `name= lead` was stripped, so they
        # selected nothing though the table showed those names. A tag is read as TOML too
        # (tag.x=123 matches a tag 123), so its stored text is compared as well.
        if self.text is not None and isinstance(value, str) and same_text(value, self.text):
            return True
        tag = self.key.removeprefix("tag.") if self.key.startswith("tag.") else None
        held = run.tags.get(tag) if tag is not None else None
        if self.text is not None and held is not None and same_text(held, self.text):
            return True
        return _same(value, self.value)

    def refuse_config_shadowed(self, runs: list[RunRecord]) -> None:
        """Refuse a run field (`name`, `status`) or tag that selects none of `runs` where one's
        config holds that key with this value: a tracked run's flat config (`name`, `id`,
        `kind`, a table `tag`) is what was meant, and the field selected nothing, without a
        word (or `status=ok` was an unknown status). The line names `config.KEY`."""
        tag = self.key.startswith("tag.")
        if not (tag or self.key in RUN_FIELDS) or any(self.holds(run) for run in runs):
            return
        own = f"tag {clipped(self.key[4:])}" if tag else f"own {self.key}"
        config = replace(self, key=CONFIG + self.key)
        held = [run.id for run in runs if config.holds(run)]
        if held:
            raise UserError(
                f"{self.said}: selects no listed run by its {own}, but run {min(held)}'s "
                f"config holds {self.pair}",
                f"to select by the config's key: {config.said}",
            )

    def refuse_as_shown(self, runs: list[RunRecord]) -> None:
        """Refuse a number that selects none of `runs` where one's float prints as it: the
        tables show a float to 4 significant digits (`fmt`: 0.7298 of 0.7298050139275766), and
        the value copied from them selected nothing, without a word. The line names the run
        and its whole value, which --where compares. So is `yes` or `no` where a run's value
        is the boolean the tables show so: `--where e=yes` selected nothing, without a word,
        where `runs compare` showed e as yes (--where reads a boolean as --set does: true)."""
        shown_bool = self.value in ("yes", "no")
        if not (_number(self.value) or shown_bool) or any(self.holds(run) for run in runs):
            return
        for run in runs:
            value = _field(run, self.key)[1]
            if isinstance(value, bool) and shown_bool and fmt(value) == self.value:
                raise UserError(
                    f"{self.said}: selects no listed run, but run {run.id}'s "
                    f"{clipped(self.key)} is the boolean {setting(value)}, which tables "
                    f"show as {self.value}",
                    f"--where reads a boolean as --set does: --where {clipped(self.key)}="
                    f"{setting(value)}",
                )
            if not shown_bool and _shows_as(value, self.value):
                raise UserError(
                    f"{self.said}: selects no listed run, but run {run.id}'s "
                    f"{clipped(self.key)} is {value!r}, which tables show as {fmt(value)}",
                    f"--where compares the whole value: --where {clipped(self.key)}={value!r}",
                )

    def refuse_number_as_text(self, runs: list[RunRecord]) -> None:
        """Refuse `.05` or `5.` (text to --set, which TOML refuses for a number) where the key
        holds numbers and no run holds that text: it selected nothing where 0.05 selected the
        runs. Where a run holds the text ("5" in its config, a tag 02), it is what is meant,
        and the number the fix names would select other runs."""
        if not (isinstance(self.value, str) and _python_number(self.value)):
            return
        if any(self.holds(run) for run in runs):
            return
        if any(_number(_field(run, self.key)[1]) for run in runs):
            raise UserError(
                f"{self.said}: {quoted(self.value)} is not a number as --set reads it, and "
                f"{clipped(self.key)} holds numbers",
                f"write it as {float(self.value)!r}",
            )


def _unspaced(key: str) -> str:
    """`key` without white space at the edges of its dotted names (`train .lr ` as train.lr)."""
    return ".".join(name.strip() for name in key.split("."))


def _shows_as(stored: Any, wanted: float) -> bool:
    """Whether the float `stored` prints as the number `wanted` in the tables (`fmt`, its
    thousands separators dropped: 12345.6 shows as 12,346)."""
    if not isinstance(stored, float) or not math.isfinite(stored):
        return False
    return float(fmt(stored).replace(",", "")) == wanted


def _python_number(text: str) -> bool:
    """Whether Python's float() reads `text` (TOML having read it as text)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _value(text: str) -> Any:
    """`text` as --set reads it; a value the reader refuses (nested too deeply, an integer of
    too many digits) as its text, which is what it can only be equal to: its error names
    --set, which a --where or a stored tag is not."""
    from dlperf.config import parse_value  # lazily: pydantic is most of a listing's start-up

    try:
        return parse_value(text)
    except UserError:
        return text


def _field(run: RunRecord, key: str) -> tuple[bool, Any]:
    """(known for this run, value) of a --where key, held in any Unicode normalisation: café
    typed (NFC) names cafe\u0301 copied from a macOS file name (NFD). (Where runs held both
    forms, --where took the form one held exactly, the others left out without a word.)"""
    if key.startswith(CONFIG):
        flat = run.flat_config
        held = stored_as(key.removeprefix(CONFIG), flat)
        return held is not None, None if held is None else flat[held]
    if key.startswith("tag."):
        name = key.removeprefix("tag.")
        name = stored_as(name, run.tags) or name
        return name in run.tags, _value(run.tags[name]) if name in run.tags else None
    if key in RUN_FIELDS:
        return True, getattr(run, key)
    # Where _check_keys found it: a summary key or a config key, with or without a dot (a
    # tracked run's config may hold `s` at its top). A key both hold is read as it always
    # was: without a dot from the summary (test_accuracy), with one from the config. A
    # summary's nested keys as `runs compare` labels them: final.train/loss.
    flat, summary = run.flat_config, run.flat_summary
    sources = (summary, flat) if "." not in key else (flat, summary)
    for source in sources:
        if key in source:
            return True, source[key]
    for source in sources:
        held = stored_as(key, source)
        if held is not None:
            return True, source[held]
    return False, None


def _same(stored: Any, wanted: Any) -> bool:
    """Equal as --set values are: 0.1 == 0.10 and 1 == 1.0, but true is not 1; `null` (TOML
    has none: read as the text) matches a stored None, JSON's null."""
    if stored is None:
        return wanted is None or wanted == "null"
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return type(stored) is type(wanted) and stored == wanted
    return bool(stored == wanted)


def differing_keys(configs: Sequence[dict[str, Any]]) -> list[str]:
    """The keys of flattened `configs` whose values differ (a key missing from one is None
    there), in order: judged as --where judges a value equal (`_same`: 1 and 1.0, 0.0 and
    -0.0 are one value, true is not 1). Told apart by repr, `runs compare` and the plots'
    legends listed `lr │ 1 │ 1` as differing where `--where lr=1` selected both runs."""

    def alike(a: Any, b: Any) -> bool:
        return b is None if a is None else _same(a, b)  # _same takes None for "null" too

    keys = set().union(*configs)
    return sorted(k for k in keys if any(not alike(configs[0].get(k), c.get(k)) for c in configs))


def _check_keys(runs: list[RunRecord], conditions: list[Condition]) -> None:
    """A key no run and no experiment has is bad input, with the closest key as a hint, and a
    table of the config with its keys (`_refuse_table`), a documented key (`model.kwargs`)
    that the listed runs hold only as a table too; so is a status no run can have, and a
    kind (`_check_kind`)."""
    from dlperf.config import describe

    # In the order a table's keys are offered: the experiment's as documented, then the runs'.
    described = [k for k, _ in describe()]
    documented = set(described)
    configs: set[str] = set()  # the keys the runs hold a value at (a table's are its leaves)
    tags: set[str] = set()
    for run in runs:
        configs |= set(run.flat_config)
        tags |= {f"tag.{t}" for t in run.tags}
    ordered = described + sorted(configs - documented)
    held = configs | set(RUN_FIELDS) | set(SUMMARY_KEYS)
    for run in runs:
        held |= set(run.flat_summary)
    # A hint never offers a key --where cannot name (stored before such keys were refused):
    # offered `final.train/a=b` for `final.train/a=b=1`, which had failed on that very key.
    offered = {k for k in held | documented if nameable(k)}
    for key in (c.key for c in conditions):
        if key.startswith(CONFIG):
            _check_config_key(key, configs, documented, ordered)
            continue
        # café held as cafe\u0301 too
        if stored_as(key, tags if key.startswith("tag.") else held) is not None:
            continue
        if key.startswith("tag."):
            named = {t for t in tags if nameable(t[4:])}
            hint = did_you_mean(key, named, "set one with `dlperf runs tag ID KEY=VALUE`")
            raise UserError(
                f"--where {clipped(key)}: no listed run has tag {quoted(key[4:])}", hint
            )
        # Before a documented key is taken as known: `model.kwargs`, a table in every listed
        # run, selected nothing without a word where its own `model.kwargs.a` was refused.
        _refuse_table(key, ordered)
        if stored_as(key, documented) is not None:  # no listed run has it: it selects none
            continue
        hint = did_you_mean(
            key,
            _near(key, offered),
            "keys: config keys (model.name, train.lr), status, kind, name, "
            "summary keys (test_accuracy, throughput, final.train/loss) and tag.NAME",
            quote=True,
        )
        raise UserError(f"--where: unknown key {quoted(key)}", hint)
    for status in (c.value for c in conditions if c.key == "status"):
        if status not in STATUSES:  # it would select nothing, as a misspelt key would
            raise UserError(
                f"--where: unknown status {quoted(str(status))}", f"statuses: {', '.join(STATUSES)}"
            )
    for c in conditions:  # a kind a run holds, as written, too: `kind=123` is text there
        if c.key == "kind" and c.text not in {run.kind for run in runs}:
            _check_kind(c.value, runs, "--where: ")


def _refuse_table(key: str, ordered: list[str], prefix: str = "") -> None:
    """A `key` that names a table of the config (a run's own, `k` of `k = {a = 2}`, or the
    experiment's, `train.schedule`) is refused as one, naming its keys (the first of them, in
    `ordered`'s order), each after `prefix` (`config.`). A value never equals a table: it was
    "unknown key 'k'", with generic keys that no listed run has, or one key of the table."""
    under = unicodedata.normalize("NFC", key) + "."
    keys = [k for k in ordered if nameable(k) and unicodedata.normalize("NFC", k).startswith(under)]
    if keys:
        named = few([quoted(prefix + k) for k in keys], TABLE_KEYS_NAMED)
        raise UserError(
            f"--where: {quoted(prefix + key)} is a table of the config, not a value",
            f"name one of its keys: {named}",
        )


def _check_config_key(
    key: str, configs: set[str], documented: set[str], ordered: list[str]
) -> None:
    """`config.KEY` where KEY is no listed run's config key (`configs`) and no experiment's
    (`documented`) is bad input, with the closest config key as a hint, and a table of the
    config with its keys: a documented key the listed runs hold only as a table too."""
    name = key.removeprefix(CONFIG)
    if stored_as(name, configs) is not None:
        return
    _refuse_table(name, ordered, CONFIG)
    if stored_as(name, documented) is not None:
        return
    offered = {CONFIG + k for k in configs | documented if nameable(k)}
    hint = did_you_mean(
        key, _near(key, offered), "config.KEY reads a config key: config.train.lr", quote=True
    )
    raise UserError(f"--where: unknown key {quoted(key)}", hint)


def _check_kind(kind: object, runs: list[RunRecord], said: str = "") -> None:
    """A kind that dlperf does not write and none of `runs` has is bad input, as a status no
    run can have is: it would select nothing, without a word."""
    known = [*KINDS, *sorted({run.kind for run in runs} - set(KINDS))]
    if kind not in known:
        raise UserError(f"{said}unknown kind {quoted(str(kind))}", f"kinds: {', '.join(known)}")


def _near(key: str, known: set[str]) -> list[str]:
    """The keys a hint for the unknown `key` may name: those of its section (what comes
    before the first dot), or of a section spelt alike; for a key without a dot, also those
    whose last part is spelt alike (batch_size: train.batch_size). Compared whole,
    `final.train/loss` was closest to `analyze.train`, a key of another section that shares
    a word."""
    head = key.partition(".")[0]
    heads = {k.partition(".")[0] for k in known}
    near = {head} if head in heads else set(difflib.get_close_matches(head, heads, n=3))
    # and a section spelt alike but for case: difflib has 'Z' far from 'z' ('_z' was offered)
    near |= {h for h in heads if h.lower() == head.lower()}
    keys = {k for k in known if k.partition(".")[0] in near}
    if "." not in key:  # a bare leaf (batch_size): the keys ending in one spelt alike
        leaves = set(difflib.get_close_matches(key, {k.rpartition(".")[2] for k in known}, n=3))
        keys |= {k for k in known if "." in k and k.rpartition(".")[2] in leaves}
    return sorted(keys)


def select(runs: list[RunRecord], where: Sequence[str]) -> list[RunRecord]:
    """The runs (as they stand) every KEY=VALUE of `where` holds for (one given twice is
    checked once)."""
    conditions = [Condition.parse(w).as_typed(runs) for w in dict.fromkeys(where)]
    for condition in conditions:  # before a status or kind the config holds is unknown
        condition.refuse_config_shadowed(runs)
    _check_keys(runs, conditions)
    for condition in conditions:
        condition.refuse_number_as_text(runs)
    chosen = [run for run in runs if all(c.holds(run) for c in conditions)]
    if not chosen:  # only then may one condition alone select nothing
        for condition in conditions:
            condition.refuse_as_shown(runs)
    return chosen


LIMIT_MAX = 2**31 - 1  # a C int, far past any store's runs; SQLite's LIMIT overflows past 2**63


def check_limit(limit: int | None, flag: str) -> None:
    """A count of newest runs (`--limit`, `--last`) is at least 1 and at most LIMIT_MAX: a
    larger one reached SQLite as an OverflowError traceback."""
    if limit is not None and limit < 1:
        raise UserError(f"{flag} must be at least 1, got {limit}")
    if limit is not None and limit > LIMIT_MAX:
        raise UserError(f"{flag} must be at most {LIMIT_MAX}, got {limit}")


def list_runs(
    open_store: Callable[[], Listing],
    kind: str | None = None,
    study: int | None = None,
    where: Sequence[str] = (),
    limit: int | None = None,
    limit_name: str = "--limit",
) -> list[RunRecord]:
    """Stored runs as they stand, newest first: the newest `limit` of those `where` selects
    (the store opened once the arguments are known good); `limit_name` as the caller says it."""
    check_limit(limit, limit_name)
    store = open_store()
    if study is not None:
        store.get_study(study)  # an unknown study is an error, not an empty list
    # with `where`, filtered before the limit: the newest N runs that match
    runs = store.list_runs(kind=kind, study_id=study, limit=None if where else limit)
    # a misspelt or empty kind, unless another run has it ('' listed every kind before)
    if kind is not None and not runs and kind not in KINDS:
        _check_kind(kind, store.list_runs())
    return select(runs, where)[:limit] if where else runs


# --- compare --------------------------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def delta(values: Sequence[Any]) -> str | None:
    """How the other runs differ from the first: for two runs the difference and its share
    of the first ('+0.012 (+1.3%)'); for more, each one's change in % of the first, in
    column order ('+3% -5%'), or the differences when the first is 0. None when not numeric.
    Two finite values give a finite change, past a float's range too (`_difference`)."""
    first, others = values[0], values[1:]
    if not _number(first) or not any(_number(v) for v in others):
        return None

    def signed(v: Any) -> str:
        if not _number(v):
            return "-"
        d = _difference(v, first)
        text = _short(d) if isinstance(d, Fraction) else fmt(d)
        return f"+{text}" if d >= 0 else text

    def percent(v: Any) -> str:
        return _percent_text(_share(_difference(v, first), first)) if _number(v) else "-"

    if all(v == first for v in others):
        return "0"
    if len(others) == 1:
        return signed(others[0]) + (f" ({percent(others[0])})" if first else "")
    return " ".join(percent(v) if first else signed(v) for v in others)


def _finite(value: float | int) -> bool:
    return isinstance(value, int) or math.isfinite(value)


def _difference(v: float | int, first: float | int) -> float | int | Fraction:
    """`v - first`, exact (a Fraction) where a float cannot hold it: two finite values near
    ±1e308 differ by more than a float holds (0.1 and -1.7e308 against 1.7e308 read `+inf`),
    and an int past float range beside a float raised OverflowError. An infinity logged is
    an infinite change, as it was."""
    try:
        d = v - first
    except OverflowError:
        return Fraction(v) - Fraction(first)
    if isinstance(d, float) and math.isinf(d) and _finite(v) and _finite(first):
        return Fraction(v) - Fraction(first)
    return d


def _share(d: float | int | Fraction, first: float | int) -> float | Fraction:
    """`d` in % of the first value, exact where the float overflows (a change of 1e308 from
    0.1, or of 1 from 5e-324, read `+inf%`)."""
    if not isinstance(d, Fraction):
        try:
            share = d / abs(first) * 100
        except OverflowError:  # an int past float range
            share = math.inf
        if math.isfinite(share) or not _finite(d):
            return share
    return Fraction(d) * 100 / abs(Fraction(first))


def _percent_text(share: float | Fraction) -> str:
    """A change in %, to one decimal (+12.5%); from FIXED_MAX % up to 4 significant digits
    (+1e+311%), as `fmt` shows a float that large: not every digit of its binary value, nor
    an infinity for a finite change."""
    if isinstance(share, Fraction) and abs(share) < FIXED_MAX:
        share = float(share)  # -1.7e308 to 1.7e308: exact, and +200.0% as any other
    if isinstance(share, float) and not (abs(share) >= FIXED_MAX):  # nan and inf as they are
        return f"{share:+.1f}%"
    text = _short(share) if isinstance(share, Fraction) else fmt(share)
    return f"+{text}%" if share >= 0 else f"{text}%"


def _short(value: Fraction, digits: int = 4) -> str:
    """An exact number as `fmt` shows a float of its size, `digits` significant digits
    (3.4e+308), past the range of a float too: Decimal's exponent is not bounded there."""
    if abs(value) < FIXED_MAX:
        return fmt(float(value))
    with decimal.localcontext() as context:
        context.prec = digits
        context.Emax, context.Emin = decimal.MAX_EMAX, decimal.MIN_EMIN
        shown = (Decimal(value.numerator) / Decimal(value.denominator)).normalize()
    return f"{shown:.{digits}g}"


@dataclass
class Row:
    """One compared quantity: its label, each run's value, and the change from the first."""

    label: str
    values: list[Any]
    delta: str | None


@dataclass
class Comparison:
    """What differs between runs: config keys, then results, tags and status."""

    run_ids: list[int]
    config_diff: dict[str, list[Any]]  # only the keys whose values differ
    # Every training key (SUMMARY_KEYS), then the own results (`own_results`) of the runs
    # that have them, in the order they first come; None where a run lacks one.
    summary: dict[str, list[Any]]
    tags: dict[str, list[str | None]]
    status: list[str]

    def rows(self) -> list[Row]:
        """The comparison as `runs compare` tables it: results that no run has left out,
        peak memory in MiB."""
        rows = []
        for key, values in self.summary.items():
            if any(v is not None for v in values):
                # An own result is labelled as `runs show` labels it: by its key.
                if key in SUMMARY_KEYS:
                    key, values = _shown(key, values, self.summary["epochs"])
                rows.append([key, *values])
        rows += [[f"tag {t}", *_apart(values)] for t, values in self.tags.items()]
        rows.append(["status", *self.status])
        # A config key labelled as another row is (a tracked run's `status`) reads as
        # --where names it, config.status. Δ from its values, which its cells may show as
        # text (`_apart`).
        labels = {label for label, *_ in rows}
        config = [
            Row(cut_text(CONFIG + k if k in labels else k), _apart(v, whole=True), delta(v))
            for k, v in self.config_diff.items()
        ]
        return config + [Row(label, values, delta(values)) for label, *values in rows]

    def to_dict(self) -> dict[str, Any]:
        """What `runs compare --json` prints."""
        return {"runs": self.run_ids, "config_diff": self.config_diff, "summary": self.summary}


def _apart(values: list[Any], whole: bool = False) -> list[Any]:
    """`values` as a table shows them, text by `name_text`: "a" and "a " read apart (a table
    pads its cells with spaces), 'a '; and so does text beside a value whose cell it reads as
    ("1" and 1, "yes" and True, "-" and None, "1, 2" and [1, 2]), '1'. A list is its cell
    (`_list_text`). A cell past CELL_CHARS is cut, saying so. Numbers that `fmt` would show
    alike (1.00001 and 1.00002 as 1) are shown in full; where `whole` (a config's values,
    inputs as set), so are numbers of which one's cell would not read back as it: lr 0.050001
    read 0.05, the default, beside 0.1."""
    typed = any(v is not None and not isinstance(v, str) for v in values)
    lists = {_list_text(v) for v in values if isinstance(v, list | tuple)}
    numbers = {v for v in values if _number(v)}  # 1 and 1.0 one value, as --where has it
    rounded = whole and not all(map(_reads_back, numbers))
    full = rounded or len({fmt(v) for v in numbers}) < len(numbers)
    return [
        _text_cell(v, typed, lists) if isinstance(v, str)
        else _list_text(v) if isinstance(v, list | tuple)
        else str(v) if full and _number(v)
        else v
        for v in values
    ]  # fmt: skip


def _reads_back(number: float) -> bool:
    """Whether `number`'s table cell (`fmt`: 12345.6 as 12,346) reads back as it."""
    return not math.isfinite(number) or float(fmt(number).replace(",", "")) == number


def list_cell(value: list[Any] | tuple[Any, ...]) -> str | None:
    """A list as a table shows it: 'a, b'; an empty one None, shown "-"."""
    return ", ".join(fmt(v) for v in value) or None


# Of a text or list cell in the tables of `runs list`, `runs show` and `runs compare`: their
# every row was padded to the widest cell (a config value of 1 MB and 10^4 keys made
# gigabytes). --json holds a value whole.
CELL_CHARS = 200


def _cut(cell: str, size: str) -> str:
    """`cell` cut at CELL_CHARS, saying how big the value was (`size`)."""
    return f"{cell[:CELL_CHARS]}... ({size}; --json holds it whole)"


def cut_text(value: Any) -> Any:
    """`value` as a table's cell: text past CELL_CHARS cut, saying so (a table off a terminal
    pads every row to its column's widest cell: the model, data and tags of runs list and
    runs show, show's config, compare's labels); anything else as it is."""
    if isinstance(value, str) and len(value) > CELL_CHARS:
        return _cut(value, f"{len(value):,} characters")
    return value


def tag_rows(tags: dict[str, str]) -> list[tuple[str, str]]:
    """`runs tag`'s table of a run's tags, each cut as `runs show` cuts it (`cut_text`): a
    5,000-character value made every line of it 5,105 characters wide."""
    return [(cut_text(key), cut_text(value)) for key, value in tags.items()]


def _list_text(value: list[Any] | tuple[Any, ...]) -> str:
    """A list's cell in compare, cut past CELL_CHARS; an empty one "[]", which runs show's
    "-" would make read as a key the other run lacks."""
    cell = list_cell(value) or "[]"
    return _cut(cell, f"{len(value):,} items") if len(cell) > CELL_CHARS else cell


def _text_cell(text: str, typed: bool, lists: set[str]) -> str:
    """`text` by `name_text`, quoted where it reads as a cell `fmt` shows another value as:
    - (None), and beside values other than text (`typed`), yes/no or a number (1e+25, inf),
    or a list's cell of `lists`; past CELL_CHARS cut, saying so."""
    if len(text) > CELL_CHARS:
        return _cut(name_text(text[:CELL_CHARS]), f"{len(text):,} characters")
    shown = name_text(text)
    if shown != text:  # quoted already
        return shown
    if text == "-" or text in lists or (typed and (text in ("yes", "no") or _number_text(text))):
        return f"'{text}'"
    return text


def _number_text(text: str) -> bool:
    try:
        float(text.replace(",", ""))  # fmt writes 12345.6 as 12,346
    except ValueError:
        return False
    return True


def tags_text(tags: dict[str, str]) -> str | None:
    """A run's tags as `runs list` shows them, KEY=VALUE, each value as `_apart` shows it
    (x=a and x='a '); None for none."""
    return " ".join(f"{k}={name_text(v)}" for k, v in tags.items()) or None


def compare(store: RunStore, run_ids: Sequence[int] = (), study: int | None = None) -> Comparison:
    """Compare two or more runs, given by ID (each once: a repeat is refused, as `runs plot`
    refuses it) or as every run of a study."""
    ids = list(dict.fromkeys(run_ids))  # 3, 03 and +3 are one run
    if study is not None:
        if ids:
            raise UserError("give run IDs or --study, not both")
        store.get_study(study)
        ids = sorted(r.id for r in store.list_runs(study_id=study))
        if len(ids) < 2:
            held = f"one run ({ids[0]})" if ids else "no runs"
            # without runs there is no "its run" to compare with another
            hint = "compare its run with another" if ids else "compare runs by ID"
            raise UserError(
                f"study {study} holds {held}: compare needs two or more",
                f"{hint}: dlperf runs compare ID ID",
            )
    if len(run_ids) > len(ids):  # `1 1 2` showed runs 1 and 2, no word (a typo for 1 3?)
        repeated = next(i for i in ids if list(run_ids).count(i) > 1)
        count = list(run_ids).count(repeated)
        times = "twice" if count == 2 else f"{count} times"
        needs = "compare needs two or more different runs" if len(ids) < 2 else None
        raise UserError(
            f"{needs or 'runs compare shows each run once'}, got run {repeated} {times}",
            "give each run ID once, e.g. dlperf runs compare 1 2",
        )
    if len(ids) < 2:
        raise UserError("compare needs two or more run IDs", "e.g. dlperf runs compare 1 2")
    runs = [store.get_run(i) for i in ids]
    flat = [flatten(r.config) for r in runs]
    differing = differing_keys(flat)
    tags: set[str] = set().union(*(r.tags for r in runs))
    # A tracked run's or a scale point's results are its own keys (`runs show` lists them):
    # SUMMARY_KEYS alone, a training run's, gave those runs no results at all. In run order,
    # and the order each summary keeps (JSON, not JSONB, on PostgreSQL): alike on every backend.
    own = [own_results(r.summary) if shows_own(r) else {} for r in runs]
    keys = [*SUMMARY_KEYS, *dict.fromkeys(k for results in own for k in results)]
    return Comparison(
        run_ids=ids,
        config_diff={k: [f.get(k) for f in flat] for k in differing},
        summary={
            k: [r.summary.get(k) for r in runs] if k in SUMMARY_KEYS else [o.get(k) for o in own]
            for k in keys
        },
        tags={t: [r.tags.get(t) for r in runs] for t in sorted(tags)},
        status=[r.status for r in runs],
    )


# --- tag ------------------------------------------------------------------------------------

TAG_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def _start(text: str) -> str:
    """Text as an error line quotes it: its start, if it is long (a whole file's worth
    pasted as one argument)."""
    return repr(text) if len(text) <= 60 else f"{text[:56]!r}..."


def tag_changes(pairs: Sequence[str]) -> dict[str, str | None]:
    """`runs tag`'s KEY=VALUE arguments as the tags to set (None: KEY= removes it), each
    checked before any is written."""
    tags: dict[str, str | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not TAG_KEY.fullmatch(key):
            # The first character is said: the line listed `.` and `-` among a key's
            # characters, and `.=1` was refused without a word of why.
            raise UserError(
                f"runs tag {_start(pair)}: expected KEY=VALUE (KEY of 1 to 100 ASCII letters, "
                "digits, _ . -, starting with a letter, digit or _)",
                "e.g. dlperf runs tag 3 baseline=yes; baseline= removes the tag",
            )
        # An escape sequence would reach every terminal that lists the run; an undecodable
        # byte (a surrogate here) cannot be stored at all. The check a run's name has.
        undecodable = _undecodable(value, f"runs tag {key}")
        if has_control(value) or undecodable:
            # Named: U+200B, a format character, was called "a control character or a byte
            # that is not UTF-8".
            held = "a byte that is not UTF-8" if undecodable else unprintable(value)
            raise UserError(f"runs tag {pair!r}: the value holds {held}", "give printable text")
        if key == DELETING_TAG:  # set and taken back by `runs delete --force` alone (`stop`)
            raise UserError(
                f"runs tag: {key} is dlperf's own mark of a run `runs delete --force` is deleting",
                "tag the run with a key of your own",
            )
        if key in tags:
            raise UserError(f"runs tag: {key} is given twice")
        tags[key] = value.strip() or None
    return tags


# --- delete ---------------------------------------------------------------------------------


def to_delete(store: RunStore, run_ids: Sequence[int], force: bool) -> list[RunRecord]:
    """The runs `runs delete` may delete, as they stand: every one must exist, and none may
    still be `running` unless `force` (a `lost` one may go). A copy's row of a run that its
    original's process trains (`RunStore.writes_elsewhere`) is refused as that store's run,
    with the advice that fits a copy (`copy_delete_refusal`), never to stop it."""
    missing = []
    runs = []
    for run_id in run_ids:
        try:
            runs.append(store.get_run(run_id))
        except NoSuchRun:
            missing.append(str(run_id))
    if missing:
        raise no_such_run(store.engine, ", ".join(missing), "; nothing deleted")
    running = [r for r in runs if r.status == "running"]
    elsewhere = {r.id: w for r in running if (w := store.writes_elsewhere(r)) is not None}
    own = [r for r in running if r.id not in elsewhere]
    # Said with or without --force: the generic line offered --force, which then refused. A
    # run of another store (this one its copy) is deleted here without a signal: not refused.
    refuse_being_deleted(own)
    _refuse_users_programs(own)
    if force:
        return runs
    if own:
        where = ", ".join(
            f"{r.id} (pid {p.get('pid')} on {p.get('host')})" if (p := r.process) else str(r.id)
            for r in own
        )
        raise UserError(
            f"run {where} is still running; nothing deleted",
            "stop it first, or pass --force",
        )
    if elsewhere:
        # The original's run, whose process trains on there: "stop it first" stopped that.

        raise copy_delete_refusal([(r.id, r.process, elsewhere[r.id]) for r in running])
    return runs


def refuse_being_deleted(runs: Sequence[RunRecord]) -> None:
    """Refuse to delete a run another live `runs delete --force` is stopping, with or without
    --force: a second delete wrote its own mark over the first's and took it away on giving
    up, the stopped run then offering a resume of the run the first delete went on to delete;
    without --force it was told to pass --force, which was then refused."""
    for run in runs:
        if (other := deleted_by(run)) is not None and other != os.getpid():
            # a stopped delete (SIGSTOP, Ctrl-Z) never ends until it is continued
            held = (
                f" once continued (it is stopped: kill -CONT {other})" if is_stopped(other) else ""
            )
            raise UserError(
                f"run {run.id} is already being deleted by `dlperf runs delete` (pid {other}); "
                "nothing deleted",
                f"let that delete end: it deletes the run{held}",
            )


def _refuse_users_programs(running: Sequence[RunRecord]) -> None:
    """Refuse to delete a `running` run that `dlperf.track` records, or `dlperf.run` trains,
    in a live process of this host: that process is the user's own Python program (a
    notebook's kernel), not a dlperf command, so SIGTERM has Python's default action there and
    ends the whole program without marking the run (it then read "pid P marked it lost"). It
    is sent no signal."""
    for run in running:
        process = run.process or {}
        how = (
            "recording with dlperf.track"
            if tracked(run)
            else "running it with dlperf.run"
            if run_by_api(run)
            else None
        )
        if how is not None and process_alive(process) is True:
            raise UserError(
                f"run {run.id} is recorded by pid {process.get('pid')}, a Python program "
                f"{how}, not a dlperf command: --force sends it no signal; nothing deleted",
                "stop that program, then delete the run again: once its process is gone, "
                "the run reads as lost and deletes without --force",
            )


STOP_WAIT_S = 60.0  # for a stopped run's process to mark it killed (it ends its current step)
POLL_S = 0.1
# The tag `stop` puts on a run before it signals the run's process, its value the deleting
# process (`this_process()`): the stopped process, which reads its run as soon as it has
# marked it, before the delete waiting for that mark has run, tells no resume of it
# (`deleted_by`). A signal carries no word of why it was sent.
DELETING_TAG = "dlperf.deleting"


def deleter(mark: str | None) -> dict[str, Any] | None:
    """The process (`this_process()`) a `DELETING_TAG` value names; None for no mark, or a
    value `stop` did not write (a tag of that name set by hand before `runs tag` refused it,
    or in the database: `{"host": ..., "pid": 1}` named init, a live "delete" for good)."""
    try:
        process = json.loads(mark or "null")
    except ValueError:
        return None
    if not isinstance(process, dict) or process.keys() != PROCESS_KEYS:
        return None
    return process


def stale_mark(mark: str | None) -> bool:
    """Whether a `DELETING_TAG` value is the mark of a delete known to be gone (its process
    ended, on this host, or the machine rebooted since): a `runs delete --force` SIGKILLed
    while it waited, which deleted nothing. Such a mark says nothing true of its run, and
    the store's readers leave it out; one of a process that lives, or that cannot be told
    from here (another host), is kept."""
    process = deleter(mark)
    return process is not None and process_alive(process) is False


def live_deleter(mark: str | None) -> int | None:
    """The pid of the live process (`runs delete --force`) a `DELETING_TAG` value names; None
    for no mark, or one whose delete is gone (killed before it deleted: the run stays, to
    resume) or cannot be told from here."""
    process = deleter(mark)
    if process is None or process_alive(process) is not True:
        return None
    return int(process["pid"])  # an int: process_alive tells no other pid alive


def deleted_by(run: RunRecord) -> int | None:
    """The pid of the live process (`runs delete --force`) that stopped `run` to delete it,
    from the mark `stop` put on it (`live_deleter`)."""
    return live_deleter(run.tags.get(DELETING_TAG))


def _waiting_for(run_id: int, pid: int, wait_s: float) -> str:
    waits = f"waiting up to {wait_s:g} s for it to mark run {run_id} killed"
    if is_stopped(pid):
        return f"pid {pid} is stopped (SIGSTOP, Ctrl-Z) until kill -CONT {pid}; {waits}"
    return f"sent SIGTERM to pid {pid}; {waits}"


@dataclass
class Stopped:
    """A running run that `runs delete --force` met: stopped (its process, told to stop,
    marked it `status`), or left to run on another host, where it cannot be stopped."""

    run_id: int
    pid: int | None
    host: str | None
    status: str | None  # None: not stopped
    elsewhere: str | None = None  # the store its process writes, this one being its copy

    @property
    def marked(self) -> bool:
        """Whether the process stored a status before it ended: `lost` is only ever read
        (the run is still stored `running`, its process gone), never written."""
        return self.status is not None and self.status != LOST

    def said(self) -> tuple[str, bool]:
        """What `runs delete --force` says of it, and whether that is a warning."""
        run, pid = f"run {self.run_id}", f"pid {self.pid}"
        if self.elsewhere is not None:
            return (
                f"{run} runs in {pid}, which writes {self.elsewhere} (this store is a copy of "
                "it): not stopped, deleted from this store only",
                True,
            )
        if self.status is None:
            return (
                f"{run} runs in {pid} on {self.host}, which cannot be stopped from here: "
                "deleted under it",
                True,
            )
        if self.marked:
            return f"stopped {run}: {pid} marked it {self.status}", False
        # it ended without storing a status: the run reads as lost, nothing marked it
        return f"stopped {run}: {pid} ended without marking it (it reads as {self.status})", False


def stop(
    store: RunStore,
    runs: Sequence[RunRecord],
    wait_s: float = STOP_WAIT_S,
    waiting: Callable[[str], None] | None = None,
) -> list[Stopped]:
    """Stop the processes of the `running` runs among `runs`: SIGTERM, which dlperf takes as
    Ctrl-C (the run is marked killed), then wait until each run is no longer running, first
    telling `waiting` what for and how long (a stopped process, SIGSTOP or Ctrl-Z, acts on
    no signal until it is continued: the wait would otherwise be a silent minute). A run
    whose process runs on another host is not stopped (it is deleted under it, and its
    writes then fail), nor one whose process writes another store, this one its copy.
    `runs` are as `to_delete` gave them: a `dlperf.track` run whose program is alive here
    was refused there, before any process was signalled.

    Each run is marked (`DELETING_TAG`) before its process is signalled, so that the stopped
    process says it was stopped to be deleted, not how to resume it; a stop that fails (a
    process that does not stop in time, this one interrupted) takes its marks back, as
    nothing is deleted then. The delete that follows removes them with the runs' tags."""
    marked: list[int] = []
    try:
        return _stop(store, runs, wait_s, waiting, marked)
    except BaseException:
        for run_id in marked:
            # The error said is the stop's: a mark left unremoved counts for nothing once
            # this process ends (`deleted_by`, `stale_mark`), and a resume removes it.
            with contextlib.suppress(Exception):
                store.set_tags(run_id, {DELETING_TAG: None})
        raise


def _stop(
    store: RunStore,
    runs: Sequence[RunRecord],
    wait_s: float,
    waiting: Callable[[str], None] | None,
    marked: list[int],
) -> list[Stopped]:
    """`stop`'s work, adding to `marked` each run it marks before signalling its process."""
    refuse_being_deleted(runs)
    done = []
    for run in runs:
        if run.status != "running":
            continue
        process = run.process or {}
        pid, host = process.get("pid"), process.get("host")
        # A copy's row of a run another store's process writes: that process is not this
        # store's to stop (SIGTERM ended the original's run, and said it "reads as lost")
        if (elsewhere := store.writes_elsewhere(run)) is not None:
            done.append(Stopped(run.id, pid, host, None, elsewhere))
            continue
        if pid is None or process_alive(process) is not True:
            done.append(Stopped(run.id, pid, host, None))
            continue
        store.set_tags(run.id, {DELETING_TAG: json.dumps(this_process())})
        marked.append(run.id)
        os.kill(pid, signal.SIGTERM)
        if waiting is not None:
            waiting(_waiting_for(run.id, pid, wait_s))
        deadline = time.monotonic() + wait_s
        while (status := store.get_run(run.id).status) == "running":
            if time.monotonic() > deadline:
                raise UserError(
                    f"run {run.id}: pid {pid} did not stop within {wait_s:g} s; nothing deleted",
                    f"stop it with kill -9 {pid}, then delete the run again",
                )
            time.sleep(POLL_S)
        done.append(Stopped(run.id, pid, host, status))
    return done
