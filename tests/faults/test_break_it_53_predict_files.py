"""Break-it round 53, fixer G1: a `/predict` upload of several files.

T2 C1: `curl -F file=@a.png -F file=@b.png /predict` was answered 200 with one prediction, that
of the last `file` part (two differently named file fields: the first), and no word that the
other image was dropped: a client took one image's answer for the other's. Now an upload of
more than one file is refused, 400 in the server's error shape, in one line that counts the
files, says /predict takes one image per request and how to send several. A file part left
empty with no name (a browser form's file input nobody filled) is no second image.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from dlperf.deploy.server import create_app
from tests.deploy.test_server import png, running, tiny_classifier

TWO = "the upload has 2 files; /predict takes one image per request"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tiny_classifier(tmp_path_factory.mktemp("predict_files") / "tiny.onnx")
    with running(create_app(path, threads=1)) as served:
        yield served


def predict(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{url}/predict?topk=1", timeout=30, **kwargs)


@pytest.mark.parametrize(
    "files",
    [
        [("file", ("a.png", png(seed=1))), ("file", ("b.png", png(seed=2)))],
        [("a", ("a.png", png(seed=1))), ("b", ("b.png", png(seed=2)))],
        [("file", ("a.png", png(seed=1))), ("note", (None, "x")), ("b", ("b.png", png(seed=2)))],
    ],
    ids=["two-file-fields", "two-names", "with-a-text-field"],
)
def test_an_upload_of_two_files_is_refused_in_one_line(url: str, files: list[Any]) -> None:
    response = predict(url, files=files)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error.startswith(TWO) and "/v2/models/tiny/infer" in error and "\n" not in error


def browser_form(*parts: tuple[str, str, bytes]) -> dict[str, Any]:
    """A multipart body as a browser sends a form's (name, filename, bytes) file inputs, one
    left unfilled included (`filename=""`, no bytes: httpx leaves an empty filename out)."""
    body = b"".join(
        b"--B\r\nContent-Disposition: form-data; "
        + f'name="{name}"; filename="{filename}"'.encode()
        + b"\r\nContent-Type: application/octet-stream\r\n\r\n"
        + data
        + b"\r\n"
        for name, filename, data in parts
    )
    headers = {"content-type": "multipart/form-data; boundary=B"}
    return {"content": body + b"--B--\r\n", "headers": headers}


def test_one_file_beside_an_unfilled_file_input_is_answered_as_that_file(url: str) -> None:
    image = png(seed=3)
    alone = predict(url, content=image)
    assert alone.status_code == 200, alone.text
    for parts in (
        [("more", "", b""), ("file", "c.png", image)],
        [("file", "c.png", image), ("more", "", b"")],
    ):
        beside = predict(url, **browser_form(*parts))
        assert beside.status_code == 200, beside.text
        assert beside.json() == alone.json()


def test_a_form_of_unfilled_file_inputs_is_no_image(url: str) -> None:
    response = predict(url, **browser_form(("file", "", b""), ("more", "", b"")))
    assert response.status_code == 400
    assert response.json()["error"].startswith("no image in the request")
