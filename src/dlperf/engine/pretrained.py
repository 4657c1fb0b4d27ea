"""A run's starting weights (`model.weights`) and the data settings they were trained with.

`model.weights` is one of
- a torchvision weights name of `model.name` (IMAGENET1K_V1, DEFAULT ...): fetched once by
  torch.hub into its cache (`$TORCH_HOME/hub/checkpoints`); resolution, mean and std from the
  weights' own transforms;
- `run:ID`, or `run:last:NAME` (the newest finished run of that name): a stored run's last
  checkpoint, its non-persistent buffers too (`Pretrained.buffers`); resolution and statistics
  of the data that run trained on;
- a path to a state-dict file: a bare state dict, or one under "model" or "state_dict"
  (made absolute by the config, and hashed into its config hash: `weights_digest`).
Every file is read with torch's weights-only unpickler. Resolving reads only metadata; the
weights themselves are read (or downloaded) by `Pretrained.fetch`.
"""

from __future__ import annotations

import os
import re
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dlperf.config import DataConfig, ModelConfig
from dlperf.config.experiment import weights_file, weights_run_id
from dlperf.data import ImageData
from dlperf.engine import checkpoint
from dlperf.engine.stored import StoredRuns
from dlperf.errors import UserError
from dlperf.formatting import few
from dlperf.parsing import did_you_mean
from dlperf.paths import not_regular, told

StateDict = Mapping[str, torch.Tensor]
FORMS = "a torchvision weights name, run:ID, run:last:NAME or a state-dict file"
SAVE = "save the weights with torch.save(model.state_dict(), path)"


@dataclass(frozen=True)
class Pretrained:
    """Where weights come from, and the images they expect (None: not known)."""

    source: str  # as messages name it
    fetch: Callable[[], StateDict]
    image_size: int | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    # The model's non-persistent buffers as the weights' run left them (checkpoint.BUFFERS),
    # filled in by `fetch`: a run's weights were fit to scores its buffers shaped (a count of
    # training steps), so its model starts from both. Other sources keep none: left empty.
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    # The names of the head's classes, in its order, where known (a run's): a kept head is
    # held to the data's. A finished run's summary names them; a stopped run's checkpoint,
    # or one given as a file, read by `fetch`, fills them in.
    classes: list[str] = field(default_factory=list)
    # The run `run:` weights resolved to as they were read: what the run trained from them
    # records (`run:last:NAME` may name a newer run a moment later).
    run_id: int | None = None


def resolve(cfg: ModelConfig, store: StoredRuns) -> Pretrained | None:
    spec = cfg.weights
    if spec is None:
        return None
    if spec.startswith("run:"):
        return _from_run(spec, store)
    if weights_file(spec) is None:
        return _from_torchvision(cfg.name, spec)
    return _from_file(spec)


# --- the three sources ------------------------------------------------------------------


def _from_torchvision(model: str, name: str) -> Pretrained:
    import torchvision

    if model not in torchvision.models.list_models(module=torchvision.models):
        raise UserError(
            f"model.weights {name!r}: {model} is not a torchvision model, and no file {name} "
            "exists",
            f"give {FORMS}",
        )
    enum = torchvision.models.get_model_weights(model)
    if name not in enum.__members__:
        hint = did_you_mean(name, enum.__members__, f"{model} has {', '.join(enum.__members__)}")
        raise UserError(f"unknown weights {name!r} for {model}", hint)
    weights = enum[name]
    expects = weights.transforms()
    source = f"{model} {weights.name}"
    return Pretrained(
        source,
        lambda: _download(weights.url, source),
        expects.crop_size[0],
        tuple(expects.mean),
        tuple(expects.std),
    )


def _download(url: str, source: str) -> StateDict:
    """The weights at `url`, from torch.hub's cache, downloaded into it first if need be."""
    cache = Path(torch.hub.get_dir()) / "checkpoints" / Path(url).name
    if not cache.is_file():
        _usable(cache.parent, source)  # made, and written to
        digest = torch.hub.HASH_REGEX.search(cache.name)  # torchvision's names carry one
        try:
            torch.hub.download_url_to_file(
                url, str(cache), digest.group(1) if digest else None, progress=False
            )
        except (OSError, RuntimeError) as e:  # URLError is an OSError; a bad hash a RuntimeError
            reason = str(getattr(e, "reason", e)).splitlines()[0]
            raise UserError(
                f"model.weights {source} could not be downloaded from {url} ({reason})",
                f"offline: copy the file to {cache}, or give model.weights = a state-dict file",
            ) from None
    try:
        return torch.load(cache, map_location="cpu", weights_only=True)  # type: ignore[no-any-return]
    except Exception as e:  # a file truncated or replaced in the cache
        raise UserError(
            f"cannot load the cached weights {cache} ({type(e).__name__})",
            "delete it to download it again",
        ) from None


def _usable(folder: Path, source: str) -> None:
    """`folder`, torch.hub's cache, made and written to before a download into it: one that
    cannot be (TORCH_HOME naming a file, or a folder not ours) was told as a failed download
    with a fix to copy the file into it, which could not work either."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        if not told(e)[1]:  # a full disk, an I/O error: the system's, told as such
            raise
        home = os.environ.get("TORCH_HOME")
        fix = "point TORCH_HOME at" if home else "set TORCH_HOME to"
        fix += " a folder you can write, or give model.weights = a state-dict file"
        if home and os.path.exists(home) and not os.path.isdir(home):
            raise UserError(f"TORCH_HOME {home} is not a directory", fix) from None
        # The folder above it that failed, if one did (not a temporary file's name in it).
        above = e.filename is not None and folder.is_relative_to(e.filename)
        where = f" {e.filename}" if above and str(folder) != e.filename else ""
        by = f" (TORCH_HOME={home})" if home else ""
        raise UserError(
            f"model.weights {source} cannot be cached in {folder}{by}:{where} {e.strerror}", fix
        ) from None


def _run_id(spec: str, store: StoredRuns) -> int:
    # One resolution with what a run records of them, and a sweep checks (weights_run_id).
    found = weights_run_id(spec, store)
    if found is not None:
        return found
    rest = spec.removeprefix("run:")
    name = rest.removeprefix("last:")
    if rest.startswith("last:") and name:
        raise UserError(f"model.weights {spec}: no finished run named {name!r}", "see dlperf runs")
    raise UserError(f"model.weights {spec!r}: expected run:ID or run:last:NAME")


def _from_run(spec: str, store: StoredRuns) -> Pretrained:
    run_id = _run_id(spec, store)
    stored = store.get_run(run_id)
    checkpoint.check_trained(store, stored, "to start from")
    data = stored.config.get("data", {})
    seen = stored.trained.data or {}
    buffers: dict[str, torch.Tensor] = {}
    classes: list[str] = list(seen.get("class_names") or [])

    def fetch() -> StateDict:
        path = checkpoint.run_checkpoint(
            store, run_id, "to start from", "train it with run.checkpoint = true"
        )
        owner = checkpoint.Owner(store.id, run_id, stored.config_hash)
        saved = checkpoint.load(path, owner)
        buffers.update(saved.get(checkpoint.BUFFERS) or {})  # none in an older checkpoint
        classes[:] = saved.get("classes") or classes  # none in an older one either
        return saved["model"]  # type: ignore[no-any-return]

    side = data.get("image_size") or (seen.get("shape") or [None])[-1]
    mean, std = data.get("mean") or seen.get("mean"), data.get("std") or seen.get("std")
    return Pretrained(
        f"run {run_id}",
        fetch,
        side,
        tuple(mean) if mean else None,
        tuple(std) if std else None,
        buffers,
        classes,
        run_id,
    )


def _from_file(spec: str) -> Pretrained:
    path = Path(spec)
    kind = not_regular(path)  # stat'ed, never opened: a FIFO would block torch.load for ever
    if kind is not None and kind != "a directory":
        raise UserError(f"model.weights {spec} is not a regular file ({kind})", f"give {FORMS}")
    if not path.is_file():
        what = "is a directory" if kind else "no such file"
        raise UserError(f"model.weights {spec}: {what}", f"give {FORMS}")
    classes: list[str] = []

    def fetch() -> StateDict:
        try:
            # torch warns of a sparse tensor as it loads it: load_weights refuses it in one line
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Validating sparse tensor invariants")
                state: Any = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # garbage, a truncated zip, a pickle of other objects
            raise _unloadable(path, e) from None
        named = state.get("classes") if isinstance(state, dict) else None
        if isinstance(named, list) and all(isinstance(c, str) for c in named):
            classes[:] = named  # a dlperf run's checkpoint names its head's classes
        for key in ("model", "state_dict"):
            if isinstance(state, dict) and isinstance(state.get(key), dict):
                state = state[key]
        if not isinstance(state, dict) or not all(
            isinstance(v, torch.Tensor) for v in state.values()
        ):
            raise UserError(f"model.weights {path} holds no state dict of tensors", SAVE)
        return state

    return Pretrained(str(path), fetch, classes=classes)


def _unloadable(path: Path, e: Exception) -> UserError:
    """What the file at `path`, which torch's weights-only loader refused (`e`), holds
    instead of a state dict, and how to save one: read without unpickling anything."""
    subject = f"model.weights {path}"
    try:
        with path.open("rb") as f:
            head = f.read(512)
    except OSError as unread:  # what refused torch.load too (no permission to read it)
        return UserError(f"{subject} cannot be read: {unread.strerror}", "give a readable file")
    if not head:
        return UserError(f"{subject} is empty (0 bytes)", SAVE)
    if all(byte >= 32 or byte in b"\t\n\r" for byte in head):  # a pickle or zip starts below
        return UserError(f"{subject} is text, not a state-dict file", SAVE)
    names = _zip_names(path)
    if any(name.endswith("/constants.pkl") for name in names):  # torch's own test of one
        return UserError(
            f"{subject} is a TorchScript archive, not a state dict",
            "save its state dict: torch.save(torch.jit.load(path).state_dict(), new_path)",
        )
    try:  # the classes its pickle names, read as opcodes: none of its code runs
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) if names else []
    except Exception:  # a zip torch.save did not write, truncated: told as such below
        unsafe = []
    # The loader names the first class it refuses: the top object's (`torch.save(model)`)
    first = re.search(r"GLOBAL ([\w.]+)", str(e))
    top = first.group(1) if first else unsafe[0] if unsafe else ""
    if any(name.startswith("torch.nn.modules.") for name in unsafe):
        return UserError(
            f"{subject} holds a pickled nn.Module ({top.rpartition('.')[2]}), not a state dict",
            "save model.state_dict() instead: torch.save(model.state_dict(), path)",
        )
    if unsafe:
        return UserError(
            f"{subject} holds objects torch's weights-only loader does not read "
            f"({few(sorted(unsafe))})",
            f"{SAVE}, without other objects",
        )
    return UserError(
        f"{subject} is not a state-dict file torch.save wrote, or is damaged ({type(e).__name__})",
        SAVE,
    )


def _zip_names(path: Path) -> list[str]:
    """The names in the zip archive at `path` (torch.save's format); none where it is none."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return []


# --- the data the weights expect --------------------------------------------------------


def data_config(cfg: DataConfig, start: Pretrained | None) -> DataConfig:
    """`cfg` with the weights' resolution where data.image_size is unset."""
    if start is None or cfg.image_size is not None or start.image_size is None:
        return cfg
    return cfg.model_copy(update={"image_size": start.image_size})


def _per_channel(values: tuple[float, ...], channels: int) -> tuple[float, ...]:
    """Statistics of `values`' images for `channels` channels: their mean on a grey image."""
    if len(values) == channels:
        return values
    return (sum(values) / len(values),) * channels


def apply_statistics(data: ImageData, cfg: DataConfig, start: Pretrained | None) -> list[str]:
    """Normalise `data` as the weights' training data was (where data.mean/std are unset);
    warnings about images much smaller than the weights expect."""
    if start is None:
        return []
    channels = data.shape[0]
    if start.mean is not None and cfg.mean is None:
        data.mean = _per_channel(start.mean, channels)
    if start.std is not None and cfg.std is None:
        data.std = _per_channel(start.std, channels)
    side, expected = data.shape[-1], start.image_size
    if expected is None or side * 2 > expected:
        return []
    return [
        f"{data.name} images are {side}x{side} but {start.source} was trained at "
        f"{expected}x{expected}: features at under half their resolution transfer poorly "
        "(32x32 into an ImageNet network is a classic way to get chance accuracy); "
        f"set data.image_size = {expected}"
    ]
