"""What an exported model needs besides its graph: task, input, preprocessing, labels.

One JSON document, written twice so that neither copy can be lost on its own: inside the
ONNX file (`metadata_props["dlperf"]`, travels with the model) and beside it
(`model.onnx.json`, readable without onnx). Readers take the embedded copy first.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from dlperf.config import validation_message
from dlperf.errors import UserError
from dlperf.paths import file_digest, not_regular

KEY = "dlperf"


@dataclass
class Preprocess:
    """How an image becomes the model's input, exactly as in training."""

    size: tuple[int, int]  # (height, width) the image is resized to
    channels: int  # 1 = grey (L), 2 = grey and alpha (LA), 3 = RGB, 4 = RGBA; others: no images
    mean: tuple[float, ...]  # per channel, on [0, 1] pixel values
    std: tuple[float, ...]


@dataclass
class ModelMeta:
    task: str  # "classification" | "detection"
    model: str  # registry name
    input_name: str
    input_shape: tuple[int, ...]  # (C, H, W), batch excluded
    preprocess: Preprocess
    labels: list[str] = field(default_factory=list)
    run_id: int | None = None
    opset: int | None = None
    # Of a run's model: how its run stood at export (finished, failed, killed, lost, running)
    # and the epoch its checkpoint holds, so a model of a run that never finished says so.
    run_status: str | None = None
    epoch: int | None = None
    epochs: int | None = None
    # How the network was built, so that `infer bench` rebuilds the same one: the factory's
    # model.kwargs, and a model file's absolute "path.py:factory" (None for a registered
    # model), found whichever directory bench runs in. Both None in metadata written before
    # they were recorded (the kwargs unknown, not empty).
    model_kwargs: dict[str, Any] | None = None
    model_path: str | None = None
    # The SHA-256 of each weights file the graph reads (its name beside the model: the
    # dynamo exporter's MODEL.onnx.data), for `find` to refuse a graph beside another
    # export's weights; None for weights inside the graph, or metadata written before.
    weights_sha256: dict[str, str] | None = None
    # Whether the classifier's scores are probabilities already (a softmax ends its forward
    # in eval mode, as export's dry forward found): infer and /predict rank them as they are
    # then, not softmaxed again. None in metadata written before it was recorded: softmaxed.
    probabilities: bool | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str, source: str) -> ModelMeta:
        try:
            return TypeAdapter(cls).validate_json(text)
        except ValidationError as e:
            raise validation_message(e, f"{source}: unreadable dlperf metadata") from None


def regular_file(path: Path, fix: str) -> None:
    """Refuse a `path` that is there but is neither a regular file nor a directory (a FIFO, a
    device), stat'ed and never opened: opening a FIFO waits for a writer, for ever when there
    is none. A directory and nothing there are left to the caller's "no ... file"."""
    kind = not_regular(path)
    if kind is not None and kind != "a directory":
        raise UserError(f"{path} is not a regular file ({kind})", fix)


def sidecar(model_path: Path) -> Path:
    return model_path.with_name(model_path.name + ".json")


def save(model_path: Path, meta: ModelMeta) -> None:
    """Embed `meta` in the ONNX file and write the sidecar beside it. A write the disk refuses
    names no file: the caller says which (export names its `--out`, not the staged file)."""
    import onnx

    proto = onnx.load(str(model_path), load_external_data=False)
    kept = [p for p in proto.metadata_props if p.key != KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    proto.metadata_props.add(key=KEY, value=meta.to_json())
    onnx.save(proto, str(model_path))
    sidecar(model_path).write_text(meta.to_json() + "\n")


def weights_digests(model_path: Path, proto: Any) -> dict[str, str] | None:
    """The SHA-256 of each external-data file the model `proto` (at `model_path`) names, by
    its name; None where its weights are all inside it."""
    found = {name: file_digest(model_path.parent / name) for name in _weights_files(proto)}
    return {name: digest for name, digest in found.items() if digest is not None} or None


def _weights_files(proto: Any) -> list[str]:
    """The external-data files the model `proto`'s tensors are read from, by name."""
    from onnx.external_data_helper import uses_external_data

    names = {
        entry.value
        for tensor in proto.graph.initializer
        if uses_external_data(tensor)
        for entry in tensor.external_data
        if entry.key == "location"
    }
    return sorted(names)


def _check_weights(model_path: Path, proto: Any, meta: ModelMeta) -> None:
    """Refuse weights beside the model that are not the ones it was exported with. An export
    moves the model and its weights into place one file at a time (no rename moves two): one
    stopped between them, or two exports to one name at once, left one export's graph beside
    another's weights, same names and sizes, and it answered with logits of neither. Only the
    files the graph `proto` reads are checked: a copy saved as one file keeps the metadata's
    digests, and the export's weights beside it are not its own. A file not there is left to
    ONNX Runtime, which names it."""
    digests = meta.weights_sha256 or {}
    for name in _weights_files(proto):
        weights = model_path.parent / name
        found = file_digest(weights) if name in digests else None
        if found is not None and found != digests[name]:
            raise UserError(
                f"{weights} is not the weights of {model_path}: its SHA-256 differs from the "
                "one the model recorded at export (the files come from two exports: one "
                "stopped, or two at once, as it replaced the other)",
                "export the model again",
            )


def load(model_path: Path, weights: bool = True) -> ModelMeta:
    """The metadata of an exported model: embedded copy first, then the sidecar. `weights`:
    its weights files checked (`_check_weights`); a reader of the graph alone, which never
    reads them, skips the SHA-256 pass over them."""
    found = find(model_path, weights)
    if found is None:
        raise UserError(
            f"{model_path} carries no dlperf metadata (task, preprocessing)",
            "export it with `dlperf export`",
        )
    return found


def _missing_hint(model_path: Path) -> str | None:
    """A bare number is most likely a run id: these commands take the file `dlperf export`
    writes of a run, not the run itself."""
    if not str(model_path).isdigit():
        return None
    return (
        f"it takes an ONNX file, not a run id: `dlperf export {model_path} --out m.onnx` "
        f"writes run {model_path}'s"
    )


def find(model_path: Path, weights: bool = True) -> ModelMeta | None:
    """The metadata of an exported model as `load` reads it, or None for an ONNX file
    without any (one that `dlperf export` did not write)."""
    import onnx

    regular_file(model_path, "give an ONNX file (`dlperf export` writes one)")
    if not model_path.is_file():
        raise UserError(f"no model file {model_path}", _missing_hint(model_path))
    try:
        proto = onnx.load(str(model_path), load_external_data=False)
    except Exception as e:  # onnx raises DecodeError and others for a non-ONNX file
        raise UserError(f"{model_path} is not an ONNX model: {type(e).__name__}") from None
    embedded = (p.value for p in proto.metadata_props if p.key == KEY)
    found = next((ModelMeta.from_json(text, str(model_path)) for text in embedded), None)
    if found is None and sidecar(model_path).is_file():
        found = ModelMeta.from_json(sidecar(model_path).read_text(), str(sidecar(model_path)))
    if found is not None and weights:
        _check_weights(model_path, proto, found)
    return found
