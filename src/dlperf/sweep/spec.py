"""A sweep file: a base experiment, the axes that vary, and the points they make.

```toml
base = "../digits_smallcnn.toml"   # the sweep file's directory first, then the cwd
name = "lr"                        # default: the file's stem
repeats = 2                        # seeds run.seed = 0..repeats-1 of every point
max_points = 10000                 # the most points (combinations x repeats) it may make
[grid]                             # every combination of these
"train.lr" = [0.1, 0.01]
[zip]                              # these vary together (equal lengths), times the grid
"train.epochs" = [1, 2]
"train.batch_size" = [32, 64]
[set]                              # fixed overrides of every point
"data.limit" = 256
```

Every point is validated as `dlperf run --set` would validate it, before anything runs. The
points are counted (a product of the axes' lengths) before any is made: a few lines of TOML
can name billions of them, and making them would take all the memory there is.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from dlperf.config import (
    Commands,
    Count,
    Experiment,
    Section,
    apply_override,
    assign,
    build_experiment,
    check_keys,
    read_toml,
    validation_message,
)
from dlperf.config.experiment import UNHASHED_RUN_KEYS, RunConfig
from dlperf.config.loading import key_clash
from dlperf.errors import UserError
from dlperf.parsing import flatten, stem_name
from dlperf.paths import not_regular
from dlperf.progress import NullReporter, Reporter
from dlperf.store.names import Made, at_most, check_made_names
from dlperf.store.query import setting

# About a second of checking (a millisecond a point): from here on, say what the wait is for.
ANNOUNCE_POINTS = 1_000


class SweepFile(Section):
    """Strict as every experiment section is: `max_points = true` or `repeats = "2"` is an
    error, not 1 or 2."""

    base: str
    """The experiment every point starts from."""
    name: str | None = None
    """The study's name; default: the sweep file's stem."""
    repeats: int = Field(1, ge=1)
    """Runs of every point, with run.seed = 0..repeats-1 (1: the base's seed)."""
    max_points: Count = 10_000
    """The most points (axis combinations times repeats) the sweep may make: each is a run,
    and each is built and checked before the first one starts."""
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    """Axes combined as a product: "dotted.key" = [values]."""
    zip: dict[str, list[Any]] = Field(default_factory=dict)
    """Axes that vary together (all of one length), combined with the grid as a product."""
    set: dict[str, Any] = Field(default_factory=dict)
    """Fixed overrides applied to every point."""

    @field_validator("name")
    @classmethod
    def _printable(cls, name: str | None) -> str | None:
        # every point's run is named "NAME LABEL": checked as run.name is, here, where its
        # error names the sweep file and the key, not as the first point's run is named
        return RunConfig._printable(name)

    @model_validator(mode="before")
    @classmethod
    def _dotted(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            for table in ("grid", "zip"):
                if isinstance(raw.get(table), dict):
                    raw = {**raw, table: flatten(raw[table])}
        return raw


@dataclass
class Point:
    """One run of the sweep: the axis values and seed it was made from, and its config."""

    index: int
    params: dict[str, Any]
    seed: int | None
    exp: Experiment

    def label(self) -> str:
        """The point's values as --set takes them (`setting`), and its seed: its run's name and
        its progress lines. Written as Python, augment.flip=True and {'kind': 'cosine'} were
        what --set refuses or cannot read; a text holding a control or format character is
        escaped ("a\\tb"), which run.name takes (written raw, a traceback)."""
        return _label(self.params) + ("" if self.seed is None else f" seed={self.seed}")


def _label(params: dict[str, Any]) -> str:
    """Axis values as a point's label and its errors write them: KEY=VALUE as --set takes it."""
    return " ".join(f"{k}={setting(v)}" for k, v in params.items())


@dataclass
class Sweep:
    path: Path
    name: str
    base: Path
    axes: dict[str, list[Any]]
    repeats: int
    points: list[Point]
    threads_set: bool  # run.threads given by the base, [set] or an axis


def _read_base(path: Path, base: str) -> tuple[Path, dict[str, Any]]:
    """The base experiment and its TOML: the first path there, relative to the sweep file's
    directory first, then the cwd. What is wrong with it (a directory, a FIFO, malformed
    TOML) is read_toml's line, after the sweep file's name: a path that is there but is not a
    regular file was "no such experiment file", naming the path that was there."""
    candidates = [path.parent / base, Path(base)]
    found = next((candidate for candidate in candidates if candidate.exists()), None)
    if found is None:
        # abspath, not resolve(): a NUL in `base` is no file, but resolve() raised. An
        # absolute base is one path, looked for once
        looked = dict.fromkeys(os.path.abspath(c) for c in candidates)
        raise UserError(
            f"{path}: base {base!r}: no such experiment file",
            f"looked for {' and '.join(looked)}",
        )
    try:
        raw = read_toml(found)
    except UserError as e:
        raise UserError(f"{path}: base {e.message}", e.hint) from None
    if {"base", "grid", "zip"} & raw.keys():  # keys of a sweep file, none an experiment's
        raise UserError(
            f"{path}: base {found} is a sweep file, not an experiment",
            "give the experiment file every point starts from",
        )
    return found, raw


def _check_base(where: str, base_raw: dict[str, Any], first: dict[str, Any]) -> None:
    """Refuse a base that is wrong alone, naming its file (`where`), before any point: its
    fault was said as the first point's, "point 1 (train.lr=0.1)", a key the sweep file does
    not hold. A base that the first point's values (`first`: [set], --set, the axes) put
    right, or that the first point gets wrong otherwise, is left to the points."""
    try:
        build_experiment(base_raw, where, new=True)
        return
    except UserError as e:
        alone = e
    raw = copy.deepcopy(base_raw)
    try:
        for key, value in first.items():
            assign(raw, key, value, where)
        build_experiment(raw, where, new=True)
    except UserError as e:
        if str(e) == str(alone):  # the base's fault, whatever the point sets
            raise alone from None


def _check_read(said: str, key: str) -> None:
    """Refuse an axis's, [set]'s or --set's `key` (`said` names where it is given) in a
    command's section ([scale], [serve], ...): a point is a run, whose experiment leaves those
    sections out (build_experiment), so the value was used nowhere and an axis's points were
    "the same config". Split as a point's keys are (assign), quotes and all."""
    parts: dict[str, Any] = {}
    try:
        assign(parts, key, None, said)
    except UserError:  # a malformed key: the first point says what is wrong with it
        return
    section = next(iter(parts))
    if section in Commands.model_fields:
        *some, last = Experiment.model_fields
        raise UserError(
            f"{said} {key!r} is a key of dlperf {section}'s [{section}] section: a sweep's "
            "points are runs, which do not read it",
            f"sweep or set a key of {', '.join(some)} or {last}",
        )


# How to name a sweep file, in the words of read_toml's refusals.
_SWEEP_HINT = "give the path of a sweep TOML file"


def _parse(path: Path) -> SweepFile:
    # read_toml's lines, of a sweep file (it would call the file an experiment file)
    kind = not_regular(path)
    if kind == "a directory":
        raise UserError(f"{path}: is a directory, not a sweep file", _SWEEP_HINT)
    if kind is not None:  # a FIFO (a pipe as /dev/stdin) would block the read
        raise UserError(f"sweep file {path} is not a regular file ({kind})", _SWEEP_HINT)
    if not path.is_file():
        raise UserError(f"{path}: no such sweep file", _SWEEP_HINT)
    raw = read_toml(path)
    check_keys(raw, SweepFile.model_fields, str(path))
    # "train.lr" and train.lr (or [grid.train] lr) are one key to the points: flattened, the
    # later value was kept and the other axis never ran
    for table in ("grid", "zip", "set"):
        clash = key_clash(raw[table]) if isinstance(raw.get(table), dict) else None
        if clash is not None:
            raise UserError(f"{path}: [{table}] {clash}", "write it once")
    try:
        spec = SweepFile.model_validate(raw)
    except ValidationError as e:
        raise validation_message(e, str(path)) from None
    if not spec.grid and not spec.zip:
        raise UserError(f"{path}: no axes to sweep", 'add e.g. [grid] "train.lr" = [0.1, 0.01]')
    for table, axes in (("grid", spec.grid), ("zip", spec.zip), ("set", flatten(spec.set))):
        for key in axes:
            _check_read(f"{path}: [{table}]", key)
    for table, axes in (("grid", spec.grid), ("zip", spec.zip)):
        for key, values in axes.items():
            if not values:
                raise UserError(f"{path}: [{table}] {key!r} has no values")
    lengths = {key: len(values) for key, values in spec.zip.items()}
    if len(set(lengths.values())) > 1:
        sizes = ", ".join(f"{k} has {n}" for k, n in lengths.items())
        raise UserError(f"{path}: [zip] axes must be of equal length: {sizes}")
    both = spec.grid.keys() & spec.zip.keys()
    if both:
        raise UserError(f"{path}: {sorted(both)[0]!r} is in both [grid] and [zip]")
    # An axis's value is assigned over [set]'s: a [set] of a key the sweep varies would be
    # used nowhere (refused as --set of it is).
    for key in flatten(spec.set):
        for table, axes in (("grid", spec.grid), ("zip", spec.zip)):
            if key in axes:
                raise UserError(
                    f"{path}: [set] {key!r} is varied by [{table}]", "drop it from [set]"
                )
    if spec.repeats > 1 and "run.seed" in {*spec.grid, *spec.zip, *flatten(spec.set)}:
        raise UserError(f"{path}: run.seed is set by repeats", "drop it, or set repeats = 1")
    _check_count(path, spec)
    return spec


def _count(spec: SweepFile) -> int:
    """The points the sweep makes, from the axes' lengths alone (an exact integer)."""
    rows = len(next(iter(spec.zip.values()))) if spec.zip else 1
    return math.prod(len(values) for values in spec.grid.values()) * rows * spec.repeats


def _check_count(path: Path, spec: SweepFile) -> None:
    count = _count(spec)
    if count <= spec.max_points:
        return
    factors = [f"{len(values):,}" for values in spec.grid.values()]
    if spec.zip:
        factors.append(f"{len(next(iter(spec.zip.values()))):,} zip rows")
    if spec.repeats > 1:
        factors.append(f"{spec.repeats:,} repeats")
    raise UserError(
        f"{path}: {count:,} points ({' x '.join(factors)}) is more than max_points = "
        f"{spec.max_points:,}",
        "give the axes fewer values, or raise max_points in the sweep file if every point "
        "is meant to run",
    )


def _combinations(spec: SweepFile) -> Iterator[dict[str, Any]]:
    """Every combination of axis values, one at a time: the grid's product times the zip's
    rows."""
    rows = [
        dict(zip(spec.zip, values, strict=True)) for values in zip(*spec.zip.values(), strict=True)
    ]
    for values in itertools.product(*spec.grid.values()):
        grid = dict(zip(spec.grid, values, strict=True))
        for row in rows or [{}]:
            yield {**grid, **row}


def _check_run_names(path: Path, name: str, points: list[Point]) -> None:
    """Every point's run is named "SWEEP-NAME LABEL": a name that fits the store as the
    study's may not once its longest label is added, and the first point failed on it (its
    hint to shorten run.name, which the sweep sets), a study of no runs left behind."""
    made = [Made("run", p.exp.run.name or "", f"point label {p.label()!r}") for p in points]
    check_made_names(name, "sweep name", made, at_most("sweep name"), f"{path}: ")


def _same_config(path: Path, where: str, params: dict[str, Any], earlier: Point) -> UserError:
    """Why a point has the config of an `earlier` one: the axes that tell them apart set only
    keys its hash leaves out (run.log_every, ...: the same run again), or an axis repeats a
    value, or sets what [set] or the base already does."""
    differ = [key for key, value in params.items() if earlier.params.get(key) != value]
    if differ and all(_unhashed(key) for key in differ):
        does = "does" if len(differ) == 1 else "do"
        return UserError(
            f"{path}: {' and '.join(differ)} {does} not change what is trained",
            "sweep a key that does",
        )
    return UserError(
        f"{where}: the same config as point {earlier.index + 1}",
        "an axis repeats a value, or sets what [set] or the base already does",
    )


def _unhashed(key: str) -> bool:
    """Whether a dotted key is one of UNHASHED_RUN_KEYS or within one (run.profile.active)."""
    section, _, rest = key.partition(".")
    return section == "run" and rest.partition(".")[0] in UNHASHED_RUN_KEYS


def load_sweep(
    path: str | Path, overrides: list[str] | None = None, reporter: Reporter | None = None
) -> Sweep:
    """Read and check a sweep file and build (and validate) every point, storing nothing.
    `overrides` (--set KEY=VALUE) fix a key in every point, over the file's [set]; a key the
    sweep varies cannot be fixed. `reporter` hears of the points as they are checked (about a
    millisecond each: a large sweep takes seconds)."""
    path = Path(path)
    reporter = reporter or NullReporter()
    spec = _parse(path)
    given: dict[str, Any] = {}
    for assignment in overrides or []:
        apply_override(given, assignment)
    # --set's keys were split already (a quoted part kept whole): quoted again to stay whole
    fixed = {**flatten(spec.set), **flatten(given, quote=True)}
    for key in flatten(given, quote=True):
        _check_read("--set", key)
        if key in spec.grid or key in spec.zip or (key == "run.seed" and spec.repeats > 1):
            raise UserError(f"--set {key}: {path} varies it", "drop --set, or edit the sweep file")
    # A file name that is not UTF-8 arrives with lone surrogates, which no store can encode.
    name = spec.name or stem_name(path)
    base, base_raw = _read_base(path, spec.base)
    seeds: list[int | None] = list(range(spec.repeats)) if spec.repeats > 1 else [None]
    first = {**fixed, **next(_combinations(spec))}
    if seeds[0] is not None:
        first["run.seed"] = seeds[0]
    _check_base(f"{path}: base {base}", base_raw, first)
    points: list[Point] = []
    seen: dict[str, int] = {}
    count = _count(spec)
    if count >= ANNOUNCE_POINTS:
        reporter.log(f"sweep {name!r}: checking {count:,} points before the first one runs")
    reporter.task(f"sweep {name!r}: checking its points", total=count)
    for params in _combinations(spec):
        for seed in seeds:
            index = len(points)
            where = f"{path} point {index + 1} ({_label(params)})"
            raw = copy.deepcopy(base_raw)  # one point's overrides never reach the next
            for key, value in {**fixed, **params}.items():
                assign(raw, key, value, where)
            if seed is not None:
                assign(raw, "run.seed", seed, where)
            exp = build_experiment(raw, where, new=True)
            digest = exp.config_hash()
            if digest in seen:
                raise _same_config(path, where, params, points[seen[digest]])
            seen[digest] = index
            point = Point(index, params, seed, exp)
            exp.run.name = f"{name} {point.label()}"
            points.append(point)
            reporter.advance()
    _check_run_names(path, name, points)
    threads_set = "threads" in base_raw.get("run", {}) or any(
        key == "run.threads" for key in (*fixed, *spec.grid, *spec.zip)
    )
    return Sweep(path, name, base, {**spec.grid, **spec.zip}, spec.repeats, points, threads_set)
