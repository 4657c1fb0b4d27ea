"""Round 47, fixer F4's note: under `ulimit -v 215000`, `dlperf infer` said "c4/s/x.png is not
a readable image (MemoryError)", exit 2: a decoder's allocation that failed was blamed on the
image, a good one (`deploy.runtime.decode` took every exception as the file's). A MemoryError
now goes on as what it is: infer's one out-of-memory line, exit 1 (serve's 507). The failed
allocation is made by patching Pillow's decode step to raise as it does under the limit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import CliResult
from tests.deploy.test_server import tiny_classifier


def test_an_image_decoder_out_of_memory_is_not_blamed_on_the_image(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_classifier(tmp_path / "tiny.onnx")
    Image.new("RGB", (8, 8), (10, 20, 30)).save(tmp_path / "x.png")
    assert cli("infer", str(model), "x.png").code == 0  # the image is good

    def starved(self: Image.Image) -> None:
        raise MemoryError  # Pillow's decoder buffer, refused under the address-space limit

    monkeypatch.setattr(Image.Image, "load", starved)
    r = cli("infer", str(model), "x.png")
    assert r.code == 1, r.err  # before: 2, "x.png is not a readable image (MemoryError)"
    assert "not a readable image" not in r.err
    assert r.err.startswith("error: out of memory"), r.err
