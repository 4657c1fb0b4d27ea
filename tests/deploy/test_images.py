"""dlperf.deploy.images on its own: the upload out of a request (a FastAPI app in-process),
an image to the model's input, and detector boxes back to the uploaded image's pixels."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from PIL import Image

from dlperf.deploy import meta, runtime
from dlperf.deploy.images import detections, image_array, image_bytes
from dlperf.errors import UserError
from tests.deploy.test_server import png


class Client:
    """Requests to an ASGI app in-process (httpx's ASGITransport), one event loop each."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
                return await c.post(url, **kwargs)

        return asyncio.run(send())


@pytest.fixture(scope="module")
def client() -> Client:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        data = await image_bytes(request)
        return {"bytes": len(data), "first": data[0]}

    @app.exception_handler(UserError)
    async def bad(request: Request, exc: UserError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, 400)

    return Client(app)


def test_raw_body_and_uploads_give_the_same_bytes(client: Client) -> None:
    data = b"\x89PNG..."
    expected = {"bytes": len(data), "first": data[0]}
    assert client.post("/echo", content=data).json() == expected
    assert client.post("/echo", files={"file": ("a.png", data)}).json() == expected
    # another field name: the first file of the form
    other = {"note": (None, "hello"), "picture": ("a.png", data)}
    assert client.post("/echo", files=other).json() == expected


def test_a_form_of_two_files_is_refused(client: Client) -> None:
    # answering one of them (before round 53: field `file`) answered an image not asked about
    files = [("other", ("o.png", b"O" * 3)), ("file", ("f.png", b"F" * 5))]
    response = client.post("/echo", files=files)
    assert response.status_code == 400
    assert response.json()["error"].startswith("the upload has 2 files; /predict takes one image")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"content": b""}, "no image in the request; send it as the body or a 'file' upload"),
        ({"files": {"note": (None, "text only")}}, "the multipart form has no file"),
        ({"files": {"file": ("e.png", b"")}}, "no image in the request"),
    ],
)
def test_no_image_is_a_one_line_error(client: Client, kwargs: dict[str, Any], message: str) -> None:
    response = client.post("/echo", **kwargs)
    assert response.status_code == 400
    assert response.json()["error"].startswith(message)


def test_image_array_is_the_models_input_and_keeps_the_upload_size() -> None:
    pre = meta.Preprocess((4, 6), 3, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    model = meta.ModelMeta("classification", "c", "input", (3, 4, 6), pre, ["a", "b"])
    x, size = image_array(png(width=16, height=12), model, max_pixels=10_000)
    assert size == (16, 12)  # width, height of the upload
    assert x.shape == (3, 4, 6) and x.dtype == np.float32
    assert x.min() >= 0.0 and x.max() <= 1.0  # mean 0, std 1: pixels on [0, 1]
    with pytest.raises(UserError, match="the uploaded file is 16x12 pixels"):
        image_array(png(width=16, height=12), model, max_pixels=100)


def _left_quarter(width: int, height: int) -> bytes:
    """White in the left quarter, black elsewhere."""
    pixels = np.zeros((height, width, 3), np.uint8)
    pixels[:, : width // 4] = 255
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_a_detector_gets_the_whole_upload_stretched_a_classifier_a_centre_crop() -> None:
    pre = meta.Preprocess((2, 4), 3, (0.0,) * 3, (1.0,) * 3)  # 4 wide, 2 high
    data = _left_quarter(32, 4)  # 8 times wider than high: four times the input's 2
    classifier = meta.ModelMeta("classification", "c", "input", (3, 2, 4), pre, ["a"])
    detector = meta.ModelMeta("detection", "d", "image", (3, 2, 4), pre, ["bg", "a"])
    cropped, _ = image_array(data, classifier, max_pixels=1000)
    whole, _ = image_array(data, detector, max_pixels=1000)
    assert whole.shape == cropped.shape == (3, 2, 4)
    # The classifier sees the middle half, all black; the detector all of it, squeezed:
    # the white quarter is its first column.
    np.testing.assert_allclose(cropped, 0.0, atol=1e-6)
    np.testing.assert_allclose(whole[:, :, 0], 1.0, atol=1e-6)
    np.testing.assert_allclose(whole[:, :, 1:], 0.0, atol=1e-6)
    # Noise, 15 x 4 to 4 x 2: the detector's input is torch's resize of the whole image.
    uneven, _ = image_array(png(width=15, height=4), detector, max_pixels=1000)
    source = np.asarray(Image.open(io.BytesIO(png(width=15, height=4))), np.float32) / 255
    expected = torch_resized(source, (2, 4))
    np.testing.assert_allclose(uneven, expected, atol=1e-6)


def torch_resized(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(H, W, C) on [0, 1] resized as torchvision's detection transform resizes an image to
    its fixed_size (bilinear, align_corners=False): (C, h, w)."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))[None]
    out = torch.nn.functional.interpolate(x, size=list(size), mode="bilinear", align_corners=False)
    return np.asarray(out[0].numpy())


@pytest.mark.parametrize(
    ("shape", "size"),
    [((10, 80, 3), (20, 40)), ((37, 23, 3), (96, 96)), ((7, 9), (4, 13)), ((5, 6, 4), (5, 6))],
)
def test_stretched_is_torchs_bilinear_resize(shape: tuple[int, ...], size: tuple[int, int]) -> None:
    """Up, down, grey, RGBA and the same size: what the detector saw in training."""
    pixels = np.random.default_rng(3).integers(0, 256, shape, dtype=np.uint8)
    got = runtime.stretched(pixels, *size)
    assert got.shape == (*size, *shape[2:]) and got.dtype == np.float32
    planes = pixels[..., None] if pixels.ndim == 2 else pixels
    expected = torch_resized(planes.astype(np.float32) / 255, size).transpose(1, 2, 0)
    np.testing.assert_allclose(got, expected.reshape(got.shape), atol=1e-5)


def test_detections_scale_clip_and_name_the_boxes() -> None:
    pre = meta.Preprocess((20, 40), 3, (0.0,) * 3, (1.0,) * 3)  # model input: h 20, w 40
    model = meta.ModelMeta("detection", "d", "image", (3, 20, 40), pre, ["bg", "circle"])
    outputs = {
        "boxes": np.array([[4, 2, 20, 10], [0, 0, 50, 30], [1, 1, 2, 2]], np.float32),
        "scores": np.array([0.9, 0.5, 0.49], np.float32),
        "labels": np.array([1, 7, 1], np.int64),
    }
    # The upload was 80 wide and 10 high: x scales by 2, y by 0.5.
    found = detections(outputs, model, (80, 10), threshold=0.5)
    assert found == [
        {"box": [8.0, 1.0, 40.0, 5.0], "score": pytest.approx(0.9), "index": 1, "label": "circle"},
        # 50 x 2 = 100 and 30 x 0.5 = 15 clip to the image; label 7 has no name
        {"box": [0.0, 0.0, 80.0, 10.0], "score": 0.5, "index": 7, "label": "7"},
    ]  # the third scores under the threshold
