"""The twenty-first break-it round (P2, causes 1 to 7): MNIST and CIFAR files, thin images.

1. torchvision's idx reader checks a file's magic with `assert`, and a CIFAR batch pickled as
   a list failed in a subscript: an AssertionError or TypeError traceback, exit 1.
2. MNIST and CIFAR labels were never checked against the images or the classes: 50 labels
   for 60 images trained on 50 without a word; more labels, label 11 of MNIST's 10 classes,
   label -1, or a batches.meta naming fewer classes than the labels use ended in tracebacks.
3. MNIST's shape was the literal 1x28x28: 32x32 idx files were described as 28x28 and `run`
   crashed in the model.
4. A float64 CIFAR batch was decoded by np.vstack promoting every batch to float64.
5. A corrupt .gz left a partial idx file, which every later run then used (the good .gz put
   in its place never unpacked).
6. Every broken-but-present file was told "or set data.download = true", which downloads
   nothing while the files are there.
7. A 1 x 1,000,000 PNG (1 KB) was resized to 32 x 32,000,000 before its centre crop: GBs, in
   training's decode_file and in inference's `covered` (infer, serve).
"""

from __future__ import annotations

import gzip
import json
import pickle
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.data.sources import decode_file
from dlperf.image_modes import covered
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
RNG = np.random.default_rng(21)
NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
DOWNLOAD = "data.download"
TRAIN_IMAGES, TRAIN_LABELS = "train-images-idx3-ubyte", "train-labels-idx1-ubyte"
TEST_IMAGES, TEST_LABELS = "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"
REFUSED = 1_000_000  # pixels: a resize the thin images' tests refuse to make


# --- files in the real on-disk formats ------------------------------------------------------


def idx_bytes(array: Any, magic: int | None = None) -> bytes:
    """An idx file of uint8 `array` (magic 0x08NN, NN its dimensions), or `magic` instead."""
    a = np.asarray(array, np.uint8)
    head = struct.pack(">I", 0x0800 | a.ndim if magic is None else magic)
    return head + b"".join(struct.pack(">I", s) for s in a.shape) + a.tobytes()


def write_mnist(root: Path, **files: bytes) -> Path:
    """root/MNIST/raw with 60 training and 20 test images of 28x28; `files` replace some."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    default = {
        TRAIN_IMAGES: idx_bytes(RNG.integers(0, 256, (60, 28, 28))),
        TRAIN_LABELS: idx_bytes(np.arange(60) % 10),
        TEST_IMAGES: idx_bytes(RNG.integers(0, 256, (20, 28, 28))),
        TEST_LABELS: idx_bytes(np.arange(20) % 10),
    }
    for name, data in {**default, **files}.items():
        (raw / name).write_bytes(data)
    return raw


def batch(n: int = 20, **over: Any) -> dict[str, Any]:
    entry = {
        "data": RNG.integers(0, 256, (n, 3072), dtype=np.uint8),
        "labels": (np.arange(n) % 10).tolist(),
    }
    return {**entry, **over}


def write_cifar(root: Path, over: dict[str, Any] | None = None, meta: Any = None) -> Path:
    """root/cifar-10-batches-py: five training batches and a test batch of 20 images each;
    `over` replaces a batch's pickled object, `meta` that of batches.meta."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        entry = (over or {}).get(name, batch())
        (folder / name).write_bytes(pickle.dumps(entry))
    meta = {"label_names": NAMES} if meta is None else meta
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    return folder


def describe(cli: Cli, name: str, root: Path) -> CliResult:
    return cli("data", "describe", name, "--set", f"data.root={root}", "--json")


# --- cause 1: exceptions of the readers -------------------------------------------------------


def test_an_idx_file_of_another_magic_is_one_line_naming_it(cli: Cli, tmp_path: Path) -> None:
    """The repro: torchvision's `assert 1 <= nd <= 3`, a traceback."""
    raw = write_mnist(
        tmp_path / "m", **{TRAIN_IMAGES: idx_bytes(np.zeros((60, 28, 28)), 0x12345678)}
    )
    r = describe(cli, "mnist", tmp_path / "m")
    one_line(r, 2, str(raw / TRAIN_IMAGES), "not an idx file", "0x12345678")


def test_a_cifar_batch_that_is_not_a_dict_is_one_line_naming_it(cli: Cli, tmp_path: Path) -> None:
    """The repro: a batch pickled as a list, a TypeError traceback."""
    folder = write_cifar(tmp_path / "c", over={"data_batch_1": [1, 2, 3]})
    r = describe(cli, "cifar10", tmp_path / "c")
    one_line(r, 2, str(folder / "data_batch_1"), "list")


# --- cause 2: labels against images and classes ---------------------------------------------


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        (np.arange(50) % 10, "50 labels for 60 images"),
        (np.zeros(70), "70 labels for 60 images"),
        (np.full(60, 11), "label 11 is outside 0..9"),
    ],
    ids=["fewer", "more", "label11"],
)
def test_mnist_labels_are_checked_against_images_and_classes(
    cli: Cli, tmp_path: Path, labels: np.ndarray, said: str
) -> None:
    """Before: 'train 45, val 5' without a word; an IndexError; a zip() ValueError."""
    raw = write_mnist(tmp_path / "m", **{TRAIN_LABELS: idx_bytes(labels)})
    r = describe(cli, "mnist", tmp_path / "m")
    one_line(r, 2, str(raw / TRAIN_LABELS), said)
    assert DOWNLOAD not in r.err


@pytest.mark.parametrize(
    ("over", "meta", "said"),
    [
        ({"data_batch_1": batch(labels=list(range(10)) * 1 + [0] * 5)}, None, "15 labels for 20"),
        ({"data_batch_2": batch(labels=[1] * 25)}, None, "25 labels for 20 images"),
        ({"data_batch_1": batch(labels=[-1] * 20)}, None, "label -1 is negative"),
        ({"test_batch": batch(labels=[10] * 20)}, None, "label 10 is outside 0..9"),
        (None, {"label_names": NAMES[:5]}, "batches.meta names 5 classes"),
        (None, {"label_names": []}, "batches.meta names 0 classes"),
    ],
    ids=["fewer", "more", "negative", "label10", "meta5", "metaempty"],
)
def test_cifar_labels_are_checked_against_images_and_classes(
    cli: Cli, tmp_path: Path, over: dict[str, Any] | None, meta: Any, said: str
) -> None:
    """Before: 85 + 10 of 100 images without a word; IndexError 'Target -1 is out of bounds'
    in `run`; 'Number of rows must be a positive integer' for an empty batches.meta."""
    folder = write_cifar(tmp_path / "c", over, meta)
    r = describe(cli, "cifar10", tmp_path / "c")
    named = next(iter(over)) if over else "batches.meta"
    one_line(r, 2, str(folder / named), said)
    assert DOWNLOAD not in r.err


# --- cause 3: MNIST's real shape ------------------------------------------------------------


def test_mnist_of_32x32_is_described_and_read_as_32x32(cli: Cli, tmp_path: Path) -> None:
    write_mnist(
        tmp_path / "m",
        **{
            TRAIN_IMAGES: idx_bytes(RNG.integers(0, 256, (60, 32, 32))),
            TEST_IMAGES: idx_bytes(RNG.integers(0, 256, (20, 32, 32))),
        },
    )
    r = describe(cli, "mnist", tmp_path / "m")
    assert r.code == 0, r.err
    assert json.loads(r.out)["image_shape"] == [1, 32, 32]
    data = load_data(DataConfig(name="mnist", root=str(tmp_path / "m")))
    assert data.shape == (1, 32, 32) and data.train.images is not None
    assert tuple(data.train.images.shape[1:]) == (1, 32, 32)


def test_mnist_train_and_test_of_other_sizes_is_one_line(cli: Cli, tmp_path: Path) -> None:
    raw = write_mnist(
        tmp_path / "m", **{TRAIN_IMAGES: idx_bytes(RNG.integers(0, 256, (60, 32, 32)))}
    )
    r = describe(cli, "mnist", tmp_path / "m")
    one_line(r, 2, str(raw / TEST_IMAGES), "28x28", "32x32")


# --- cause 4: CIFAR's dtype -------------------------------------------------------------------


def test_a_float_cifar_batch_is_refused_naming_its_dtype(cli: Cli, tmp_path: Path) -> None:
    """Before: rc 0, the whole set float64 and one fifth of it near black."""
    floats = RNG.random((20, 3072))
    folder = write_cifar(tmp_path / "c", over={"data_batch_1": batch(data=floats)})
    r = describe(cli, "cifar10", tmp_path / "c")
    one_line(r, 2, str(folder / "data_batch_1"), "float64, not uint8")


# --- causes 5 and 6: a corrupt .gz, and the download hint ---------------------------------------


def test_a_corrupt_gz_leaves_nothing_and_its_good_copy_then_loads(cli: Cli, tmp_path: Path) -> None:
    """Before: a 0-byte idx file was left; with the good .gz back, 'invalid literal for int()
    ... (point data.root at it, or set data.download = true)'."""
    raw = write_mnist(tmp_path / "m")
    for name in [p.name for p in raw.iterdir()]:  # the .gz files only, as downloaded
        good = (raw / name).read_bytes()
        (raw / name).unlink()
        (raw / f"{name}.gz").write_bytes(gzip.compress(good))
    good_gz = (raw / f"{TRAIN_IMAGES}.gz").read_bytes()
    (raw / f"{TRAIN_IMAGES}.gz").write_bytes(good_gz[: len(good_gz) // 2])
    r = describe(cli, "mnist", tmp_path / "m")
    one_line(r, 2, str(raw / f"{TRAIN_IMAGES}.gz"))
    assert DOWNLOAD not in r.err
    assert not (raw / TRAIN_IMAGES).exists()
    left = {p.name for p in raw.iterdir() if not p.name.endswith(".gz")}
    assert left <= {TEST_IMAGES, TEST_LABELS, TRAIN_LABELS}  # whole files only, no part
    (raw / f"{TRAIN_IMAGES}.gz").write_bytes(good_gz)  # the user puts a good copy back
    r = describe(cli, "mnist", tmp_path / "m")
    assert r.code == 0, r.err
    assert json.loads(r.out)["splits"] == {"train": 54, "val": 6, "test": 20}


@pytest.mark.parametrize("name", ["mnist", "cifar10"])
def test_download_is_offered_only_for_missing_files(cli: Cli, tmp_path: Path, name: str) -> None:
    """A present file that is broken: replace it (download fetches nothing while it is
    there); a missing one: point data.root at it, or download."""
    if name == "mnist":
        raw = write_mnist(tmp_path / "set", **{TRAIN_LABELS: idx_bytes(np.zeros(60))[:-7]})
        broken = raw / TRAIN_LABELS
    else:
        broken = write_cifar(tmp_path / "set") / "data_batch_3"
        broken.write_bytes(b"")
    r = describe(cli, name, tmp_path / "set")
    one_line(r, 2, str(broken), "replace it")
    assert DOWNLOAD not in r.err
    broken.unlink()
    r = describe(cli, name, tmp_path / "set")
    one_line(r, 2, broken.name, "set data.download = true")


# --- cause 7: thin images ---------------------------------------------------------------------


@pytest.fixture
def resizes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """The size of every image Pillow's resize makes, as it is asked for: the seam that bounds
    the decode's memory (its intermediate images) without timing or sampling the process.
    One over REFUSED pixels is refused before it is made (the unbounded decode took GBs)."""
    made: list[tuple[int, int]] = []
    resize = Image.Image.resize

    def recorded(self: Image.Image, size: Any, *args: Any, **kwargs: Any) -> Image.Image:
        made.append((int(size[0]), int(size[1])))
        assert made[-1][0] * made[-1][1] <= REFUSED, f"a resize to {made[-1]} was asked for"
        return resize(self, size, *args, **kwargs)

    monkeypatch.setattr(Image.Image, "resize", recorded)
    yield made


def _reference(image: Image.Image, side: int) -> np.ndarray:
    """Today's decode of an RGB image, torchvision's: the shorter side resized, then cropped."""
    from torchvision.transforms.v2 import functional as TF

    return np.asarray(TF.center_crop(TF.resize(image, side, antialias=True), [side, side]))


@pytest.mark.parametrize("shape", [(1, 1_000_000), (1_000_000, 1)], ids=["wide", "tall"])
def test_a_thin_image_decodes_within_its_output_size(
    tmp_path: Path, resizes: list[tuple[int, int]], shape: tuple[int, int]
) -> None:
    """The repro: a 1 KB PNG of 1 x 1,000,000 grey pixels at size 32 made a 32 x 32,000,000
    image (4 GB) before the crop; each image Pillow makes is now at most 16 times the output."""
    path = tmp_path / "thin.png"
    Image.fromarray(np.full(shape, 77, np.uint8)).save(path)
    assert path.stat().st_size < 10_000
    x = decode_file(str(path), 32)
    assert tuple(x.shape) == (3, 32, 32) and bool((x == 77).all())
    assert resizes and max(w * h for w, h in resizes) <= 16 * 32 * 32
    resizes.clear()
    with Image.open(path) as file:
        out = covered(file.convert("RGB"), 24, 40)
    assert out.size == (40, 24) and bool((np.asarray(out) == 77).all())
    assert resizes and max(w * h for w, h in resizes) <= 16 * 24 * 40


@pytest.mark.parametrize(
    ("size", "side"),
    [((3, 700), 8), ((700, 3), 8), ((40, 2000), 12), ((17, 1301), 5), ((5, 900), 32)],
)
def test_a_thin_image_gives_the_pixels_of_the_whole_resize(
    tmp_path: Path, size: tuple[int, int], side: int
) -> None:
    """The bounded path (the centre of the source resized alone) gives the pixels resizing
    the whole image and cropping gives, for images thin enough to take it and small enough
    to check it against the whole resize."""
    w, h = size
    pixels = RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)
    path = tmp_path / "thin.png"
    Image.fromarray(pixels).save(path)
    expected = _reference(Image.fromarray(pixels), side)
    got = decode_file(str(path), side).permute(1, 2, 0).numpy()
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1
    served = np.asarray(covered(Image.fromarray(pixels), side, side))
    assert np.abs(served.astype(int) - expected.astype(int)).max() <= 1


@pytest.mark.parametrize("size", [(40, 50), (50, 40), (64, 64), (7, 100), (300, 20), (9, 9)])
def test_a_normal_image_decodes_bit_identically_to_the_whole_resize(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """Below 16:1 nothing changed: the whole image is resized, then cropped, as before."""
    w, h = size
    pixels = RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)
    path = tmp_path / "normal.png"
    Image.fromarray(pixels).save(path)
    expected = _reference(Image.fromarray(pixels), 16)
    assert np.array_equal(decode_file(str(path), 16).permute(1, 2, 0).numpy(), expected)
    assert np.array_equal(np.asarray(covered(Image.fromarray(pixels), 16, 16)), expected)


def test_a_directory_given_for_an_image_is_named_as_one(tmp_path: Path) -> None:
    """`dlperf infer MODEL DIR` said "no image file DIR", as if nothing were there."""
    from dlperf.deploy.meta import Preprocess
    from dlperf.deploy.runtime import load_images
    from dlperf.errors import UserError

    with pytest.raises(UserError) as e:
        load_images([tmp_path], Preprocess(size=(8, 8), mean=(0.5,), std=(0.5,), channels=1))
    assert str(e.value) == f"{tmp_path} is a directory (give its image files, e.g. DIR/*.png)"
