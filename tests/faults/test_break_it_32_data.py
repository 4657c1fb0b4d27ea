"""Break-it round 32, the user's own data and its memory (fixer C).

C1. The torchvision loader cropped an .npz's non-square images (8x12) to a W x W square: it
    trained on 12x12 images and evaluated on 8x12, exit 0, and with crop_padding 1 failed with
    a traceback. It crops each image's own H x W now, as the tensor loader does.
C2. `detect make-shapes --size N` took about 70 bytes a pixel (float64 noise and its
    temporaries) and checked only the disk: at --size 20000 the kernel killed it at 19 GB, no
    line, empty folders left. The noise is made a block of rows at a time into the image, and
    a --size whose one image cannot be made in the machine's memory is refused before any
    folder is made.
C3. An .npz was read whole with no memory check (about 3 times its images at the peak, as the
    splits are copied out), so one over a third of the machine was killed by the kernel
    without a line, and data.max_memory_gb was ignored: both are now checked on the member's
    header, before it is read, and refused in one line with the GiB and the images that fit.
C4. An image folder of train/, val/ and test/ left val/'s images in no split (test/ is the test
    split, validation data.val_fraction of train/), exit 0, no word: they are said, with
    their count, as a warning of `run` and `data describe`.

Fixer G.

C6. data.image_size on in-memory data (npz, digits, MNIST, CIFAR) stretched a non-square
    image to a square, while an image folder, infer and serve resize it on its shorter side
    and centre-crop it: one picture, two tensors. In memory it is covered and cropped too.
C8. `detect make-shapes` refused on a small disk said "take about 0.0 GiB, and DIR has 0.0 GiB
    free": the sizes are in the unit that shows them (KiB, MiB, GiB).
"""

from __future__ import annotations

import json
import math
import shutil
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from dlperf import formatting
from dlperf.analytic.measure import make_step
from dlperf.config import AugmentConfig, DataConfig, experiment
from dlperf.data import load_data, make_loader, sources
from dlperf.detect import voc
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_29_data import image_folder
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

CPU = torch.device("cpu")


def oblong(tmp_path: Path, n: int = 20) -> Path:
    """An .npz of `n` 3x8x12 images (wider than tall), two classes."""
    path = tmp_path / "oblong.npz"
    images = np.random.default_rng(0).integers(0, 256, (n, 3, 8, 12), dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(n) % 2)
    return path


# --- C1: the torchvision loader's crop of non-square images ------------------------------------


@pytest.mark.parametrize("loader", ["tensor", "torchvision"])
@pytest.mark.parametrize("padding", [1, 2])
def test_non_square_images_are_cropped_to_their_own_shape(
    tmp_path: Path, loader: str, padding: int
) -> None:
    """Before, torchvision: training batches (5, 3, 12, 12) at padding 2, and "ValueError:
    Required crop size (12, 12) is larger than input image size (10, 14)" at padding 1."""
    cfg = DataConfig(name="npz", root=str(oblong(tmp_path)), loader=loader, num_workers=0)
    data = load_data(cfg)
    augment = AugmentConfig(crop_padding=padding, flip=True)
    train = make_loader(data, data.train, cfg, 5, CPU, augment)
    evaluate = make_loader(data, data.test, cfg, 5, CPU)
    assert {tuple(x.shape[1:]) for x, _ in train} == {(3, 8, 12)}
    assert {tuple(x.shape[1:]) for x, _ in evaluate} == {(3, 8, 12)}


# --- C2: make-shapes' memory at a large --size --------------------------------------------------


def test_make_shapes_refuses_a_size_it_cannot_make_in_memory(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: at --size 20000 killed by the kernel at 19 GB (signal 9, no line), empty
    Annotations/ JPEGImages/ ImageSets/ left. Here on a machine said to have 1 GiB (nothing
    is allocated: it is refused first)."""
    monkeypatch.setattr(voc, "machine_memory", lambda: 2**30)
    root = tmp_path / "sh"
    r = cli("detect", "make-shapes", str(root), "--images", "2", "--size", "20000")
    needed = voc.MAKE_BYTES * 20000**2 / 2**30
    fits = math.isqrt(2**30 // voc.MAKE_BYTES)
    one_line(r, 2, f"--size 20000: one image of 20000×20000 takes about {needed:.1f} GiB to "
             "make, more than this machine's 1.0 GiB of memory",
             f"give --size {fits} or less")  # fmt: skip
    assert not root.exists()


def test_make_shapes_noise_takes_memory_in_blocks(tmp_path: Path) -> None:
    """Before: float64 noise and two temporaries of the whole image, 72 bytes a pixel (75 MB
    at 1024 px), traced by numpy; now a block's (6 MB) and the JPEG in memory (1.3 MB)."""
    size = 1024
    tracemalloc.start()
    try:
        voc.make_shapes(tmp_path / "sh", images=2, size=size, seed=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 * size * size, peak


# --- C3: an .npz's memory, and data.max_memory_gb --------------------------------------------


def test_an_npz_that_cannot_be_loaded_in_memory_is_refused_before_it_is_read(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: read whole, then split (about 2.8 times the images at the peak): a 7-20 GB .npz
    on a 23 GiB machine was killed by the kernel mid-load, no line. Here a machine said to have
    16 KiB, and 20 images of 3x8x12 (5,760 bytes, about 17,280 to load and split)."""
    path = oblong(tmp_path)
    monkeypatch.setattr(sources, "machine_memory", lambda: 16 * 2**10)
    read = []
    monkeypatch.setattr(np.lib.npyio.NpzFile, "__getitem__", lambda *a: read.append(a))
    r = cli("data", "describe", "npz", "--set", f"data.root={path}")
    one_line(r, 2, f"{path}: its 20 images (uint8 20 x 3 x 8 x 12) take 5.6 KiB, and about "
             "16.9 KiB as they are loaded and split, more than this machine's 16.0 KiB "
             "of memory", "save at most 18 images in it")  # fmt: skip
    assert read == []  # refused before the images were read


def test_an_npz_over_max_memory_gb_is_refused_unless_in_memory_is_asked_for(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: `data describe npz --set data.max_memory_gb=0.5` of a 0.98 GB file: exit 0, no
    word about the limit. An .npz cannot be streamed: over the limit it is refused."""
    path = oblong(tmp_path)  # 5,760 bytes of images
    root = ("--set", f"data.root={path}")
    r = cli("data", "describe", "npz", *root, "--set", "data.max_memory_gb=0.000005")
    one_line(r, 2, f"{path}: its 20 images take 5.6 KiB in memory, more than "
             "data.max_memory_gb 5e-06: an .npz is held in memory whole, not streamed",
             "set data.max_memory_gb = 5.4e-06 or more, or data.in_memory = true")  # fmt: skip
    cfg = DataConfig(name="npz", root=str(path), max_memory_gb=5e-06)
    for fine in ({"max_memory_gb": 5.4e-06}, {"in_memory": True}):
        assert len(sources.npz(cfg.model_copy(update=fine)).train) == 14


# --- C4: val/ beside test/ ---------------------------------------------------------------------


def test_val_images_beside_a_test_folder_are_said_to_be_unused(cli: Cli, tmp_path: Path) -> None:
    """Before: train/ val/ test/ described as train 3, val 1 (drawn from train/), test 4,
    exit 0, and val/'s 4 images in no split without a word."""
    root = image_folder(tmp_path / "if")  # train/ and val/: 2 classes of 2 images each
    shutil.copytree(root / "val", root / "test")
    sets = ("--set", f"data.root={root}", "--set", "data.image_size=8")
    r = cli("data", "describe", "imagefolder", *sets, "--out", str(tmp_path / "d"), "--json")
    assert r.code == 0, r.err
    said = (
        f"{root / 'val'} holds 4 images that are not used: beside test/, the test split, "
        "validation is data.val_fraction 0.1 of train/ (move them into train/, or remove val/)"
    )
    assert json.loads(r.out)["warnings"] == [said]
    assert f"warning: {said}" in r.err.splitlines(), r.err
    # without test/, val/ is the test split: nothing to say
    shutil.rmtree(root / "test")
    r = cli("data", "describe", "imagefolder", *sets, "--out", str(tmp_path / "d"), "--json")
    assert r.code == 0 and json.loads(r.out)["warnings"] == [], r.err


# --- C6: data.image_size on in-memory non-square images -----------------------------------------


def same_pictures(tmp_path: Path, shape: tuple[int, int]) -> tuple[Path, Path]:
    """The same 4 random pictures of `shape` (H, W), one class each, as an .npz and as an
    image folder (train/ and val/ hold them all)."""
    images = np.random.default_rng(6).integers(0, 256, (4, 3, *shape), dtype=np.uint8)
    npz = tmp_path / "pictures.npz"
    np.savez(npz, images=images, labels=np.arange(4))
    folder = tmp_path / "pictures"
    for split in ("train", "val"):
        for label, image in enumerate(images):
            (folder / split / str(label)).mkdir(parents=True)
            Image.fromarray(image.transpose(1, 2, 0)).save(folder / split / str(label) / "0.png")
    return npz, folder


def by_label(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return images[labels.argsort()].float()


@pytest.mark.parametrize("shape", [(16, 24), (24, 16), (10, 7)])
def test_an_npz_resizes_non_square_images_as_an_image_folder_does(
    tmp_path: Path, shape: tuple[int, int]
) -> None:
    """Before: 16x24 pictures at data.image_size 8, the .npz's squashed to 8x8 (281-372 apart
    on 0..255 from the folder's), the folder's resized to 8x12 and centre-cropped."""
    npz, folder = same_pictures(tmp_path, shape)
    splits = {"val_fraction": 0.0, "image_size": 8}
    a = load_data(DataConfig(name="npz", root=str(npz), test_fraction=0, **splits)).train
    b = load_data(DataConfig(name="imagefolder", root=str(folder), **splits)).train
    assert a.images is not None and b.images is not None
    from_npz, from_folder = by_label(a.images, a.labels), by_label(b.images, b.labels)
    assert from_npz.shape == from_folder.shape == (4, 3, 8, 8)
    # torch's antialiased bilinear and Pillow's round apart by at most 1 of 255
    assert (from_npz - from_folder).abs().max() <= 1


def test_square_in_memory_images_are_resized_as_before(tmp_path: Path) -> None:
    """Square images take no crop: the whole image resized, exactly as before the fix."""
    images = np.random.default_rng(7).integers(0, 256, (4, 3, 12, 12), dtype=np.uint8)
    np.savez(tmp_path / "sq.npz", images=images, labels=np.arange(4))  # one class each
    cfg = DataConfig(name="npz", root=str(tmp_path / "sq.npz"), test_fraction=0, image_size=8)
    split = load_data(cfg.model_copy(update={"val_fraction": 0.0})).train
    assert split.images is not None
    before = torch.nn.functional.interpolate(
        torch.from_numpy(images).float(), size=(8, 8), mode="bilinear", antialias=True
    )
    expected = before.round().clamp(0, 255).to(torch.uint8)
    assert torch.equal(split.images[split.labels.argsort()], expected)


# --- C8: make-shapes' room in a unit that shows it ------------------------------------------


def test_make_shapes_on_a_small_disk_says_the_sizes_in_a_unit_that_shows_them(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "400 images of 96×96 take about 0.0 GiB, and DIR has 0.0 GiB free" (a 2 MiB
    tmpfs): the refusal said neither its need nor its room."""
    usage = shutil.disk_usage(tmp_path)._replace(free=2 * 2**20)
    monkeypatch.setattr(voc.shutil, "disk_usage", lambda _: usage)
    r = cli("detect", "make-shapes", str(tmp_path / "sh"), "--images", "400", "--size", "96")
    fits = 2 * 2**20 // voc.image_bytes(96)
    one_line(r, 2, f"400 images of 96×96 take about 6.6 MiB, and {tmp_path} has 2.0 MiB "
             f"free: about {fits} fit", f"give --images {fits} or fewer, or a folder on a disk "
             "with room")  # fmt: skip


@pytest.mark.parametrize(
    ("size", "said"),
    [(0, "0 bytes"), (1023, "1,023 bytes"), (2**10, "1.0 KiB"), (6_963_200, "6.6 MiB"),
     (3 * 2**30, "3.0 GiB"), (2**50, "1,024.0 TiB")],
)  # fmt: skip
def test_binary_size_picks_the_unit_that_shows_a_size(size: int, said: str) -> None:
    assert formatting.binary_size(size) == said


# --- review of round 32 (F1-F3): make-shapes' JPEG limit; the npz's limit and dtype ------------


def test_make_shapes_refuses_a_size_over_jpegs_limit_at_once(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review F1: on a machine with memory for it (128 GiB here), --size 65501 made the whole
    noise image (minutes) before libjpeg's limit failed as "broken data stream"."""
    monkeypatch.setattr(voc, "machine_memory", lambda: 2**37)
    monkeypatch.setattr(voc, "_check_room", lambda *a: None)
    monkeypatch.setattr(voc, "_noisy", lambda *a: pytest.fail("the image was made"))
    root = tmp_path / "sh"
    r = cli("detect", "make-shapes", str(root), "--images", "2", "--size", "65501")
    one_line(r, 2, "--size 65501: a JPEG holds at most 65,500 pixels a side",
             "give --size 65500 or less")  # fmt: skip
    assert not root.exists()


def test_an_npz_over_the_default_max_memory_gb_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review F2: the default data.max_memory_gb (4), a streaming threshold nobody chose,
    refused every .npz over 4 GiB, also a stored run's (resumed, a teacher, a sweep worker's:
    read back whole, every field counts as set). Here the default is made 5e-06 GiB, under the
    5.4e-06 GiB of images."""
    path = oblong(tmp_path)
    monkeypatch.setattr(sources, "machine_memory", lambda: 2**40)
    monkeypatch.setattr(DataConfig.model_fields["max_memory_gb"], "default", 5e-06)
    fresh = DataConfig.model_construct({"name", "root"}, name="npz", root=str(path),
                                       max_memory_gb=5e-06)  # fmt: skip
    stored = DataConfig.model_validate({**DataConfig().model_dump(), **fresh.model_dump()})
    assert "max_memory_gb" in stored.model_fields_set
    for cfg in (fresh, stored):
        assert len(sources.npz(cfg).train) == 14


def test_a_float_npz_is_told_to_be_uint8_before_its_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review F3: 20 float64 images were refused for 4.3e-05 GiB, over data.max_memory_gb
    2e-05; raised, then told to save uint8, at which they took 5.4e-06 GiB, under it."""
    path = tmp_path / "f.npz"
    np.savez(path, images=np.zeros((20, 3, 8, 12)), labels=np.arange(20) % 2)
    said = (f"{path}: 'images' is float64 of shape (20, 3, 8, 12), 45.0 KiB: dlperf wants "
            "uint8 N,C,H,W, pixels 0..255 (5.6 KiB)")  # fmt: skip
    fix = "save the images as uint8 (pixels 0..255)"
    for limit, memory in ((2e-05, 2**40), (None, 16 * 2**10)):
        monkeypatch.setattr(sources, "machine_memory", lambda m=memory: m)
        with pytest.raises(UserError) as e:
            sources.read_npz(path, max_memory_gb=limit)
        assert (e.value.message, e.value.hint) == (said, fix)


# --- review 4 of round 32 (F2): one size formatter for the memory refusals ---------------------


def test_an_npz_refused_for_max_memory_gb_says_its_size_as_resize_does(
    cli: Cli, tmp_path: Path
) -> None:
    """Review F2: of one setting, the .npz's refusal said "5.4e-06 GiB" and the resize's
    "240.0 KiB": both say the size in the unit that shows it. The limit to give stays in GiB,
    data.max_memory_gb's own unit."""
    path = oblong(tmp_path)  # 5,760 bytes of images
    limit = ("--set", f"data.root={path}", "--set", "data.max_memory_gb=0")
    r = cli("data", "describe", "npz", *limit)
    one_line(r, 2, f"{path}: its 20 images take 5.6 KiB in memory, more than "
             "data.max_memory_gb 0: an .npz is held in memory whole, not streamed",
             "set data.max_memory_gb = 5.4e-06 or more, or data.in_memory = true")  # fmt: skip
    resized = ("--set", "data.in_memory=true", "--set", "data.image_size=64")
    r = cli("data", "describe", "npz", *limit, *resized)
    one_line(r, 2, "data.image_size 64: npz at 64x64 takes 240.0 KiB, more than "
             "data.max_memory_gb 0", "set a smaller data.image_size or a larger "
             "data.max_memory_gb")  # fmt: skip


def test_memory_refusals_on_a_small_machine_say_sizes_that_show(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review F2: the synthetic set's and an image folder's refusals formatted GiB by hand:
    "0.0 GiB" of a small need on a small machine. One formatter, `binary_size`, says every
    size (the .npz's, in scientific notation, "4.3e-05 GiB", too: tests above)."""
    synthetic = DataConfig(name="synthetic", shape=[3, 8, 8], size=104)  # 130 images, 26,000 B
    monkeypatch.setattr(experiment, "machine_memory", lambda: 16 * 2**10)
    with pytest.raises(ValueError, match=r"take 25\.4 KiB, more than this machine's 16\.0 KiB "):
        experiment._synthetic_fits(synthetic)
    monkeypatch.setattr(sources, "machine_memory", lambda: 16 * 2**10)
    with pytest.raises(sources.TooLargeToDecode) as e:
        sources._decodable(4, 64, in_memory=False)
    assert e.value.said == "one image decoded at 64x64 takes 44.0 KiB, more than this " \
        "machine's 16.0 KiB of memory"  # fmt: skip


def test_an_input_batch_that_cannot_be_allocated_says_its_size_that_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review F2: `make_step`'s refusal divided by 2**30 by hand: a batch of 1x3x64x64 that
    a nearly full device could not hold said "(0.0 GiB)"."""

    def no_memory(*args: object, **kwargs: object) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(torch, "randn", no_memory)
    with pytest.raises(UserError) as e:
        make_step(nn.ReLU(), [3, 64, 64], 1, False, "fp32", CPU)
    assert e.value.message == "an input batch of 1x3x64x64 (48.0 KiB) does not fit in cpu memory"
