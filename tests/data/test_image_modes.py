"""An image folder decodes every mode PIL opens to 3 channels of 0..255 spanning the mode's own
range: each file is written here with PIL in its real format, and the expected pixels are
worked out from the samples written, not by PIL's conversions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.data.sources import decode_file
from dlperf.errors import UserError

torch.set_num_threads(1)

SIDE = 6  # files are written at the decoded size: no resampling between file and reference
RNG = np.random.default_rng(41)
Written = tuple[Path, np.ndarray]  # a file and its expected H,W,3 uint8 pixels


def grey(values: np.ndarray) -> np.ndarray:
    return np.repeat(values[..., None], 3, axis=-1).astype(np.uint8)


def rgb(path: Path) -> Written:
    a = RNG.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
    Image.fromarray(a, "RGB").save(path.with_suffix(".png"))
    return path.with_suffix(".png"), a


def luminance(path: Path) -> Written:
    a = RNG.integers(0, 256, (SIDE, SIDE), dtype=np.uint8)
    Image.fromarray(a, "L").save(path.with_suffix(".png"))
    return path.with_suffix(".png"), grey(a)


def bilevel(path: Path) -> Written:
    a = RNG.integers(0, 2, (SIDE, SIDE)).astype(bool)
    Image.fromarray(a).save(path.with_suffix(".png"))
    return path.with_suffix(".png"), grey(a * 255)


def rgba(path: Path) -> Written:
    # alpha is dropped (as torchvision's folder loader drops it): the colour samples stay
    a = RNG.integers(0, 256, (SIDE, SIDE, 4), dtype=np.uint8)
    Image.fromarray(a, "RGBA").save(path.with_suffix(".png"))
    return path.with_suffix(".png"), a[..., :3]


def grey_alpha(path: Path) -> Written:
    a = RNG.integers(0, 256, (SIDE, SIDE, 2), dtype=np.uint8)
    Image.fromarray(a, "LA").save(path.with_suffix(".png"))
    return path.with_suffix(".png"), grey(a[..., 0])


def cmyk(path: Path) -> Written:
    a = RNG.integers(0, 256, (SIDE, SIDE, 4), dtype=np.uint8)
    Image.frombytes("CMYK", (SIDE, SIDE), a.tobytes()).save(path.with_suffix(".tif"))
    ink = a.astype(float) / 255
    expected = 255 * (1 - ink[..., :3]) * (1 - ink[..., 3:])
    return path.with_suffix(".tif"), np.rint(expected).astype(np.uint8)


def palette(path: Path) -> Written:
    colours = RNG.integers(0, 256, (16, 3), dtype=np.uint8)
    index = RNG.integers(0, 16, (SIDE, SIDE), dtype=np.uint8)
    image = Image.fromarray(index, "P")
    image.putpalette(colours.tobytes())
    image.save(path.with_suffix(".png"))
    return path.with_suffix(".png"), colours[index]


def sixteen_bit(path: Path) -> Written:
    # the full 16-bit range, white included: 65535 is 255, 257 is 1
    a = np.array([0, 65535, 257, 32896, 1000, 60000], dtype=np.uint16)
    a = np.resize(np.concatenate([a, RNG.integers(0, 65536, SIDE * SIDE, dtype=np.uint16)]), 36)
    a = a.reshape(SIDE, SIDE)
    Image.fromarray(a).save(path.with_suffix(".png"))  # PIL writes a 16-bit grey PNG
    return path.with_suffix(".png"), grey(np.rint(a / 257))


def sixteen_bit_big_endian(path: Path) -> Written:
    a = RNG.integers(0, 65536, (SIDE, SIDE), dtype=np.uint16)
    big_endian = a.astype(">u2").tobytes()
    Image.frombytes("I;16B", (SIDE, SIDE), big_endian).save(path.with_suffix(".tif"))
    return path.with_suffix(".tif"), grey(np.rint(a / 257))


def int32(path: Path) -> Written:
    a = RNG.integers(0, 65536, (SIDE, SIDE)).astype(np.int32)
    Image.fromarray(a, "I").save(path.with_suffix(".tif"))
    return path.with_suffix(".tif"), grey(np.rint(a / 257))


def float32(path: Path) -> Written:
    a = RNG.random((SIDE, SIDE), dtype=np.float32)
    a[0, :2] = 0, 1
    Image.fromarray(a, "F").save(path.with_suffix(".tif"))
    return path.with_suffix(".tif"), grey(np.rint(a.astype(np.float64) * 255))


WRITERS: dict[str, Callable[[Path], Written]] = {
    "RGB": rgb,
    "L": luminance,
    "1": bilevel,
    "RGBA": rgba,
    "LA": grey_alpha,
    "CMYK": cmyk,
    "P": palette,
    "I;16": sixteen_bit,
    "I;16B": sixteen_bit_big_endian,
    "I": int32,
    "F": float32,
}


@pytest.mark.parametrize("mode", WRITERS)
def test_each_mode_decodes_to_its_pixels(tmp_path: Path, mode: str) -> None:
    path, expected = WRITERS[mode](tmp_path / "image")
    with Image.open(path) as image:
        assert image.mode == mode  # the file really holds the mode under test
    decoded = decode_file(str(path), SIDE)
    assert decoded.dtype == torch.uint8 and decoded.shape == (3, SIDE, SIDE)
    np.testing.assert_array_equal(decoded.permute(1, 2, 0).numpy(), expected)


def test_sixteen_bit_resizes_as_its_eight_bit_twin(tmp_path: Path) -> None:
    """Resampled to another size, a 16-bit file decodes as the same picture in 8 bits."""
    eight = RNG.integers(0, 256, (24, 32), dtype=np.uint8)
    Image.fromarray(eight.astype(np.uint16) * 257).save(tmp_path / "deep.png")
    Image.fromarray(eight, "L").save(tmp_path / "flat.png")
    deep, flat = (decode_file(str(tmp_path / f), 10) for f in ("deep.png", "flat.png"))
    assert deep.shape == (3, 10, 10)
    assert torch.equal(deep, flat)


@pytest.mark.parametrize("in_memory", [True, False])
def test_an_image_folder_of_mixed_modes(tmp_path: Path, in_memory: bool) -> None:
    """Through the loader: the test split (root/val, in file order) holds what was written."""
    expected = []
    for split in ("train", "val"):
        for i, mode in enumerate(WRITERS):
            folder = tmp_path / split / f"class{i % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            path, pixels = WRITERS[mode](folder / f"{i:02d}")
            if split == "val":
                expected.append((f"class{i % 2}", path.name, pixels))
    cfg = DataConfig(
        name="imagefolder", root=str(tmp_path), image_size=SIDE, in_memory=in_memory, num_workers=0
    )
    data = load_data(cfg)
    assert data.shape == (3, SIDE, SIDE)
    expected.sort(key=lambda e: e[:2])  # ImageFolder's order: class, then file name
    if in_memory:
        assert data.test.images is not None
        images = data.test.images
    else:
        assert [Path(f).name for f in data.test.files] == [name for _, name, _ in expected]
        images = torch.stack([decode_file(f, SIDE) for f in data.test.files])
    for image, (_, name, pixels) in zip(images, expected, strict=True):
        np.testing.assert_array_equal(image.permute(1, 2, 0).numpy(), pixels, err_msg=name)


@pytest.mark.parametrize(
    ("mode", "values", "message"),
    [
        ("F", [-0.5, 0.5], "image mode F holds values -0.5..0.5, outside the 0..1"),
        ("F", [0.0, 255.0], "image mode F holds values 0..255, outside the 0..1"),
        ("I", [0, 70000], "image mode I holds values 0..70000, outside the 0..65535"),
    ],
)
def test_a_mode_without_a_readable_range_is_one_line(
    tmp_path: Path, mode: str, values: list[float], message: str
) -> None:
    dtype = np.float32 if mode == "F" else np.int32
    path = tmp_path / "odd.tif"
    Image.fromarray(np.resize(np.array(values, dtype=dtype), (SIDE, SIDE)), mode).save(path)
    with pytest.raises(UserError) as caught:
        decode_file(str(path), SIDE)
    assert str(caught.value) == (
        f"{path}: {message} dlperf reads it as (save it as 8- or 16-bit RGB or greyscale)"
    )


def test_a_mode_pil_cannot_convert_is_one_line(tmp_path: Path) -> None:
    """A grey TIFF with premultiplied alpha opens as mode La, which PIL cannot convert."""
    Image.fromarray(np.full((SIDE, SIDE, 2), 100, np.uint8), "LA").save(tmp_path / "la.tif")
    # PIL writes the alpha as unassociated (ExtraSamples = 2); the TIFF tag entry set to 1
    # (tag 338, type SHORT, count 1) makes it premultiplied, as other software writes it
    unassociated = b"\x52\x01\x03\x00\x01\x00\x00\x00\x02\x00"
    data = (tmp_path / "la.tif").read_bytes()
    assert data.count(unassociated) == 1
    path = tmp_path / "premultiplied.tif"
    path.write_bytes(data.replace(unassociated, unassociated[:-2] + b"\x01\x00"))
    with pytest.raises(UserError) as caught:
        decode_file(str(path), SIDE)
    assert str(caught.value) == (
        f"{path}: cannot decode image mode La (conversion from La to L not supported) "
        "(save it as 8-bit RGB or greyscale)"
    )
