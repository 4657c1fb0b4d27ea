"""Classify image files with an exported model and the preprocessing saved beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlperf.deploy import runtime
from dlperf.deploy.runtime import run_onnx
from dlperf.errors import UserError


def predict(
    model: Path,
    images: list[Path],
    k: int = 5,
    labels_file: Path | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """The top-k classes of each image: {model, labels, predictions: [{image, top}]}."""
    meta, sess = runtime.open_model(
        model, "classification", "a classifier", "use dlperf detect run", threads
    )
    runtime.check_scores(sess, model, meta.input_shape)
    x = runtime.load_images(images, meta.preprocess)
    try:
        logits = run_onnx(sess, x)
    except Exception as e:  # ORT's own Fail/RuntimeException: a model that loads, then fails
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"ONNX Runtime cannot run {model}: {first}") from None
    labels = runtime.read_labels(labels_file) if labels_file is not None else meta.labels
    classes = logits.shape[-1]
    if labels and len(labels) != classes:
        source = labels_file or f"{model}'s metadata"
        raise UserError(f"{source} has {len(labels)} labels; the model has {classes} classes")
    top = runtime.topk(logits, k, labels, bool(meta.probabilities))
    result: dict[str, Any] = {
        "model": str(model),
        "labels": "file" if labels_file else ("metadata" if labels else "indices"),
        "predictions": [
            {"image": str(path), "top": row} for path, row in zip(images, top, strict=True)
        ],
    }
    if meta.probabilities:
        result["note"] = f"{runtime.PROBABILITIES}: shown as they are"
    return result
