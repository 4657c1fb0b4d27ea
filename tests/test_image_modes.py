"""dlperf.image_modes: every PIL mode to 8-bit RGB over the mode's own range (16-bit grey at
65535 = white, float grey at 1.0 = white), values outside that range and modes PIL cannot
convert refused in one line naming the image."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from dlperf import image_modes
from dlperf.errors import UserError
from dlperf.image_modes import WIDE_GREY, rgb


def _pixels(image: Image.Image) -> list[tuple[int, ...]]:
    assert image.mode == "RGB"
    return [tuple(p) for p in np.asarray(image).reshape(-1, 3).tolist()]


def test_8_bit_modes_convert_as_pil_does() -> None:
    grey = Image.fromarray(np.array([[0, 128, 255]], dtype=np.uint8), mode="L")
    assert _pixels(rgb(grey, "g.png")) == [(0, 0, 0), (128, 128, 128), (255, 255, 255)]
    rgba = Image.new("RGBA", (2, 1), (10, 20, 30, 0))  # alpha dropped, colour kept
    assert _pixels(rgb(rgba, "a.png")) == [(10, 20, 30), (10, 20, 30)]


def test_16_bit_grey_spans_the_whole_range_not_clipped_at_255() -> None:
    image = Image.new("I;16", (4, 1))
    image.frombytes(np.array([0, 257, 32768, 65535], dtype="<u2").tobytes())
    # 257 * 255 / 65535 = 1; 32768 * 255 / 65535 = 127.50... -> 128. PIL's own convert
    # would make all but the first white.
    assert _pixels(rgb(image, "deep.png")) == [(0, 0, 0), (1, 1, 1), (128, 128, 128), (255,) * 3]


def test_32_bit_integer_grey_is_read_as_16_bit() -> None:
    image = Image.fromarray(np.array([[0, 65535, 13107]], dtype=np.int32), mode="I")
    # 13107 * 255 / 65535 = 51 exactly
    assert _pixels(rgb(image, "i.tif")) == [(0, 0, 0), (255, 255, 255), (51, 51, 51)]


def test_float_grey_is_read_as_0_to_1() -> None:
    image = Image.fromarray(np.array([[0.0, 0.25, 1.0]], dtype=np.float32), mode="F")
    # 0.25 * 255 = 63.75 -> 64
    assert _pixels(rgb(image, "f.tif")) == [(0, 0, 0), (64, 64, 64), (255, 255, 255)]


@pytest.mark.parametrize(
    ("mode", "values", "said"),
    [
        ("F", [0.0, 2.5], "image mode F holds values 0..2.5, outside the 0..1 dlperf reads it as"),
        ("I", [-3, 7], "image mode I holds values -3..7, outside the 0..65535 dlperf reads it as"),
        ("I", [0, 70000], "image mode I holds values 0..70000, outside the 0..65535 dlperf"),
    ],
)
def test_values_outside_the_modes_range_are_refused_naming_the_image(
    mode: str, values: list[float], said: str
) -> None:
    dtype = np.float32 if mode == "F" else np.int32
    image = Image.fromarray(np.array([values], dtype=dtype), mode=mode)
    with pytest.raises(UserError) as e:
        rgb(image, "scan.tif")
    assert e.value.message.startswith(f"scan.tif: {said}") and "\n" not in str(e.value)
    assert e.value.hint == "save it as 8- or 16-bit RGB or greyscale"


def test_an_empty_wide_image_needs_no_range() -> None:
    assert rgb(Image.new("F", (0, 0)), "empty.tif").size == (0, 0)


def test_a_mode_pil_cannot_convert_is_one_line_naming_the_image_and_mode() -> None:
    with pytest.raises(UserError) as e:
        rgb(Image.new("La", (1, 1)), "odd.png")
    assert e.value.message.startswith("odd.png: cannot decode image mode La (")
    assert e.value.hint == "save it as 8-bit RGB or greyscale"
    assert "\n" not in str(e.value)


def test_every_wide_grey_mode_names_its_white() -> None:
    wide = dict.fromkeys(["I;16", "I;16B", "I;16L", "I;16N", "I"], 65535)
    assert {**wide, "F": 1} == WIDE_GREY


def test_channels_last_is_told_by_its_shape_alone() -> None:
    """One rule and one line for the npz reader and the model checks."""
    said = image_modes.channels_last((16, 16, 3), "x.npz: images")
    assert said is not None and said.message == (
        "x.npz: images of shape (16, 16, 3) look channels-last (N, H, W, C): the model takes "
        "(N, C, H, W)"
    )
    assert image_modes.channels_last((3, 16, 16), "x") is None
    assert image_modes.channels_last((4, 16, 3), "x") is None  # 4 channels first: NCHW


def test_libtiff_is_quieted_once_a_process_not_once_an_image() -> None:
    # It reads /proc/self/maps: once per image would be a read per file of a streamed set.
    image_modes.quiet_libtiff()
    hits = image_modes.quiet_libtiff.cache_info().hits
    image_modes.quiet_libtiff()
    assert image_modes.quiet_libtiff.cache_info().hits == hits + 1
