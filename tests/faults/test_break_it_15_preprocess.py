"""Issue 41, fifteenth break-it round: `dlperf infer` and `dlperf serve` turned a non-square image
file into another tensor than training's image-file reader (decode_file) did: the long side
rounded to nearest where torchvision's resize rounds down, the crop's offset rounded down where
torchvision's centre crop rounds half to even (11x10 -> 8: 9x8 resized, not 8x8; 14x10 -> 8:
cropped from x = 1, not 2). Up to 0.48 apart on [0, 1]; a top-1 that flipped. And `dlperf detect
finetune` printing "nan images/s" when every step was warm-up. Each seen failing before its fix."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from PIL import Image
from scipy.special import softmax

from dlperf.data.augment import normalize
from dlperf.data.sources import decode_file
from dlperf.deploy import runtime
from dlperf.deploy.meta import Preprocess
from dlperf.deploy.meta import load as load_meta
from tests.conftest import CliResult
from tests.faults.test_break_it_9_deploy import MODELS, exported

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet's: not a no-op
# Every mode PIL opens that dlperf reads, with the format that holds it.
MODES = {"RGB": "PNG", "L": "PNG", "LA": "PNG", "RGBA": "PNG", "P": "PNG", "I;16": "PNG"}
MODES["CMYK"] = "TIFF"


def image_file(path: Path, width: int, height: int, mode: str, seed: int = 0) -> Path:
    """A width x height image of random pixels in `mode`, written to `path`."""
    rng = np.random.default_rng(seed)
    if mode == "I;16":
        image = Image.fromarray(rng.integers(0, 65536, (height, width), dtype=np.uint16))
    elif mode == "P":
        image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        image = image.quantize(16)
    else:
        bands = len(mode)
        pixels = rng.integers(0, 256, (height, width, bands), dtype=np.uint8)
        image = Image.frombytes(mode, (width, height), pixels.tobytes())
    assert image.mode == mode, image.mode
    image.save(path, format=MODES[mode])
    with Image.open(path) as reread:  # the mode reaches the file, as a user's would
        assert reread.mode == mode, (mode, reread.mode)
    return path


def trained(path: Path, side: int, channels: int = 3) -> np.ndarray:
    """The (C, side, side) tensor training makes of the file: decode_file, then the loaders'
    float conversion and normalisation (augment.normalize). A model of another channel count
    never reads files in training: its image is decode_file's, converted to its mode (L, LA,
    RGBA, alpha opaque) as Pillow converts it."""
    pixels = decode_file(str(path), side)
    if channels != 3:
        mode = runtime.CHANNEL_MODES[channels]
        rgb = Image.fromarray(pixels.permute(1, 2, 0).numpy())
        array = np.asarray(rgb.convert(mode))
        pixels = torch.from_numpy(array.reshape(side, side, channels).copy()).permute(2, 0, 1)
    mean = torch.tensor(MEAN[:1] * channels if channels != 3 else MEAN).reshape(-1, 1, 1)
    std = torch.tensor(STD[:1] * channels if channels != 3 else STD).reshape(-1, 1, 1)
    return normalize(pixels, mean, std).numpy()


def served(path: Path, height: int, width: int, channels: int = 3) -> np.ndarray:
    """What `dlperf infer` and `dlperf serve` make of the file for a (channels, height, width)
    model."""
    mean = MEAN[:1] * channels if channels != 3 else MEAN
    std = STD[:1] * channels if channels != 3 else STD
    pre = Preprocess(size=(height, width), channels=channels, mean=mean, std=std)
    return runtime.to_array(runtime.decode(path.read_bytes(), str(path)), pre, str(path))


def same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype == np.float32
    np.testing.assert_array_max_ulp(a, b, maxulp=1)


# --- 1. infer's preprocessing is training's, for every non-square image ---------------------


# The tester's sizes (width, height, side): 11x10 resized to 9x8, not 8x8; 14x10 cropped from
# x = 1, not 2; ImageNet's 224 of a 640x480 or 500x375 photo 0.30 apart on [0, 1]
TESTERS = [(11, 10, 8), (14, 10, 8), (20, 9, 8), (10, 11, 8), (9, 20, 8)]
TESTERS += [(640, 480, 224), (500, 375, 224)]


@pytest.mark.parametrize(
    ("width", "height", "side"),
    TESTERS,
)
def test_to_array_is_decode_files_tensor_for_the_testers_cases(
    tmp_path: Path, width: int, height: int, side: int
) -> None:
    path = image_file(tmp_path / "x.png", width, height, "RGB")
    # before: 11x10 resized to 9x8, 14x10 cropped from x = 1 (training: x = 2); 0.30 apart at
    # 640x480 -> 224
    same(served(path, side, side), trained(path, side))


@settings(max_examples=80, deadline=None)
@given(
    width=st.integers(1, 64),
    height=st.integers(1, 64),
    side=st.integers(1, 32),
    mode=st.sampled_from(sorted(MODES)),
    channels=st.sampled_from([1, 2, 3, 4]),
    seed=st.integers(0, 2**16),
)
def test_to_array_is_decode_files_tensor_for_any_size_and_mode(
    tmp_path_factory: pytest.TempPathFactory,
    width: int,
    height: int,
    side: int,
    mode: str,
    channels: int,
    seed: int,
) -> None:
    # a model of 2 or 4 channels keeps an image's own alpha, which training's reader drops
    assume(not (channels in (2, 4) and "A" in mode))
    folder = tmp_path_factory.mktemp("images", numbered=True)
    path = image_file(folder / "x.img", width, height, mode, seed)
    same(served(path, side, side, channels), trained(path, side, channels))


def test_a_non_square_target_is_covered_and_centre_cropped_with_torchvisions_rounding(
    tmp_path: Path,
) -> None:
    # 20x9 into (H, W) = (8, 12): the height binds, the width int(8 * 20 / 9) = 17 (down),
    # the crop from int(round(5 / 2)) = 2 (half to even)
    path = image_file(tmp_path / "x.png", 20, 9, "RGB")
    image = Image.open(path).convert("RGB").resize((17, 8), Image.Resampling.BILINEAR)
    pixels = np.asarray(image.crop((2, 0, 14, 8)), dtype=np.float32) / 255.0
    mean = np.asarray(MEAN, dtype=np.float32).reshape(-1, 1, 1)
    std = np.asarray(STD, dtype=np.float32).reshape(-1, 1, 1)
    same(served(path, 8, 12), (pixels.transpose(2, 0, 1) - mean) / std)
    # and the width binding: 9x20 into (12, 8): height int(8 * 20 / 9) = 17, from y = 2
    path = image_file(tmp_path / "y.png", 9, 20, "RGB")
    image = Image.open(path).convert("RGB").resize((8, 17), Image.Resampling.BILINEAR)
    pixels = np.asarray(image.crop((0, 2, 8, 14)), dtype=np.float32) / 255.0
    same(served(path, 12, 8), (pixels.transpose(2, 0, 1) - mean) / std)


def test_infer_of_a_non_square_file_is_the_model_on_decode_files_tensor(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "models.py").write_text(MODELS)
    model = exported(cli, "models.py", 3, "flat.onnx")
    path = image_file(tmp_path / "photo.png", 14, 10, "RGB", seed=3)
    r = cli("infer", str(model), "photo.png", "--topk", "10", "--json")
    assert r.code == 0, r.err
    pre = load_meta(model).preprocess
    mean = torch.tensor(pre.mean).reshape(-1, 1, 1)
    std = torch.tensor(pre.std).reshape(-1, 1, 1)
    x = normalize(decode_file(str(path), 8), mean, std).numpy()[None]
    logits = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"input": x}
    )[0]
    expected = softmax(logits.astype(np.float64), axis=-1)[0]
    top = json.loads(r.out)["predictions"][0]["top"]
    # before: the model saw the image cropped one pixel left of training's crop
    assert [t["index"] for t in top] == list(np.argsort(-expected, kind="stable"))
    assert [t["probability"] for t in top] == pytest.approx(sorted(expected, reverse=True))


# --- 2. detect finetune with every step in warm-up -------------------------------------------


def test_detect_finetune_says_images_per_s_was_not_measured_when_every_step_was_warm_up(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlperf.detect import finetune

    def warm_up_only(store: Any, voc_root: Path, job: Any, out: Path, *args: Any) -> Any:
        # what finetune_recorded returns when every step fell in warm-up (TrainResult's
        # images_per_s is nan: no step timed)
        return {
            "run_id": 1, "ap_before": {"circle": 0.0}, "ap_after": {"circle": 0.1},
            "map_before": 0.0, "map_after": 0.1, "val_images": 2, "steps": 1,
            "train_s": 0.5, "images_per_s": math.nan, "threads": 1, "device": "cpu",
            "final_loss": 1.25, "weights": str(out),
        }  # fmt: skip

    monkeypatch.setattr(finetune, "finetune_recorded", warm_up_only)
    (tmp_path / "voc").mkdir()
    r = cli("detect", "finetune", "voc", "--epochs", "1", "--threads", "1", "--out", "s.pt")
    assert r.code == 0, r.err
    # before: "(nan images/s, 1 threads on cpu)"
    assert "nan" not in r.out
    assert "images/s not measured: every step was warm-up, 1 threads on cpu" in r.out
    r = cli("detect", "finetune", "voc", "--epochs", "1", "--out", "s.pt", "--json")
    assert json.loads(r.out)["images_per_s"] is None
