"""Checkpoints: everything needed to continue a run exactly where it stopped, and whose it is.

Every checkpoint carries its owner (store id, run id, config hash), and `load` refuses any
file that is not a checkpoint of the run asking for it: truncated, foreign, a bare
state_dict, or another run's or another store's. Loading uses torch's weights-only
unpickler, which builds nothing but tensors and plain containers; the RNG states are kept in
those types (NumPy's key as a tensor), so no allowlist of globals is needed.
"""

from __future__ import annotations

import io
import pickle
import random
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dlperf.engine.stored import StoredRun, StoredRuns
from dlperf.errors import UserError
from dlperf.models.transfer import load_state
from dlperf.parsing import is_file_spec
from dlperf.paths import atomic_write

OWNER = "owner"
# Logged as each epoch ends, just before its checkpoint is saved and in the same shielded
# block (engine.loop.EpochReport): a recorded checkpoint that is not there was never written
# if no epoch ended.
EPOCH_ENDED = "epoch/train_loss"
# The model's non-persistent buffers (register_buffer(..., persistent=False)), which its
# state_dict leaves out: kept beside "model", not in it, so that exports and
# `model.weights = run:ID` still read a plain state dict. A forward may read one that
# training changes (a count of steps), and a resume that started it afresh was not exact.
BUFFERS = "non_persistent_buffers"


@dataclass(frozen=True)
class Owner:
    """The run a checkpoint belongs to."""

    store_id: str
    run_id: int
    config_hash: str | None


@dataclass(frozen=True)
class Slot:
    """Where a run's checkpoints go and whose they are, so every checkpoint written is stamped.
    `on_saved(path)` is called once each save is on disk (a new run records its checkpoint
    then: one recorded as the run started was never written if the run failed first).
    `same_file`: resuming, the run's model file is the one it was trained from (its stored
    sha256, experiment.run.model_file_kept), as `fit_weights` is told when loading into it."""

    path: Path
    owner: Owner
    on_saved: Callable[[Path], None] | None = field(default=None, compare=False)
    same_file: bool = field(default=False, compare=False)


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every generator a run draws from; of the GPUs only the run's `device`, so that a run
    resumes where fewer GPUs are visible, or on another one."""
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        # A tensor rather than a NumPy array, which the weights-only unpickler refuses.
        "numpy": (kind, torch.from_numpy(np.asarray(key, dtype=np.int64)), pos, has_gauss, gauss),
        "python": random.getstate(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    kind, key, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, key.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    cuda = state.get("cuda")
    if cuda is None or device.type != "cuda":
        return
    if isinstance(cuda, list):  # written before 2026-11-24: one state per visible GPU
        index = device.index or 0
        if index >= len(cuda):
            return
        cuda = cuda[index]
    torch.cuda.set_rng_state(cuda, device)


def unsaved_buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """`model`'s non-persistent buffers by their state_dict names (what `BUFFERS` keeps), each
    a plain tensor for the weights-only loader. Read off each module's own set of them rather
    than as the buffers its state_dict lacks: an override of state_dict() that renames keys
    would make every buffer look unsaved."""
    return {
        f"{prefix}.{name}" if prefix else name: buffer.detach()
        for prefix, module in model.named_modules()
        for name, buffer in module.named_buffers(recurse=False)
        if name in module._non_persistent_buffers_set
    }


def model_state(model: torch.nn.Module) -> dict[str, Any]:
    """A checkpoint's model part: the plain state dict under "model", which exports and
    `model.weights = run:ID` read, and the non-persistent buffers beside it (`BUFFERS`)."""
    return {"model": model.state_dict(), BUFFERS: unsaved_buffers(model)}


def restore_buffers(model: torch.nn.Module, saved: Mapping[str, Any] | None) -> None:
    """Put back into `model` the non-persistent buffers a checkpoint kept (`unsaved_buffers`);
    None (a checkpoint from before they were kept) changes nothing, as resumes did then. Each
    is copied into the model's own tensor, which keeps its device and whatever else holds it;
    one whose shape or dtype training changed (a queue grown by concatenation) replaces it,
    on the model's device. A name the model no longer has is left: its code changed, and
    the parameters, which fit_weights checked, still fit."""
    if not saved:
        return
    modules = dict(model.named_modules())
    with torch.no_grad():
        for key, value in saved.items():
            prefix, _, name = key.rpartition(".")
            module = modules.get(prefix)
            current = None if module is None else module._buffers.get(name)
            if module is None or current is None or not isinstance(value, torch.Tensor):
                continue
            if current.shape == value.shape and current.dtype == value.dtype:
                current.copy_(value)
            else:
                module._buffers[name] = value.to(current.device)


def save(slot: Slot, state: dict[str, Any]) -> None:
    """Write `state` stamped with its owner, atomically (`save_atomically`)."""
    check_loadable(state.get("model"))
    save_atomically({OWNER: asdict(slot.owner), **state}, slot.path)
    if slot.on_saved is not None:
        slot.on_saved(slot.path)


def save_atomically(obj: Any, path: Path) -> None:
    """torch.save `obj` to `path` by rename: a crash, a file-size limit or a full disk
    mid-save leaves the earlier file at `path` whole and no partial file behind. Serialised
    in memory first: torch.save's zip writer, writing straight onto `path`, turned a full disk
    into a RuntimeError ("unexpected pos"); a plain write reports it as the OSError it is
    (ENOSPC, EFBIG), naming `path`, as the one-line error should."""
    buffer = io.BytesIO()
    refused: MemoryError | None = None
    try:
        torch.save(obj, buffer)
    except RuntimeError as e:
        # The buffer's growth refused (ulimit -v reached at the checkpoint): torch's zip
        # writer, closing, raised its own "unexpected pos" over the MemoryError, which the
        # CLI then told as a traceback, not as the out-of-memory line it is
        if not isinstance(e.__context__, MemoryError):
            raise
        refused = e.__context__
    if refused is not None:  # raised here, outside the handler: no cycle of contexts
        raise refused
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_write(path, buffer.getbuffer().tobytes(), fsync=True)
    except OSError as e:  # a failed write names no file
        raise OSError(e.errno, e.strerror, e.filename or str(path)) from None


# torch's weights-only unpickler names the global it refuses: "Unsupported global: GLOBAL
# numpy._core.multiarray._reconstruct was not an allowed global ...".
_REFUSED_GLOBAL = re.compile(r"Unsupported global: GLOBAL (\S+)")
# The globals a NumPy value is pickled through, as the value a user put in the state.
_NUMPY_GLOBALS = {
    "_reconstruct": "numpy.ndarray",
    "scalar": "a NumPy scalar",
    "dtype": "numpy.dtype",
}
KEEP_TENSORS = "keep model state to tensors (e.g. torch.tensor(...))"


def _refused_global(e: Exception) -> str | None:
    """The value torch's weights-only loader refused, if `e` is that refusal (named as the
    user knows it: numpy.ndarray rather than the function that rebuilds one); None for any
    other failure (a truncated or garbled file)."""
    if not isinstance(e, pickle.UnpicklingError):
        return None
    found = _REFUSED_GLOBAL.search(str(e))
    if found is None:
        return None
    name = found.group(1)
    module, _, leaf = name.rpartition(".")
    if module.split(".")[0] == "numpy" and leaf in _NUMPY_GLOBALS:
        return _NUMPY_GLOBALS[leaf]
    return name


def check_loadable(model_state: object, hint: str | None = None) -> None:
    """Refuse to write a checkpoint that `load` could never read: a model's state_dict entry
    that is not a tensor (a module's extra state, get_extra_state) holding a value torch's
    weights-only loader refuses (a NumPy array, an object of the model's own class). Only
    those entries are round-tripped, so the check costs nothing for a model of tensors.
    Made at each save, and before training by checks.check_checkpointable (`hint` its
    way out)."""
    if not isinstance(model_state, Mapping):
        return
    for key, value in model_state.items():
        if isinstance(value, torch.Tensor):
            continue
        buffer = io.BytesIO()
        torch.save(value, buffer)
        buffer.seek(0)
        try:
            torch.load(buffer, map_location="cpu", weights_only=True)
        except Exception as e:
            refused = _refused_global(e)
            if refused is None:  # not the loader's refusal: left to the save itself
                continue
            raise UserError(
                f"the model's state {key!r} holds a value torch's safe loader refuses "
                f"({refused}), so its checkpoint could never be loaded (--resume, export, "
                f"model.weights): {KEEP_TENSORS}",
                hint,
            ) from None


# The kinds of run other than a training run ("run"), which keep no classifier: what each is.
OTHER_KINDS = {
    "select": "distill's selection",
    "calibrate": "dlperf calibrate's measurement of this machine",
    "predict": "dlperf predict's measurement of a model",
    "staleness": "a training of dlperf staleness, which keeps no weights",
    "scale": "a point of dlperf scale, which keeps no weights",
    "allreduce": "dlperf scale allreduce's measurement",
}


def check_trained(store: StoredRuns, run: StoredRun, purpose: str) -> None:
    """Refuse a run that is not a training run, whose stored config and files are not a
    classifier's (`purpose`: "to export", "to start from"), in one line saying what it is;
    a detect run's names the command that exports its detector."""
    if run.kind == "run":
        return
    if not run.kind:  # the API's create_run takes any kind, an empty one too
        raise UserError(f"run {run.id} is a run of no kind: it has no model {purpose}")
    said = f"run {run.id} is {'an' if run.kind[0] in 'aeiou' else 'a'} {run.kind} run"
    if run.kind == "detect":
        files = [a["path"] for a in store.artifacts(run.id) if a["kind"] == "checkpoint"]
        weights = files[-1] if files else run.config.get("weights") or "PATH"
        model = run.config.get("model", {}).get("name", "NAME")
        raise UserError(
            f"{said}: it holds a detector, no classifier {purpose}",
            f"export it with dlperf detect export --model {model} --weights {weights} "
            "--out FILE.onnx",
        )
    what = OTHER_KINDS.get(run.kind)
    raise UserError(f"{said}{f' ({what})' if what else ''}: it has no model {purpose}")


def run_checkpoint(store: StoredRuns, run_id: int, purpose: str, hint: str) -> Path:
    """The last checkpoint file recorded for a run, checked without opening it (opening a
    FIFO waits for a writer). Each failure is one line of bad input: a run that recorded
    none, or stopped before its first was written (a dlperf before issue 41's seventh round
    recorded the path as the run started), is "run N has no checkpoint `purpose`" and the
    caller's `hint`; one written and gone since, or that is not a regular file now, says so
    instead."""
    paths = [Path(a["path"]) for a in store.artifacts(run_id) if a["kind"] == "checkpoint"]
    if not paths and _saved_at_epoch_end(store, run_id):
        # An epoch ended (its rows are stored) and the process died before its checkpoint
        # was on disk: SIGKILL, or a dlperf before break-it round 10, which said the epoch's
        # line before saving and let a stop signal cut the save.
        raise UserError(
            f"run {run_id} has no checkpoint {purpose}: its first epoch ended but its "
            "checkpoint was not written",
            "start it again",
        )
    if not paths:
        raise UserError(f"run {run_id} has no checkpoint {purpose}", hint)
    path = paths[-1]
    again = "put the run's checkpoint back, or train the run again"
    try:
        mode = path.stat().st_mode  # through a link: one to /dev/zero is a device
    except FileNotFoundError:
        if not _saved_at_epoch_end(store, run_id):
            raise UserError(f"run {run_id} has no checkpoint {purpose}", hint) from None
        raise UserError(f"run {run_id}'s checkpoint {path} is missing", again) from None
    except OSError as e:  # a link loop, a directory that cannot be searched
        raise UserError(f"cannot read run {run_id}'s checkpoint {path}: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        raise UserError(f"run {run_id}'s checkpoint {path} is not a regular file", again)
    return path


def _saved_at_epoch_end(store: StoredRuns, run_id: int) -> bool:
    """Whether the run saved checkpoints (run.checkpoint) and an epoch of it ended, so that
    one was written. A sweep deletes the final weights of its points without run.checkpoint:
    those have none, as their callers' hints say."""
    run = store.get_run(run_id).config.get("run", {})
    return bool(run.get("checkpoint")) and store.last_step(run_id, EPOCH_ENDED) is not None


def load(path: Path, owner: Owner) -> dict[str, Any]:
    """The checkpoint at `path`, if it is `owner`'s; anything else is one line of bad input."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # garbage, a truncated or foreign zip, a pickle of other objects
        refused = _refused_global(e)
        if refused is not None:  # whole, but holding what the weights-only loader refuses
            # a run's model state (its extra state or a buffer), or a file dlperf did not
            # write as it writes them now: which, the loader cannot say without running it
            raise UserError(
                f"checkpoint {path} holds a value torch's safe loader refuses ({refused}): "
                f"where a model's extra state or buffer holds it, {KEEP_TENSORS}",
                "an older dlperf's checkpoint, which names no run, is refused too",
            ) from None
        raise UserError(
            f"cannot load checkpoint {path}: truncated or not written by dlperf "
            f"({type(e).__name__})",
            "an older dlperf's checkpoint, which names no run, is refused too",
        ) from None
    found = state.get(OWNER) if isinstance(state, dict) else None
    if not isinstance(found, dict) or "model" not in state:
        raise UserError(f"{path} is not a dlperf run checkpoint: it names no run")
    if found != asdict(owner):
        raise UserError(
            f"{path} is the checkpoint of {_describe(found)}, not of {_describe(asdict(owner))}"
        )
    return state  # type: ignore[no-any-return]


def _describe(owner: dict[str, Any]) -> str:
    return (
        f"run {owner.get('run_id')} in store {owner.get('store_id')} "
        f"(config {owner.get('config_hash')})"
    )


# How `_mismatches` says an entry of the checkpoint the model lacks.
NOT_IN_MODEL = " is not in the model"


def fit_weights(
    model: torch.nn.Module,
    weights: Mapping[str, Any],
    run_id: int,
    name: str,
    classes: int | None = None,
    same_file: bool = False,
) -> None:
    """Load run `run_id`'s `weights` into `model`, built from model `name` as its code is now
    (its head for `classes`, the data's class count, where the caller knows it). Code that
    changed since the run (a model file edited, a layer's width) is one line of bad input
    naming the first parameters that differ; load_state_dict's own error is a traceback
    listing every one. Where every difference is the class count, the data changed instead
    (an image folder gained or lost a class), and the line says so. Weights with the keys
    and shapes of the model's state_dict() that its load_state_dict() refuses are the
    model's two methods disagreeing: one line too. `same_file`: the caller found the model
    file's source to be the one the run was trained from (its sha256, stored with the run):
    the code did not change, and its factory builds another network on each call (or a
    module it imports changed), which restoring the file cannot fix."""
    expected = model.state_dict()
    trained_on = _trained_classes(expected, weights, classes)
    if trained_on is not None:
        raise UserError(
            f"run {run_id}'s checkpoint does not fit its data: the data now has {classes} "
            f"classes, the run was trained on {trained_on}",
            "restore the data the run was trained with, or train it again",
        )
    found = _mismatches(expected, weights)
    if is_file_spec(name):
        what, hint = f"model file {name}", "restore the file the run was trained with"
    else:
        what, hint = f"model '{name}'", "use the dlperf the run was trained with"
    if found:
        shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
        if same_file and is_file_spec(name) and all(f.endswith(NOT_IN_MODEL) for f in found):
            # The checkpoint holds more and lacks nothing: as a forward that made layers as it
            # ran left it (a run trained before the dry checks refused one), or a factory
            # deeper on some calls. Which, nothing here can tell: both are said.
            raise UserError(
                f"run {run_id}'s checkpoint does not fit {what}, though the file is the one "
                f"the run was trained with (its sha256 is the stored one): {shown}; its forward "
                "adds them as it runs (a layer made in forward after its first call), or its "
                "factory builds a different network on each call (nondeterministic: a size "
                "drawn at random or read from the environment, the clock or the process id), "
                "or a module it imports changed",
                "create every layer in __init__, or make the factory build the same network on "
                "every call (pass such a size in [model] kwargs), or restore the modules it "
                "imports; then train it again",
            )
        if same_file and is_file_spec(name):
            raise UserError(
                f"run {run_id}'s checkpoint does not fit {what}, though the file is the one "
                f"the run was trained with (its sha256 is the stored one): {shown}; its factory "
                "builds a different network on each call (nondeterministic: a size drawn at "
                "random or read from the environment, the clock or the process id), or a "
                "module it imports changed",
                "make the factory build the same network on every call (pass such a size in "
                "[model] kwargs), or restore the modules it imports; or train it again",
            )
        raise UserError(
            f"run {run_id}'s checkpoint does not fit {what} as it is now: {shown}",
            f"{hint}, or train it again",
        )
    load_state(model, weights, f"run {run_id}'s weights do not load into {what} as built")


def _trained_classes(
    expected: Mapping[str, Any], weights: Mapping[str, Any], classes: int | None
) -> int | None:
    """The class count the `weights` were trained for, where they differ from the `expected`
    state_dict (a model built for `classes`) only in that count: the same entries, and every
    size that differs is `classes` in the model and one other count in the checkpoint (a
    head's weight and bias, or a layer sized by the classes twice). None otherwise: a width
    changed in the code is the model's change, even where the classes changed too."""
    if classes is None or expected.keys() != weights.keys():
        return None
    trained: set[int] = set()
    for key, value in expected.items():
        given = weights[key]
        if not isinstance(value, torch.Tensor) or not isinstance(given, torch.Tensor):
            continue
        if torch.nn.parameter.is_lazy(value) or given.shape == value.shape:
            continue
        if given.dim() != value.dim():
            return None
        for now, then in zip(value.shape, given.shape, strict=True):
            if now != then:
                if now != classes:
                    return None
                trained.add(then)
    return trained.pop() if len(trained) == 1 else None


def _mismatches(expected: Mapping[str, Any], weights: Mapping[str, Any]) -> list[str]:
    """How `weights` differ from the `expected` state_dict, in the model's order: shapes,
    then entries one has and the other lacks."""
    found = [
        f"{key} is {list(given.shape)} in the checkpoint, {list(value.shape)} in the model"
        for key, value in expected.items()
        # A lazy module's parameter has no shape until a forward pass: load_state_dict sizes it.
        if isinstance(value, torch.Tensor)
        and not torch.nn.parameter.is_lazy(value)
        and isinstance(given := weights.get(key), torch.Tensor)
        and given.shape != value.shape
    ]
    found += [f"{key} is not in the checkpoint" for key in expected if key not in weights]
    found += [f"{key}{NOT_IN_MODEL}" for key in weights if key not in expected]
    return found
