"""The eleventh break-it round (issue 41), images read as training goes: a bad image met
mid-run, one Pillow only warns of, a float64 model measured, and a VOC set's bad image.

S1. A streamed image folder (data.in_memory=false) whose bad image no check before the run
decodes (in val/, the test split, read only at the end) stopped a run with DataLoader
workers with `error: Caught UserError in DataLoader worker process 0.\\nOriginal Traceback
...`: the worker's whole traceback escaped onto one line, and stored so as the run's error.
S2. An image over Pillow's pixel cap but under twice it decodes, and Pillow printed Python's
two-line DecompressionBombWarning on stderr as it did.
S3. `predict --measure` measured a float64 model as built (its weights kept in float64, fp32
input) without a word, where analyze says so.
S4. `detect finetune` and `detect eval` opened a VOC set's images with Pillow and caught
nothing: a truncated JPEG was 'error: cannot use: Truncated File Read', exit 1, naming no
file; a PNG claiming 20000x20000 pixels was DecompressionBombError's traceback.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_11_data import F64, bomb_folder, claiming_png
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

STREAMED = """
[model]
name = "smallcnn"
[data]
name = "imagefolder"
root = "img/bomb"
image_size = 8
in_memory = false
[train]
epochs = 1
batch_size = 4
lr = 0.05
[run]
threads = 1
checkpoint = false
"""

BIG = "img/bomb/val/a/big.png"


def truncated_png(path: Path) -> None:
    """A real 8x8 PNG cut short in its pixel data: Pillow opens its header, then fails to
    decode it ('image file is truncated')."""
    from PIL import Image

    pixels = np.random.default_rng(1).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    path.write_bytes(path.read_bytes()[:60])


def streamed_set(root: Path, bad: str) -> None:
    """bomb_folder's set with its claiming PNG moved into val/ (the test split, which no check
    before the run decodes), or replaced there by a truncated PNG."""
    big = bomb_folder(root)
    moved = root / "val" / "a" / "big.png"
    big.rename(moved)
    if bad == "truncated":
        truncated_png(moved)


# --- S1: a bad image met mid-run in a streamed set --------------------------------------------


@pytest.mark.parametrize(
    ("bad", "workers", "said"),
    [
        ("bomb", 0, "400,000,000 pixels, over Pillow's decompression-bomb cap"),
        ("bomb", 2, "400,000,000 pixels, over Pillow's decompression-bomb cap"),
        ("truncated", 2, "cannot decode the image"),
    ],
    ids=["bomb-in-process", "bomb-workers", "truncated-workers"],
)
def test_a_bad_image_met_mid_run_is_its_own_one_line(
    bad: str, workers: int, said: str, cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    """Before (workers): 'error: Caught UserError in DataLoader worker process 0.\\nOriginal
    Traceback (most recent call last):\\n  File ...', the same text stored as the error."""
    streamed_set(tmp_path / "img" / "bomb", bad)
    (tmp_path / "base.toml").write_text(STREAMED)
    result = cli("run", "base.toml", "--set", f"data.num_workers={workers}")
    one_line(result, 2, f"error: {BIG}: {said}")
    assert "DataLoader worker" not in result.err and "\\n" not in result.err
    assert "(replace or remove it)" in result.err or "(shrink it below" in result.err
    # found mid-run: the run is stored failed, saying why in the same one line
    (run,) = store.list_runs()
    assert run.status == "failed"
    assert run.error is not None and f"UserError: {BIG}: {said}" in run.error, run.error
    assert "\n" not in run.error and "Traceback" not in run.error


def test_a_model_error_in_a_worker_is_still_not_told_as_bad_input() -> None:
    """Only dlperf's own refusals come back as one line: anything else a worker raises keeps
    torch's report (here a sample whose transform fails)."""
    import torch

    from dlperf.data.loaders import TorchvisionLoader
    from dlperf.data.sources import Split

    split = Split(torch.zeros(4, dtype=torch.int64), torch.zeros(4, 1, 8, 8, dtype=torch.uint8))
    loader = TorchvisionLoader(split, 2, (0.5,), (0.5,), None, 1, False)

    def broken(image: object) -> object:
        raise KeyError("not a refusal")

    loader.dataset.transform = broken
    with pytest.raises(KeyError, match="Caught KeyError in DataLoader worker process 0"):
        list(loader)


# --- S2: between Pillow's cap and twice it ------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["in-memory", "streamed"])
def test_an_image_under_twice_pillows_cap_decodes_without_pythons_warning(
    streamed: bool, cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every 8x8 image (64 pixels) is over a cap of 40 and under twice it: Pillow decodes it
    and warns. Before: Python's 'DecompressionBombWarning: Image size (64 pixels) exceeds
    limit of 40 pixels, could be decompression bomb DOS attack.' and its source line on
    stderr, per file. dlperf's own hard cap (twice Pillow's) refuses a bomb; below it, a
    user's own image is decoded as any other."""
    from PIL import Image

    root = tmp_path / "img" / "bomb"
    bomb_folder(root).unlink()
    (tmp_path / "base.toml").write_text(STREAMED)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 40)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = cli(
            "run", "base.toml", "--set", f"data.in_memory={str(streamed).lower()}",
            "--set", "data.num_workers=0",
        )  # fmt: skip
    assert result.code == 0, result.err
    bombs = [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]
    assert bombs == [], [str(w.message) for w in bombs]
    assert "DecompressionBomb" not in result.err
    assert [run.status for run in store.list_runs()] == ["finished"]


# --- S3: predict --measure of a float64 model --------------------------------------------


@pytest.mark.parametrize(
    ("factory", "measure", "said"),
    [
        ("f64", True, "note: models.py:f64 counted and measured as built: "),
        ("f64", False, "note: models.py:f64 counted as built: "),
        ("plain", True, None),
    ],
    ids=["f64-measured", "f64-counted", "fp32-measured"],
)
def test_predict_says_it_kept_a_float64_model_as_built(
    factory: str,
    measure: bool,
    said: str | None,
    cli: Cli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: nothing said, where analyze's conventions say KEPT_FLOAT64."""
    from torch import nn

    from dlperf.analytic import interleaved
    from dlperf.analytic.counting import KEPT_FLOAT64
    from dlperf.analytic.measure import Kernel

    (tmp_path / "models.py").write_text(F64)
    tiny = Kernel("matmul", lambda: nn.Linear(8, 8, bias=False), [8], 2)
    monkeypatch.setattr(interleaved, "KERNELS", [tiny])
    how = ["--measure", "--reps", "1"] if measure else ["--device", "K80"]
    result = cli("predict", f"models.py:{factory}", "--input", "1,8,8", *how, "--json")
    assert result.code == 0, result.err
    notes = [line for line in result.err.splitlines() if KEPT_FLOAT64 in line]
    assert notes == ([said + KEPT_FLOAT64] if said else []), result.err


# --- S4: a VOC set's bad image ---------------------------------------------------------------


def voc_set(root: Path, bad: str, images: int = 2) -> Path:
    """make-shapes' set of `images` (2: one training image, one validation image; 4: three and
    one) with the first image of `bad`'s split ("train" or "val") made bad: the first a
    truncated JPEG, the second a PNG claiming 20000x20000 pixels under the .jpg name the
    annotation gives; its path."""
    from dlperf.detect import voc

    voc.make_shapes(root, images=images, size=64)
    image_id = (root / "ImageSets" / "Main" / f"{bad}.txt").read_text().split()[0]
    path = root / "JPEGImages" / f"{image_id}.jpg"
    if bad == "train":
        path.write_bytes(path.read_bytes()[:300])
    else:
        claiming_png(path, 20_000, 20_000)
    return path


def test_detect_finetune_names_a_truncated_jpeg(cli: Cli, tmp_path: Path) -> None:
    """Before: 'error: cannot use: Truncated File Read', exit 1, no file named. (Three
    training images at --batch 3: a step of one image is refused before any is read, D3.)"""
    bad = voc_set(tmp_path / "shapes", "train", images=4)
    result = cli(
        "detect", "finetune", str(tmp_path / "shapes"), "--epochs", "1", "--batch", "3",
        "--threads", "1", "--size", "96", "--out", str(tmp_path / "d.pt"),
    )  # fmt: skip
    one_line(result, 2, f"error: {bad}: cannot decode the image", "(replace or remove it)")


def test_detect_eval_names_a_picture_over_pillows_cap(cli: Cli, tmp_path: Path) -> None:
    """Before: PIL.Image.DecompressionBombError and its traceback, exit 1."""
    import torch

    from dlperf.detect import ssd, voc

    bad = voc_set(tmp_path / "shapes", "val")
    torch.manual_seed(0)
    labels = [voc.BACKGROUND, "disc", "square"]
    det = ssd.build("ssdlite320_mobilenet_v3_large", labels=labels, size=96)
    ssd.save_checkpoint(det, tmp_path / "w.pt")
    result = cli(
        "detect", "eval", str(tmp_path / "shapes"), "--weights", str(tmp_path / "w.pt"),
        "--batch", "1", "--threads", "1",
    )  # fmt: skip
    one_line(result, 2, f"error: {bad}: 400,000,000 pixels, over Pillow's decompression-bomb")
    assert "DecompressionBombError" not in result.err


@pytest.mark.parametrize("bad", ["train", "val"])
def test_voc_dataset_reads_through_decode_files_refusals(bad: str, tmp_path: Path) -> None:
    from dlperf.detect import voc

    root = tmp_path / "shapes"
    path = voc_set(root, bad)
    annotations = voc.load_split(root, bad)
    data = voc.VocDataset(root, annotations, [voc.BACKGROUND, "disc", "square"])
    said = "cannot decode the image" if bad == "train" else "400,000,000 pixels"
    with pytest.raises(UserError, match=f"^{path}: {said}") as caught:
        data[0]
    assert caught.value.hint
