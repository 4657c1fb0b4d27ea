"""The eleventh break-it round (issue 41), data and counting: a picture over Pillow's pixel cap
in an image folder, and a float64 model measured and counted.

An image folder holding a picture larger than Pillow's cap (twice `PIL.Image.MAX_IMAGE_PIXELS`,
a "decompression bomb") stopped `run` (in memory or streamed), `data describe` and `data
samples` with Pillow's DecompressionBombError and its traceback, exit 1: decode_file caught
OSError only, and that error is no OSError. A PNG whose header claims 20000x20000 is enough:
Pillow refuses it as it reads the header, before any pixel is decoded.

A model built in float64 (`self.double()`, its forward casting its input to float64) trains
under `dlperf run` at fp32, which casts nothing; `predict --measure` cast it to fp32, and its
forward then met float32 weights with a float64 input: "the model rejects input ... Double and
Float", exit 2, a failed run stored. `analyze` counted the same cast model on the meta device
without a word, its weights at 4 bytes each where the run holds 8.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


# --- cause 6: a picture over Pillow's pixel cap -----------------------------------------------


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def claiming_png(path: Path, width: int, height: int) -> None:
    """A grey PNG whose header says width x height, with a few bytes of pixel data: Pillow
    checks the size against its cap as it opens the file, before decoding anything."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\x00" * 16))
        + _chunk(b"IEND", b"")
    )


def bomb_folder(root: Path) -> Path:
    """root/train and root/val, classes a and b, three 8x8 RGB PNGs each, and train/a/big.png
    claiming 20000x20000 pixels (400 million, over Pillow's cap of 178,956,970); its path."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in ("a", "b"):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(3):
                pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    big = root / "train" / "a" / "big.png"
    claiming_png(big, 20_000, 20_000)
    return big


BASE = """
[model]
name = "smallcnn"
[data]
name = "imagefolder"
root = "img/bomb"
image_size = 8
[train]
epochs = 1
batch_size = 4
lr = 0.05
[run]
threads = 1
checkpoint = false
"""

SOURCE = ["--set", "data.root=img/bomb", "--set", "data.image_size=8"]


@pytest.mark.parametrize(
    "command",
    [
        ["run", "base.toml"],
        ["run", "base.toml", "--set", "data.in_memory=false"],
        ["data", "describe", "imagefolder", *SOURCE, "--out", "figs"],
        ["data", "samples", "imagefolder", *SOURCE, "--out", "smp"],
    ],
    ids=["run", "run-streamed", "describe", "samples"],
)
def test_a_picture_over_pillows_cap_is_one_line_naming_it(
    command: list[str], cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    """Before: PIL.Image.DecompressionBombError with its traceback, exit 1."""
    bomb_folder(tmp_path / "img" / "bomb")
    (tmp_path / "base.toml").write_text(BASE)
    result = cli(*command)
    one_line(result, 2, "img/bomb/train/a/big.png", "400,000,000 pixels", "178,956,970")
    assert "DecompressionBomb" not in result.err
    assert store.list_runs() == []  # refused before anything is recorded


def test_decode_file_names_the_file_and_pillows_cap(tmp_path: Path) -> None:
    from dlperf.data.sources import decode_file

    big = tmp_path / "big.png"
    claiming_png(big, 20_000, 20_000)
    with pytest.raises(UserError) as caught:
        decode_file(str(big), 8)
    said = str(caught.value)
    cap = "over Pillow's decompression-bomb cap of 178,956,970"
    assert said.startswith(f"{big}: 400,000,000 pixels, {cap}"), said
    assert caught.value.hint, said


def test_decode_file_reads_a_picture_under_the_cap_and_refuses_it_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap as Pillow holds it when the file is read (lowered here: no huge image made)."""
    from PIL import Image

    from dlperf.data.sources import decode_file

    path = tmp_path / "x.png"
    Image.new("L", (40, 30), 200).save(path)
    assert decode_file(str(path), 8).shape == (3, 8, 8)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)  # refused past twice it: 1,200 > 1,000
    over = "1,200 pixels, over Pillow's decompression-bomb cap of 1,000 "
    with pytest.raises(UserError, match=over):
        decode_file(str(path), 8)


# --- cause 11: a float64 model measured and counted -----------------------------------------

F64 = """
import torch
from torch import nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc1 = nn.Linear(in_channels * 64, 32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class F64(Net):
    def __init__(self, num_classes=10):
        super().__init__(num_classes)
        self.double()

    def forward(self, x):
        return super().forward(x.double())


def f64(num_classes=10):
    return F64(num_classes)


def plain(num_classes=10):
    return Net(num_classes)
"""

PARAMS = 64 * 32 + 32 + 32 * 10 + 10


@pytest.fixture
def f64_file(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(F64)
    return path


def test_predict_measures_a_float64_model_as_it_trains(
    cli: Cli, store: RunStore, f64_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: 'the model rejects input [1, 1, 8, 8]: ... Double and Float', exit 2, and a
    failed predict run stored."""
    from torch import nn

    from dlperf.analytic import interleaved
    from dlperf.analytic.measure import Kernel

    # One tiny calibration kernel for the nine (seconds of convolutions on a busy machine):
    # the model's own step is what this measures.
    tiny = Kernel("matmul", lambda: nn.Linear(8, 8, bias=False), [8], 2)
    monkeypatch.setattr(interleaved, "KERNELS", [tiny])
    result = cli("predict", f"{f64_file}:f64", "--input", "1,8,8", "--measure", "--reps", "1")
    assert result.code == 0, result.err
    assert "rejects input" not in result.err
    (run,) = store.list_runs()
    assert (run.kind, run.status) == ("predict", "finished")


def test_analyze_counts_a_float64_model_in_its_own_dtype(cli: Cli, f64_file: Path) -> None:
    """Before: counted cast to fp32 without a word: weights at 4 bytes, where the run that
    trains it holds 8."""
    result = cli("analyze", f"{f64_file}:f64", "--input", "1,8,8", "--train", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["totals"]["training_memory"]["weights_bytes"] == PARAMS * 8
    assert "float64" in doc["conventions"]["precision"], doc["conventions"]
    # a float32 model is counted at fp32 as before
    plain = json.loads(
        cli("analyze", f"{f64_file}:plain", "--input", "1,8,8", "--train", "--json").out
    )
    assert plain["totals"]["training_memory"]["weights_bytes"] == PARAMS * 4
    assert plain["conventions"]["precision"] == "fp32"


def test_a_float64_model_that_cannot_be_cast_to_bf16_is_refused_before_measuring(
    cli: Cli, store: RunStore, f64_file: Path
) -> None:
    """Cast to bf16 (what a count or a measurement at bf16 describes), its forward's float64
    input meets bf16 weights: torch refuses that off the meta device. Before: analyze counted
    it without a word (meta tensors do not check), and predict --measure stored a failed run."""
    said = "mat1 and mat2 must have the same dtype, but got float64 and bfloat16"
    counted = cli("analyze", f"{f64_file}:f64", "--input", "1,8,8", "--precision", "bf16")
    one_line(counted, 2, "the model rejects input [1, 1, 8, 8]", said)
    measured = cli(
        "predict", f"{f64_file}:f64", "--input", "1,8,8", "--measure", "--reps", "1",
        "--precision", "bf16",
    )  # fmt: skip
    one_line(measured, 2, said)
    assert store.list_runs() == []


def test_make_step_keeps_a_float64_model_at_fp32_and_casts_it_at_bf16() -> None:
    import torch
    from torch import nn

    from dlperf.analytic.measure import make_step

    class Doubled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2).double()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.to(self.fc.weight.dtype))

    model = Doubled()
    make_step(model, [4], 2, True, "fp32", torch.device("cpu"))()
    assert model.fc.weight.dtype == torch.float64 and model.fc.weight.grad is not None
    half = Doubled()
    make_step(half, [4], 2, False, "bf16", torch.device("cpu"))()
    assert half.fc.weight.dtype == torch.bfloat16
