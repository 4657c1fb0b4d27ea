"""The experiment, what `dlperf run` trains and hashes: [model], [data], [train], [augment],
[target] and [run], one pydantic model each; and `Job`, what one command runs: the
experiment and the command's own section(s)."""

# Section is a pydantic model, which copies a field's mutable default per instance; ruff
# knows that of pydantic's own BaseModel only, not of a subclass imported from base.py.
# ruff: noqa: RUF012

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Protocol, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticKnownError
from pydantic_core.core_schema import ErrorType

from dlperf.config.base import (
    Count,
    Fraction,
    Mean,
    NonNegative,
    Positive,
    Precision,
    Rate,
    Section,
    Seed,
    Size,
    Std,
)
from dlperf.formatting import binary_size, few
from dlperf.parsing import absolute_model_name, has_control, is_file_spec, model_file_text
from dlperf.paths import file_digest, unexpanded
from dlperf.system import machine_memory


def _stat(path: Path) -> os.stat_result | None:
    """`path`'s stat, None where no file can be: not there, or a name no file may have (too
    long, a NUL in it: what a config accepts as text, the OS refuses as a path)."""
    try:
        return path.stat()
    except (OSError, ValueError):
        return None


def weights_file(weights: str | None) -> Path | None:
    """The state-dict file `model.weights` names; None for none, run:ID or run:last:NAME, and
    a torchvision weights name (a bare word that names no file here)."""
    if weights is None or weights.startswith("run:"):
        return None
    if re.fullmatch(r"\w+", weights) and _stat(Path(weights)) is None:
        return None
    return Path(weights)


# The keys of a run's `system` that hold the sha256 of the files it trained from, so that a run
# says which bytes it started from: its model.weights file (weights_digest), its model file
# (model_file_digest) and the modules beside it that its import loaded (helper.py), by their
# path relative to its folder. A sweep's points and distill's stages trained from other bytes
# are not reused (`changed_source`). Here, not with the run's code: a sweep checks them
# without importing torch.
WEIGHTS_FILE_DIGEST = "weights_file_sha256"
MODEL_FILE_DIGEST = "model_file_sha256"
MODEL_NEIGHBOURS_DIGEST = "model_neighbours_sha256"
# Of a run trained from `run:ID` or `run:last:NAME` weights: the run they resolved to and the
# sha256 of its checkpoint file then. Its config holds only the text, and run:last:NAME names
# another run once a newer one of that name finishes (`changed_source`).
WEIGHTS_RUN = "weights_run"
WEIGHTS_RUN_DIGEST = "weights_run_checkpoint_sha256"


class _Run(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def status(self) -> str: ...


class WeightsRuns(Protocol):
    """The reads of a run store that resolve `run:` weights (engine.stored's `StoredRuns`
    and the store meet it): here, so that a sweep checks its points without the engine."""

    def list_runs(self, kind: str | None = None) -> Sequence[_Run]: ...

    def artifacts(self, run_id: int) -> list[dict[str, Any]]: ...


class ListedOnce:
    """`runs` listed once per kind: what checks `run:` weights of many stored runs in one go
    (a sweep's points) reads, instead of one listing of the store per point."""

    def __init__(self, runs: WeightsRuns) -> None:
        self._runs = runs
        self._listed: dict[str | None, Sequence[_Run]] = {}

    def list_runs(self, kind: str | None = None) -> Sequence[_Run]:
        if kind not in self._listed:
            self._listed[kind] = self._runs.list_runs(kind=kind)
        return self._listed[kind]

    def artifacts(self, run_id: int) -> list[dict[str, Any]]:
        return self._runs.artifacts(run_id)


def weights_run_id(weights: str | None, runs: WeightsRuns) -> int | None:
    """The run `run:ID` or `run:last:NAME` weights name now (the newest finished run of
    that name); None for weights of another form, a malformed one, or no such run."""
    rest = (weights or "").removeprefix("run:")
    if weights is None or rest == weights:
        return None
    if rest.isdigit():
        return int(rest)
    name = rest.removeprefix("last:")
    if not rest.startswith("last:") or not name:
        return None
    for run in runs.list_runs(kind="run"):  # newest first
        if run.name == name and run.status == "finished":
            return run.id
    return None


def run_checkpoint_digest(run_id: int, runs: WeightsRuns) -> str | None:
    """The sha256 of run `run_id`'s last recorded checkpoint file (what `run:` weights start
    from); None for none recorded, or one not there to read."""
    paths = [a["path"] for a in runs.artifacts(run_id) if a["kind"] == "checkpoint"]
    return _digest(Path(paths[-1])) if paths else None


def weights_run_record(run_id: int | None, runs: WeightsRuns) -> dict[str, Any]:
    """What a run trained from `run:` weights records of them in its system: the run they
    were read from (`run_id`, None for weights of another form) and its checkpoint's digest."""
    if run_id is None:
        return {}
    return {WEIGHTS_RUN: run_id, WEIGHTS_RUN_DIGEST: run_checkpoint_digest(run_id, runs)}


def _changed_weights_run(
    weights: str | None, system: dict[str, Any], runs: WeightsRuns
) -> str | None:
    """Whether `run:` weights resolve now to another run than a stored run recorded training
    from, or to other bytes of its checkpoint; None when not, or when it recorded none, or
    the run or its checkpoint is gone now (training it again says so)."""
    then = system.get(WEIGHTS_RUN)
    if then is None:
        return None
    now = weights_run_id(weights, runs)
    if now is not None and now != then:
        return f"its model.weights run (run {then} then, run {now} now)"
    trained = system.get(WEIGHTS_RUN_DIGEST)
    digest = None if now is None or trained is None else run_checkpoint_digest(now, runs)
    if digest not in (None, trained):
        return f"its model.weights run's checkpoint (run {now}'s)"
    return None


def weights_digest(weights: str | None) -> str | None:
    """The sha256 of the state-dict file `model.weights` names; None for weights of another
    form, or a file that is not there to read."""
    path = weights_file(weights)
    return None if path is None else _digest(path)


def model_file_digest(name: str) -> str | None:
    """The sha256 of the source of the model file `name` names (path/to/file.py:factory);
    None for a registered model or a file that is not there to read."""
    return _digest(Path(model_file_text(name) or name)) if is_file_spec(name) else None


def model_changes(config: dict[str, Any], system: dict[str, Any] | None) -> tuple[bool, list[str]]:
    """Of a stored run (its `config` and `system`): whether the model file it names is another
    now than the one it recorded training from (not when it is gone: its import says so), and
    the modules beside it that its import loaded then whose source is another now, or gone.
    Nothing for what it recorded no digest of (a registered model, a run stored before)."""
    recorded = system or {}
    name = str(config.get("model", {}).get("name", ""))
    trained = recorded.get(MODEL_FILE_DIGEST)
    now = None if trained is None else model_file_digest(name)
    folder = Path(model_file_text(name)).parent
    neighbours = recorded.get(MODEL_NEIGHBOURS_DIGEST) or {}
    others = [where for where, sha in sorted(neighbours.items()) if _digest(folder / where) != sha]
    return now not in (trained, None), others


def changed_model_files(
    config: dict[str, Any], system: dict[str, Any] | None, file: str
) -> tuple[str, bool] | None:
    """What of a stored run's model file (`file`: the words for it, "its model file", "model
    file F") and the modules beside it that its import loaded differs from what the run was
    trained from ("model file F", "module helper.py beside model file F", "model file F and
    modules a.py, b.py beside it"), and whether modules are among it; None when none does,
    and for a run stored without the digests (`model_changes`)."""
    file_changed, neighbours = model_changes(config, system)
    changed = [file] if file_changed else []
    if neighbours:
        modules = f"module{'s' if len(neighbours) > 1 else ''} {few(neighbours)}"
        changed.append(f"{modules} beside {'it' if changed else file}")
    return (" and ".join(changed), bool(neighbours)) if changed else None


def changed_source(
    config: dict[str, Any], system: dict[str, Any] | None, runs: WeightsRuns | None = None
) -> str | None:
    """Which file a stored run (its `config` and `system`) trained from has other bytes now
    than it recorded: "its model file", "module helper.py beside its model file", "its
    model.weights file"; None for none, and for a file it recorded no digest of (a registered
    model, weights of another form, a sweep point failed before its run was recorded, a run
    of a dlperf before round 28 or 29): it is taken as it was. Its config, hashed now, reads
    the files as they are now, and would pass for a run of them: a sweep point, a stage.
    With the store (`runs`), `run:` weights too: "its model.weights run (run 1 then, run 9
    now)" once they resolve to another run, its checkpoint once that holds other bytes (a
    run of a dlperf before round 57 recorded neither)."""
    changed = changed_model_files(config, system, "its model file")
    if changed is not None:
        return changed[0]
    trained = (system or {}).get(WEIGHTS_FILE_DIGEST)
    weights = config.get("model", {}).get("weights")
    if trained is not None and trained != weights_digest(weights):
        return "its model.weights file"
    return None if runs is None else _changed_weights_run(weights, system or {}, runs)


def _digest(path: Path) -> str | None:
    """The sha256 of the file at `path`, None where none is there to read; hashed once while
    it stays the file it was (`_file_sha256`)."""
    found = _stat(path)
    if found is None:
        return None
    try:
        where = str(path.absolute())
    except OSError:  # the current directory was deleted
        return None
    return _file_sha256(where, found.st_size, found.st_mtime_ns, found.st_ino, found.st_ctime_ns)


@functools.cache
def _file_sha256(path: str, size: int, mtime_ns: int, inode: int, ctime_ns: int) -> str | None:
    """The sha256 of the file at `path`, read once while it stays the file it was (a sweep
    hashes each point's config, a distill study each stage's: pretrained weights are 100 MB).
    Unbounded: a sweep over more weights files than a bound would read each again and again.
    The inode and ctime too: a file of the same size put in its place with its mtime kept
    (rsync -t, tar x, cp -p) is another file, or was written since."""
    return file_digest(path)


class ModelConfig(Section):
    name: str = "smallcnn"
    """Registry or torchvision model name, or "path/to/file.py:factory"."""
    kwargs: dict[str, Any] = {}
    """Extra keyword arguments for the model factory."""
    weights: str | None = None
    """Starting weights: a torchvision weights name of the model (e.g. "IMAGENET1K_V1"),
    "run:ID" or "run:last:NAME" (a stored run's checkpoint), or a state-dict file; the head is
    new, sized for the data's classes. None: random initialisation."""
    transfer: Literal["scratch", "finetune", "feature-extract"] = "scratch"
    """finetune: train all weights from model.weights; feature-extract: train only the new
    head, the backbone frozen (no gradients, batch-norm statistics fixed); scratch: random
    initialisation (model.weights then only sets the images' size and statistics).
    Unset: finetune when model.weights is given, else scratch."""
    head: Literal["new", "keep"] = "new"
    """new: a fresh head sized for the data's classes; keep: the weights' head too (the same
    classes, e.g. fine-tuning a `dlperf distill` student pre-trained on pseudo-labels)."""

    @field_validator("kwargs")
    @classmethod
    def _storable(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        # The stored config (JSON) is what export, --resume and a distill teacher rebuild the
        # model from: inf and nan were stored as null, a TOML date or time as a string, and a
        # model trained with the value was rebuilt with another (and hashed as another config).
        for key, value in _leaves(kwargs, ""):
            if isinstance(value, float) and not math.isfinite(value):
                lacks = "infinity or NaN"
            elif isinstance(value, datetime.date | datetime.time):
                lacks = "date or time"
            elif value is None or isinstance(value, bool | int | float | str):
                continue
            else:
                # Given from Python (dlperf.run's dict): an object was a traceback where the
                # config was stored (PydanticSerializationError); bytes and a set were stored
                # as text and a list, and the model rebuilt with those.
                kind = type(value)
                name = kind.__qualname__
                if kind.__module__ != "builtins":
                    name = f"{kind.__module__}.{kind.__name__}"
                raise ValueError(
                    f"{key.lstrip('.')} is of type {name}: not a JSON value, and the stored "
                    "config the model is rebuilt from (export, --resume) is JSON (give a "
                    "number, text, a list or a table)"
                )
            raise ValueError(
                f"{key.lstrip('.')} = {_toml_text(value)}: JSON has no {lacks}, and the stored "
                "config the model is rebuilt from (export, --resume) is JSON (give a number, or "
                "a string that the factory parses)"
            )
        return kwargs

    @field_validator("name")
    @classmethod
    def _file_absolute(cls, name: str) -> str:
        # Resolved here, against the directory the command runs in, so that the stored config
        # (and its hash) names the file trained, wherever the run is exported or resumed from.
        if is_file_spec(name):
            _refuse_unexpanded(os.path.expanduser(name.rpartition(":")[0]))
        return absolute_model_name(name)

    @field_validator("weights")
    @classmethod
    def _weights_absolute(cls, weights: str | None) -> str | None:
        # As model.name's file: two files of one relative name are two configs (a distill
        # stage run from another directory is not the one trained before). A name of no
        # file here is kept: where the weights are read, it is refused as typed. A leading ~
        # is the home directory, as in model.name and data.root (`DataConfig._home`).
        if weights is not None and not weights.startswith("run:"):
            weights = os.path.expanduser(weights)
            _refuse_unexpanded(weights)
        path = weights_file(weights)
        found = None if path is None or path.is_absolute() else _stat(path)
        if path is None or found is None or not stat.S_ISREG(found.st_mode):
            return weights
        try:
            return str(path.absolute())
        except FileNotFoundError:  # the current directory was deleted: the file is nowhere
            return weights

    @model_validator(mode="before")
    @classmethod
    def _transfer_default(cls, data: Any) -> Any:
        # Resolved here, so that the stored config (and its hash) says what was trained.
        if isinstance(data, dict) and data.get("weights") and "transfer" not in data:
            return {**data, "transfer": "finetune"}
        return data


def _refuse_unexpanded(path: str) -> None:
    """Refuse a model file's or weights' `path`, not there, that is a file:// URL or holds an
    environment variable (dlperf.paths.unexpanded), as data.root is refused: made absolute
    against the current directory, each was "not found" there, the URL one slash short."""
    if (found := unexpanded(path)) is not None:
        raise ValueError(f"{path} {found[0]} ({found[1]})")


def _leaves(value: Any, key: str) -> list[tuple[str, Any]]:
    """Each value within `value` (tables and arrays, at any depth) and its key: dotted, an
    array's item as [i] (as check_text_keys names it: a.1 would be table a's key "1")."""
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{key}.{k}")]
    if isinstance(value, list | tuple):  # a tuple from Python is stored as a list
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{key}[{i}]")]
    return [(key, value)]


def _toml_text(value: Any) -> str:
    """`value` (a float or a date or time) as TOML writes it: inf, -inf, nan, 2021-03-04."""
    return value.isoformat() if isinstance(value, datetime.date | datetime.time) else str(value)


def refused_model_keys(model: ModelConfig, name: str, honoured: tuple[str, ...]) -> str | None:
    """What a command that builds the model named by its MODEL argument `name` cannot honour
    in `[model]`, said in one line; None: all. `honoured` names the keys it takes (kwargs,
    transfer); model.name is honoured when it is `name`, and any other key given away from
    its default is refused rather than dropped."""
    given = model.model_fields_set
    if "name" in given and model.name != absolute_model_name(name):
        return f"model.name={model.name!r} disagrees with the model argument {name!r}"
    fields = ModelConfig.model_fields
    others = [
        f"model.{key}"
        for key in fields
        if key != "name" and key not in honoured and getattr(model, key) != fields[key].default
    ]
    if not others:
        return None
    return f"{', '.join(others)}: this command cannot honour {'them' if len(others) > 1 else 'it'}"


class DataConfig(Section):
    name: str = "digits"
    """digits | mnist5k | synthetic | cifar10 | cifar100 | fashionmnist | mnist | imagefolder |
    npz."""
    root: str = "data"
    """Directory of the on-disk data sets (cifar10, mnist, imagefolder ...); npz: the file."""
    download: bool = False
    """Let torchvision download the data set into `root` when it is missing."""
    loader: Literal["tensor", "torchvision"] = "tensor"
    """tensor: uint8 tensors in memory, augmented a batch at a time on the device.
    torchvision: the classic per-sample path (PIL transforms, DataLoader workers)."""
    num_workers: Size = 2
    """DataLoader worker processes for the torchvision loader."""
    in_memory: bool | None = None
    """Decode the whole data set into memory; None decides by `max_memory_gb` (true: an .npz is
    held whatever its size, where the machine's memory holds it)."""
    max_memory_gb: NonNegative = 4.0
    """Largest decoded data set kept in memory: with `in_memory` unset a larger image folder is
    streamed. An .npz, which cannot be, is refused over a limit set other than this default,
    unless `in_memory = true`; at the default it loads where the machine's memory holds it. A
    set resized in memory to `image_size` is held to it even so."""
    val_fraction: Fraction = 0.1
    """Share of the training set held out for per-epoch validation."""
    test_fraction: Fraction = 0.2
    """Share held out for the final test, for sets without an official test split."""
    split_seed: Seed = 0
    """Seed of the split permutation; fixed so splits do not change with run.seed."""
    limit: Count | None = None
    """Use at most this many training images (after the split), for quick runs."""
    holdout: Fraction = 0.0
    """Share of the training split set aside with its labels hidden: the unlabelled images of
    `dlperf distill --unlabeled NAME:holdout=F`. Runs train on the rest."""
    image_size: Count | None = None
    """Resize images to this side once at load (required for imagefolder); None: the data
    set's own size, or the resolution model.weights were trained at."""
    mean: Annotated[list[Mean], Field(min_length=1)] | None = None
    """Per-channel normalisation mean in [0,1]; None computes it from the training split."""
    std: Annotated[list[Std], Field(min_length=1)] | None = None
    """Per-channel normalisation std in [0,1]; None computes it from the training split."""
    shape: Annotated[list[Count], Field(min_length=3, max_length=3)] = [3, 32, 32]
    """synthetic: image shape C,H,W."""
    num_classes: Annotated[int, Field(ge=2, lt=2**31)] = 10
    """synthetic: number of classes."""
    size: Count = 2048
    """synthetic: number of training images."""

    @field_validator("root")
    @classmethod
    def _home(cls, root: str) -> str:
        # A leading ~ is the home directory, as in --db and the help's data.root=~/data: the
        # shell leaves it in --set data.root=~/data (not a word it expands) and in a TOML
        # file, and the readers took it as a folder named "~". Expanded here, every command
        # reading data.root (run, distill and its pool, data describe/samples) and the
        # stored config see the path itself.
        if not root.strip():  # Path("") is ".": imagefolder read wherever the command ran
            raise ValueError(
                'is empty (give the folder or .npz file of the data set; "." is the current '
                "directory)"
            )
        return os.path.expanduser(root)


class ScheduleConfig(Section):
    kind: Literal["multistep", "cosine", "constant"] = "constant"
    """Learning-rate schedule over epochs."""
    milestones: list[Count] = []
    """multistep: epochs at which the rate is multiplied by gamma."""
    gamma: Annotated[float, Field(gt=0, le=1)] = 0.1
    """multistep: the factor applied at each milestone (a decay: at most 1)."""
    warmup_epochs: NonNegative = 0.0
    """Linear warm-up from 0 over this many epochs (fractions allowed)."""
    min_lr: NonNegative = 0.0
    """cosine: the rate at the end of training."""


class TrainConfig(Section):
    epochs: Annotated[int, Field(ge=1, le=1_000_000)] = 10
    """Passes over the training set."""
    batch_size: Count = 64
    """Images per step (before batch augmentation multiplies it by M)."""
    optimizer: Literal["sgd", "adamw"] = "sgd"
    """sgd (with momentum/Nesterov) or adamw."""
    lr: Rate = 0.05
    """Peak learning rate."""
    momentum: Fraction = 0.9
    """SGD momentum; AdamW beta1."""
    nesterov: bool = False
    """Nesterov momentum for SGD."""
    weight_decay: Annotated[float, Field(ge=0, le=1)] = 5e-4
    """L2 penalty (SGD) or decoupled weight decay (AdamW)."""
    grad_clip: Positive | None = None
    """Clip the gradient norm to this value; None = no clipping."""
    label_smoothing: Fraction = 0.0
    """Label smoothing of the cross-entropy loss."""
    backbone_lr_scale: Annotated[float, Field(gt=0, le=100)] = 1.0
    """Learning rate of everything but the classifier head, as a multiple of train.lr (e.g.
    0.1 to fine-tune pretrained weights gently); the schedule scales both."""
    schedule: ScheduleConfig = ScheduleConfig()


# Batch augmentation's largest M: Hoffer et al. (2019) went up to 64 copies of a sample; each
# copy multiplies a step's memory and compute, and a larger M is a typo more often than a study.
MAX_BATCH_AUG = 64


def _within(key: str, bound: int, example: str, value: int) -> str:
    """The fix for a `key` above `bound`: an example the same check takes (at least 1, at most
    the bound), or 0 (off) where the bound is 0. A 1x1 image was told "<= 0, e.g. 1"."""
    if bound <= 0:
        return f"use {key} = 0 (off): the images are too small for it"
    return f"use {key} <= {bound}, e.g. {example}: {min(max(value, 1), bound)}"


class AugmentConfig(Section):
    crop_padding: Size = 0
    """Random crop after zero-padding every side by this many pixels; 0 = off. Less than the
    image side (a padding of the side or more lets a crop miss the image)."""
    flip: bool = False
    """Random horizontal flip with probability 1/2."""
    cutout: Size = 0
    """Side of the square Cutout mask (DeVries & Taylor 2017); 0 = off. Less than twice the
    image side less one (a larger square masks every pixel wherever it is centred)."""
    batch_aug_m: Annotated[int, Field(ge=1, le=MAX_BATCH_AUG)] = 1
    """Batch augmentation (Hoffer et al. 2019): M augmented copies of every sample (at most
    64; the M copies of a batch, as float32 images, must fit in memory)."""

    def refused(
        self, shape: Sequence[int], images: int, name: str, fewer: str = "train.batch_size"
    ) -> tuple[str, str] | None:
        """What makes this augmentation of `images` images (a batch) of `name`'s C,H,W `shape`
        useless or impossible, as (message, hint); None: nothing. A Cutout square that masks
        every pixel wherever it is centred, a padding that lets a crop be only padding (both
        blank images under their labels), M copies of the batch beyond the machine's memory
        (`fewer` names what else makes the batch smaller)."""
        channels, h, w = shape
        side = f"the {h}x{w} images of {name}"
        # The square, centred at (cy, cx), spans rows cy - cutout//2 up to cy + cutout - cutout//2:
        # every row of every centre once cutout//2 >= h - 1 and cutout - cutout//2 >= h, i.e.
        # from 2h - 1 (columns alike), as the torchvision path's _Cutout spans them too.
        blanks = 2 * max(h, w) - 1
        if self.cutout >= blanks:
            return (
                f"augment.cutout {self.cutout}: a square of side {blanks} or more masks every "
                f"pixel of {side} wherever it is centred: every augmented image is blank",
                _within("augment.cutout", blanks - 1, "half the image side", max(h, w) // 2),
            )
        # Offsets of the crop run over 0..2p: at 0 and 2p it misses the image once p >= side.
        if self.crop_padding >= min(h, w):
            return (
                f"augment.crop_padding {self.crop_padding}: padding {side} by {min(h, w)} or "
                "more lets a random crop miss the image, an image of padding alone under its "
                "label",
                _within(
                    "augment.crop_padding",
                    min(h, w) - 1,
                    "an eighth of the image side",
                    min(h, w) // 8,
                ),
            )
        m = self.batch_aug_m
        needed = m * images * channels * h * w * 4  # the copies normalised to float32
        memory = machine_memory()
        if needed > memory:
            return (
                f"augment.batch_aug_m {m}: {m} copies of a batch of {images} images of "
                f"{channels}x{h}x{w} take {binary_size(needed)} as float32, more than this "
                f"machine's {binary_size(memory)} of memory",
                f"give a smaller augment.batch_aug_m or {fewer}",
            )
        return None


class TargetConfig(Section):
    accuracy: float | None = None
    """Validation top-1 accuracy whose first epoch and wall time are recorded."""

    @field_validator("accuracy")
    @classmethod
    def _accuracy(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v <= 1:
            raise ValueError("is a fraction in (0, 1], e.g. 0.95")
        return v


class ProfileConfig(Section):
    """`[run.profile]`: a window of steps recorded by torch.profiler after the run's warm-up
    (its steps are left out of throughput and phase timings), stored as a Chrome trace."""

    enabled: bool = False
    """Record the window (`--profile` sets this)."""
    warmup: Size = 1
    """Steps the profiler runs but discards before recording (its own start-up cost)."""
    active: Count = 3
    """Steps recorded in the trace."""
    record_shapes: bool = False
    """Record operators' input shapes (larger traces; groups operators by shape)."""
    profile_memory: bool = False
    """Record tensor allocations and frees."""
    with_stack: bool = False
    """Record Python stacks of operators (much larger traces and slower steps)."""

    @property
    def steps(self) -> int:
        """Steps the window takes from the run, after its warm-up."""
        return self.warmup + self.active if self.enabled else 0


class RunConfig(Section):
    name: str | None = None
    """Run name shown in listings; defaults to the experiment file's stem, followed by
    `model.name=NAME` when --set trains another model than the file's."""

    @field_validator("name")
    @classmethod
    def _printable(cls, v: str | None) -> str | None:
        if v is not None and has_control(v):
            raise ValueError(
                "must hold no control characters (ESC, NUL, tab, newline, ...) nor format "
                "characters (U+202E, U+200B, ...)"
            )
        return v

    seed: Seed = 0
    """Seed of model initialisation, shuffling and augmentation."""
    device: str = "auto"
    """auto (CUDA, then MPS, then CPU) | cpu | cuda | cuda:1 | mps."""
    precision: Precision = "fp32"
    """Autocast precision of forward and loss; fp16 adds a gradient scaler."""
    channels_last: bool = False
    """Keep images and weights in NHWC memory format."""
    compile: bool = False
    """torch.compile the model (compile time is excluded from throughput)."""
    threads: Count | Literal["auto"] | None = None
    """CPU threads for this process; None = all cores this process may use; "auto" = the
    cores other processes leave free as the run starts (measured, docs/run.md#threads)."""

    @field_validator("threads", mode="wrap")
    @classmethod
    def _count_or_auto(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # pydantic reports a bad value against each member of the union, under the member's
        # name ("run.threads.constrained-int"): say the error of the kind given, as a count's.
        try:
            return handler(value)
        except ValidationError as e:
            errors = e.errors()
            kind = "literal" if isinstance(value, str) else "int"
            first = next((x for x in errors if kind in str(x["loc"][0])), errors[0])
            raise PydanticKnownError(cast(ErrorType, first["type"]), first.get("ctx")) from None

    timing: Literal["off", "coarse", "phases"] = "coarse"
    """off: wall time only; coarse: per-epoch throughput; phases: per-step data, copy,
    forward, backward and optimizer times, synchronising the device after each."""
    warmup_steps: Size = 5
    """Steps excluded from throughput and phase timings at the start of the run."""
    log_every: Count = 10
    """Steps between metric flushes to the store (and loss finiteness checks)."""
    out_dir: str = "dlperf_runs"
    """Directory for checkpoints and other run artifacts."""

    @field_validator("out_dir")
    @classmethod
    def _home(cls, out_dir: str) -> str:
        # A leading ~ is the home directory, as in data.root (which see): the checkpoints of
        # --set run.out_dir=~/od went into a folder named ~ in the working directory.
        return os.path.expanduser(out_dir)

    checkpoint: bool = True
    """Save a checkpoint at the end of every epoch (needed for --resume)."""
    profile: ProfileConfig = ProfileConfig()
    """A profiled window of steps (torch.profiler), stored with the run as a trace."""


# The [run] keys that say how a run is named, kept and watched, not what it trains: its config
# hash leaves them out, so a sweep that varies only these makes the same run again.
UNHASHED_RUN_KEYS = ("name", "out_dir", "log_every", "profile")


class Experiment(Section):
    """What is trained: a TOML file's [model], [data], [train], [augment], [target] and [run]."""

    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    augment: AugmentConfig = AugmentConfig()
    target: TargetConfig = TargetConfig()
    run: RunConfig = RunConfig()

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Experiment:
        train, schedule = self.train, self.train.schedule
        if train.optimizer == "sgd" and train.nesterov and train.momentum == 0:
            raise ValueError("train.nesterov: Nesterov momentum needs train.momentum > 0")
        if schedule.kind == "multistep" and not schedule.milestones:
            raise ValueError("train.schedule.milestones: multistep needs at least one epoch")
        # analyze and predict count the architecture (a frozen backbone's trainable head too):
        # they load no weights, so need none named.
        counting = bool(info.context and info.context.get("architecture_only"))
        if self.model.transfer != "scratch" and self.model.weights is None and not counting:
            raise ValueError(
                f"model.transfer: {self.model.transfer} needs model.weights (a torchvision "
                'weights name, run:ID or a state-dict file), or use transfer = "scratch"'
            )
        if schedule.kind == "cosine" and schedule.min_lr > train.lr:
            raise ValueError(
                f"train.schedule.min_lr: must not exceed train.lr {train.lr:g} "
                f"(got {schedule.min_lr:g})"
            )
        if self.data.name == "synthetic":
            _synthetic_fits(self.data)
            # Its images' shape is known here (data.image_size resizes them when the set loads:
            # then the checks where the data is built say it).
            shape = self.data.shape
            refused = (
                None
                if self.data.image_size
                else self.augment.refused(shape, train.batch_size, "synthetic")
            )
            if refused:
                raise ValueError(f"{refused[0]} ({refused[1]})")
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def config_hash(self) -> str:
        """Hash of everything that changes what is trained, the bytes of a model file and of a
        model.weights file too: not the run's name, paths or profiled window. (Runs stored
        before the command sections left `Experiment` hashed them out too, so their hashes are
        unchanged; but a model file's runs stored before round 30, whose hash held no
        file_sha256, hash otherwise now: a sweep re-hashes them, a distill study trains their
        stages once again.) -0.0 hashes as 0.0, one number to train with, so that a sweep
        takes `[0.0, -0.0]` for one point and finds a finished 0.0 point for -0.0: the hash
        stored with a run whose config holds a -0.0 (before round 37) is not its hash now, and
        a distill study trains such a stage once again; any other config hashes as before."""
        d = _unsigned_zeros(self.to_dict())
        for key in UNHASHED_RUN_KEYS:
            d["run"].pop(key)
        # What the weights file and the model file hold, not only their names: other bytes
        # under one name are another config (a distill stage is not reused, a sweep point not
        # taken for another). The modules the model file imports are found only by importing
        # it: `changed_source` checks those of a stored run.
        digest = weights_digest(self.model.weights)
        if digest is not None:
            d["model"]["weights_sha256"] = digest
        source = model_file_digest(self.model.name)
        if source is not None:
            d["model"]["file_sha256"] = source
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _unsigned_zeros(value: Any) -> Any:
    """`value` (a config's JSON) with every -0.0 in it 0.0: json.dumps writes "-0.0"."""
    if isinstance(value, dict):
        return {key: _unsigned_zeros(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unsigned_zeros(item) for item in value]
    return 0.0 if isinstance(value, float) and value == 0.0 else value


LABEL_BYTES = 8  # torch.randint's int64, as data.sources.synthetic draws the labels


def _synthetic_fits(data: DataConfig) -> None:
    """The synthetic set is drawn into memory at once (uint8 pixels and an int64 label an
    image, sizes as its reader draws them): refused here, before anything is allocated, when
    it cannot fit in the machine's memory. The labels count: for images of a few pixels they
    are most of it."""
    held = max(1, data.size // 8)  # its validation and test sets each
    images = data.size + 2 * held
    needed = images * (math.prod(data.shape) + LABEL_BYTES)
    memory = machine_memory()
    if needed > memory:
        raise ValueError(
            f"data.shape {data.shape}: the synthetic set's {images} images (data.size "
            f"{data.size}, {held} validation, {held} test) and their labels take "
            f"{binary_size(needed)}, more than this machine's {binary_size(memory)} of memory "
            "(give a smaller data.shape or data.size)"
        )


class Job(BaseModel):
    """What one command runs: the experiment and the section(s) of the command."""

    model_config = ConfigDict(frozen=True)
    experiment: Experiment
    counts_only: ClassVar[bool] = False  # analyze and predict count the model: no weights
    # Keys beneath the user's file, for a command whose defaults are not the experiment's
    # (detection's recipe): defaults < preset < file < --set < flags.
    preset: ClassVar[dict[str, Any]] = {}

    def check(self) -> str | None:
        """What the command cannot honour in the loaded config, said in one line; None: all."""
        return None
