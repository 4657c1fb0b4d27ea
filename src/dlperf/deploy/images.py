"""The images of `POST /predict`: the upload out of the request, decoded and preprocessed as
at export, and a detector's boxes scaled back to the uploaded image's pixels.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from fastapi import Request
from starlette.datastructures import UploadFile

from dlperf.deploy import meta as meta_io
from dlperf.deploy import runtime
from dlperf.errors import UserError

# Each decode may hold a whole image of up to max_pixels: a few at a time bound the memory.
DECODE_THREADS = min(4, os.cpu_count() or 1)


async def image_bytes(request: Request) -> bytes:
    """The one uploaded file of a multipart form (any field name), or the raw body. A form of
    several files is refused: /predict answers one image, and answering one of them (Starlette's
    last `file`, or the first file) gave the client an answer it took for the other's."""
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        async with request.form() as form:
            files = [value for _, value in form.multi_items() if isinstance(value, UploadFile)]
            if not files:
                raise UserError("the multipart form has no file; send the image as field 'file'")
            # An empty part without a name is a browser form's file input left unfilled.
            sent = [upload for upload in files if upload.size or upload.filename]
            if len(sent) > 1:
                raise UserError(
                    f"the upload has {len(sent)} files; /predict takes one image per request",
                    f"send each in a request of its own, or a batch of preprocessed tensors to "
                    f"/v2/models/{_model_name(request)}/infer",
                )
            data = await (sent or files)[0].read()
    else:
        data = await request.body()
    if not data:
        raise UserError("no image in the request; send it as the body or a 'file' upload")
    return data


def _model_name(request: Request) -> str:
    """The served model's name, as the server keeps it on its app (`create_app`)."""
    model = getattr(request.app.state, "model", None)
    return str(getattr(model, "name", "NAME"))


def image_array(
    data: bytes, model: meta_io.ModelMeta, max_pixels: int
) -> tuple[np.ndarray, tuple[int, int]]:
    """The upload as the model's input, and its (width, height). A detector's image is
    stretched to the input, as fine-tuning and `detect eval` hand it to the detector
    (`detections` undoes that stretch); a classifier's is covered and centre-cropped."""
    image = runtime.decode(data, "the uploaded file", max_pixels=max_pixels)
    stretch = model.task == "detection"
    x = runtime.to_array(image, model.preprocess, "the uploaded file", stretch=stretch)
    return x, image.size


def detections(
    outputs: dict[str, np.ndarray],
    meta: meta_io.ModelMeta,
    image_size: tuple[int, int],
    threshold: float,
) -> list[dict[str, Any]]:
    """Boxes over the threshold, from model-input pixels back to the uploaded image's: x
    scaled by width / input width, y by height / input height, the exact inverse of the
    stretch `image_array` gives a detector's upload."""
    (in_h, in_w), (width, height), labels = meta.preprocess.size, image_size, meta.labels
    scale = np.array([width / in_w, height / in_h, width / in_w, height / in_h])
    limit = np.array([width, height, width, height])
    boxes = np.clip(outputs["boxes"].reshape(-1, 4) * scale, 0, limit)
    found = []
    for box, score, label in zip(boxes, outputs["scores"], outputs["labels"], strict=True):
        if score >= threshold:
            index = int(label)
            found.append(
                {
                    "box": [round(float(v), 2) for v in box],
                    "score": float(score),
                    "index": index,
                    "label": labels[index] if 0 <= index < len(labels) else str(index),
                }
            )
    return found
