"""An experiment: one pydantic model per TOML section, defaults < TOML < --set overrides.

Each field's docstring is its help text (`dlperf config show` prints the resolved tree).
Unknown keys fail naming the file, the key and the closest valid key.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import tomllib
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from dlperf.errors import UserError


class Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_assignment=True
    )


class ModelConfig(Section):
    name: str = "smallcnn"
    """Registry or torchvision model name, or "path/to/file.py:factory"."""
    kwargs: dict[str, Any] = {}
    """Extra keyword arguments for the model factory."""


class DataConfig(Section):
    name: str = "digits"
    """digits | mnist5k | synthetic | cifar10 | cifar100 | fashionmnist | mnist | imagefolder."""
    root: str = "data"
    """Directory of the on-disk data sets (cifar10, mnist, imagefolder ...)."""
    download: bool = False
    """Let torchvision download the data set into `root` when it is missing."""
    loader: Literal["tensor", "torchvision"] = "tensor"
    """tensor: uint8 tensors in memory, augmented a batch at a time on the device.
    torchvision: the classic per-sample path (PIL transforms, DataLoader workers)."""
    num_workers: int = 2
    """DataLoader worker processes for the torchvision loader."""
    in_memory: bool | None = None
    """Decode the whole data set into memory; None decides by `max_memory_gb`."""
    max_memory_gb: float = 4.0
    """Largest decoded data set kept in memory when `in_memory` is unset."""
    val_fraction: float = 0.1
    """Share of the training set held out for per-epoch validation."""
    test_fraction: float = 0.2
    """Share held out for the final test, for sets without an official test split."""
    split_seed: int = 0
    """Seed of the split permutation; fixed so splits do not change with run.seed."""
    limit: int | None = None
    """Use at most this many training images (after the split), for quick runs."""
    image_size: int | None = None
    """Resize images to this side (imagefolder; required there)."""
    mean: list[float] | None = None
    """Per-channel normalisation mean in [0,1]; None computes it from the training split."""
    std: list[float] | None = None
    """Per-channel normalisation std in [0,1]; None computes it from the training split."""
    shape: list[int] = [3, 32, 32]
    """synthetic: image shape C,H,W."""
    num_classes: int = 10
    """synthetic: number of classes."""
    size: int = 2048
    """synthetic: number of training images."""

    @field_validator("val_fraction", "test_fraction")
    @classmethod
    def _fraction(cls, v: float) -> float:
        if not 0 <= v < 1:
            raise ValueError("must be in [0, 1)")
        return v


class ScheduleConfig(Section):
    kind: Literal["multistep", "cosine", "constant"] = "constant"
    """Learning-rate schedule over epochs."""
    milestones: list[int] = []
    """multistep: epochs at which the rate is multiplied by gamma."""
    gamma: float = 0.1
    """multistep: the factor applied at each milestone."""
    warmup_epochs: float = 0.0
    """Linear warm-up from 0 over this many epochs (fractions allowed)."""
    min_lr: float = 0.0
    """cosine: the rate at the end of training."""


class TrainConfig(Section):
    epochs: int = 10
    """Passes over the training set."""
    batch_size: int = 64
    """Images per step (before batch augmentation multiplies it by M)."""
    optimizer: Literal["sgd", "adamw"] = "sgd"
    """sgd (with momentum/Nesterov) or adamw."""
    lr: float = 0.05
    """Peak learning rate."""
    momentum: float = 0.9
    """SGD momentum; AdamW beta1."""
    nesterov: bool = False
    """Nesterov momentum for SGD."""
    weight_decay: float = 5e-4
    """L2 penalty (SGD) or decoupled weight decay (AdamW)."""
    grad_clip: float | None = None
    """Clip the gradient norm to this value; None = no clipping."""
    label_smoothing: float = 0.0
    """Label smoothing of the cross-entropy loss."""
    schedule: ScheduleConfig = ScheduleConfig()

    @field_validator("epochs", "batch_size")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v


class AugmentConfig(Section):
    crop_padding: int = 0
    """Random crop after zero-padding every side by this many pixels; 0 = off."""
    flip: bool = False
    """Random horizontal flip with probability 1/2."""
    cutout: int = 0
    """Side of the square Cutout mask (DeVries & Taylor 2017); 0 = off."""
    batch_aug_m: int = 1
    """Batch augmentation (Hoffer et al. 2019): M augmented copies of every sample."""

    @field_validator("crop_padding", "cutout")
    @classmethod
    def _non_negative(cls, v: int) -> int:
        if v < 0:
            raise ValueError("must be 0 or more")
        return v

    @field_validator("batch_aug_m")
    @classmethod
    def _m(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v


class TargetConfig(Section):
    accuracy: float | None = None
    """Validation top-1 accuracy whose first epoch and wall time are recorded."""

    @field_validator("accuracy")
    @classmethod
    def _accuracy(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v <= 1:
            raise ValueError("is a fraction in (0, 1], e.g. 0.95")
        return v


class RunConfig(Section):
    name: str | None = None
    """Run name shown in listings; defaults to the experiment file's stem."""
    seed: int = 0
    """Seed of model initialisation, shuffling and augmentation."""
    device: str = "auto"
    """auto (CUDA, then MPS, then CPU) | cpu | cuda | cuda:1 | mps."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Autocast precision of forward and loss; fp16 adds a gradient scaler."""
    channels_last: bool = False
    """Keep images and weights in NHWC memory format."""
    compile: bool = False
    """torch.compile the model (compile time is excluded from throughput)."""
    threads: int | None = None
    """CPU threads for this process; None = all cores this process may use."""
    timing: Literal["off", "coarse", "phases"] = "coarse"
    """off: wall time only; coarse: per-epoch throughput; phases: per-step data, copy,
    forward, backward and optimizer times, synchronising the device after each."""
    warmup_steps: int = 5
    """Steps excluded from throughput and phase timings at the start of the run."""
    log_every: int = 10
    """Steps between metric flushes to the store (and loss finiteness checks)."""
    out_dir: str = "dlperf_runs"
    """Directory for checkpoints and other run artifacts."""
    checkpoint: bool = True
    """Save a checkpoint at the end of every epoch (needed for --resume)."""


class Experiment(Section):
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    augment: AugmentConfig = AugmentConfig()
    target: TargetConfig = TargetConfig()
    run: RunConfig = RunConfig()

    @model_validator(mode="after")
    def _consistent(self) -> Experiment:
        if self.train.schedule.kind == "multistep" and not self.train.schedule.milestones:
            raise ValueError("train.schedule.milestones: multistep needs at least one epoch")
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def config_hash(self) -> str:
        """Hash of everything that changes what is trained (not the run's name or paths)."""
        d = self.to_dict()
        for key in ("name", "out_dir", "log_every"):
            d["run"].pop(key)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


# --- loading ------------------------------------------------------------------------------


def _closest(key: str, choices: list[str]) -> str:
    match = difflib.get_close_matches(key, choices, n=1, cutoff=0.5)
    return f"did you mean '{match[0]}'?" if match else f"valid keys: {', '.join(choices)}"


def _check_keys(raw: dict[str, Any], model: type[BaseModel], where: str, prefix: str = "") -> None:
    """Name an unknown key and its closest valid spelling before pydantic sees it."""
    fields = model.model_fields
    for key, value in raw.items():
        path = f"{prefix}{key}"
        if key not in fields:
            raise UserError(f"{where}: unknown key '{path}'", _closest(key, list(fields)))
        annotation = fields[key].annotation
        if (
            isinstance(value, dict)
            and isinstance(annotation, type)
            and issubclass(annotation, BaseModel)
        ):
            _check_keys(value, annotation, where, f"{path}.")


def _parse_value(text: str) -> Any:
    """A --set value is a TOML value (numbers, booleans, lists); anything else is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    if "=" not in assignment:
        raise UserError(f"--set {assignment!r}: expected KEY=VALUE", "e.g. --set train.lr=0.01")
    key, _, text = assignment.partition("=")
    parts = key.strip().split(".")
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise UserError(f"--set {key}: '{part}' is a value, not a section")
    node[parts[-1]] = _parse_value(text.strip())


def _validation_message(error: ValidationError, where: str) -> UserError:
    first = error.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    got = first.get("input")
    got_text = f" (got {got!r})" if got is not None and not isinstance(got, dict) else ""
    return UserError(f"{where}: {loc}: {msg}{got_text}" if loc else f"{where}: {msg}")


def build_experiment(raw: dict[str, Any], where: str = "config") -> Experiment:
    _check_keys(raw, Experiment, where)
    try:
        return Experiment.model_validate(raw)
    except ValidationError as e:
        raise _validation_message(e, where) from None


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: no such experiment file", "give the path of a TOML file")
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{p}: malformed TOML: {e}") from None
    except UnicodeDecodeError:
        raise UserError(f"{p}: not a text file") from None


def load_experiment(path: str | Path | None, overrides: list[str] | None = None) -> Experiment:
    """defaults < TOML file < --set overrides, validated in one place."""
    raw = read_toml(path) if path is not None else {}
    where = str(path) if path is not None else "config"
    for assignment in overrides or []:
        apply_override(raw, assignment)
    exp = build_experiment(raw, where + (" with --set" if overrides else ""))
    if exp.run.name is None and path is not None:
        exp.run.name = Path(path).stem
    return exp


def to_toml(exp: Experiment) -> str:
    import tomli_w

    # TOML has no null: unset optional keys are left out (they take their defaults).
    def drop_none(d: dict[str, Any]) -> dict[str, Any]:
        return {
            k: drop_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None
        }

    return tomli_w.dumps(drop_none(exp.to_dict()))


def describe(model: type[BaseModel] = Experiment, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, help) for every field, for `dlperf config keys`."""
    rows: list[tuple[str, str]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows += describe(annotation, f"{prefix}{name}.")
        else:
            rows.append((f"{prefix}{name}", " ".join((field.description or "").split())))
    return rows
