"""dlperf.deploy.images on its own: the upload out of a request (a FastAPI app in-process),
an image to the model's input, and detector boxes back to the uploaded image's pixels."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from dlperf.deploy import meta
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


def test_field_file_is_taken_before_other_files(client: Client) -> None:
    files = [("other", ("o.png", b"O" * 3)), ("file", ("f.png", b"F" * 5))]
    assert client.post("/echo", files=files).json() == {"bytes": 5, "first": ord("F")}


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
    x, size = image_array(png(width=16, height=12), pre, max_pixels=10_000)
    assert size == (16, 12)  # width, height of the upload
    assert x.shape == (3, 4, 6) and x.dtype == np.float32
    assert x.min() >= 0.0 and x.max() <= 1.0  # mean 0, std 1: pixels on [0, 1]
    with pytest.raises(UserError, match="the uploaded file is 16x12 pixels"):
        image_array(png(width=16, height=12), pre, max_pixels=100)


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
