"""Break-it round 37, the user's data (docs/faults.md, the thirty-seventh round).

C5: whole idx files written by hand of another kind were told a fix that does not work. A
file of float32 pixels 0..1 whose size matches its header was told "replace it with a whole
copy of the file" (a copy is as float as the file); it is told to write it as uint8 (type
byte 0x08) and how. Images and labels files swapped were told to write the images file "as
3-D idx data": the pair is looked at first, and the two files' names said to be swapped,
with the `mv`s that swap them back.
"""

from __future__ import annotations

import shlex
import struct
from pathlib import Path

import numpy as np
import pytest

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.errors import UserError
from tests.faults.test_break_it_21_data import TRAIN_IMAGES, TRAIN_LABELS, idx_bytes, write_mnist

PIXELS = np.arange(60 * 28 * 28).reshape(60, 28, 28) % 256  # 0..255, each value there


def typed_idx(values: np.ndarray, kind: int, dtype: str) -> bytes:
    """A whole idx file of `values` as value type `kind` (the magic's third byte), `dtype`."""
    head = struct.pack(">I", kind << 8 | values.ndim) + np.array(values.shape, ">i4").tobytes()
    return head + values.astype(dtype).tobytes()


def refused(tmp_path: Path) -> UserError:
    with pytest.raises(UserError) as caught:
        load_data(DataConfig(name="mnist", root=str(tmp_path)))
    return caught.value


@pytest.mark.parametrize(
    ("name", "data", "said", "expr"),
    [
        (
            TRAIN_IMAGES,
            typed_idx(PIXELS / 255, 0x0D, ">f4"),
            "float32 values 0..1",
            "(images * 255).round().astype(numpy.uint8)",
        ),
        (TRAIN_IMAGES, typed_idx(PIXELS, 0x0E, ">f8"), "float64 values 0..255", None),
        (TRAIN_LABELS, typed_idx(np.arange(60) % 10, 0x0C, ">i4"), "int32 values 0..9", None),
    ],
)
def test_c5_a_whole_idx_file_of_another_value_type_is_told_to_be_written_as_uint8(
    tmp_path: Path, name: str, data: bytes, said: str, expr: str | None
) -> None:
    raw = write_mnist(tmp_path, **{name: data})
    array, dims = ("images", 3) if "images" in name else ("labels", 1)
    expr = expr or f"{array}{'.round()' if 'float' in said else ''}.astype(numpy.uint8)"
    error = refused(tmp_path)
    assert error.message == (
        f"data.root '{tmp_path}' has no readable MNIST idx files: {raw / name} holds {said}, "
        "not uint8"
    )
    assert error.hint == (
        "write it as uint8 idx data, type byte 0x08: "
        f"numpy.array([0x080{dims}, *{array}.shape], '>i4').tobytes() + {expr}.tobytes()"
    )


def test_c5_whole_normalised_pixels_are_told_to_be_scaled_first(tmp_path: Path) -> None:
    """Pixels normalised by a mean and deviation: no one expression restores 0..255."""
    raw = write_mnist(tmp_path, **{TRAIN_IMAGES: typed_idx(PIXELS / 255 - 0.5, 0x0D, ">f4")})
    error = refused(tmp_path)
    assert error.message.endswith(f"{raw / TRAIN_IMAGES} holds float32 values -0.5..0.5, not uint8")
    assert error.hint == (
        "scale the pixels to 0..255, undoing any normalisation, then write them as uint8 idx "
        "data, type byte 0x08"
    )


def test_c5_a_cut_short_file_of_another_value_type_is_still_told_to_be_replaced(
    tmp_path: Path,
) -> None:
    raw = write_mnist(tmp_path, **{TRAIN_IMAGES: typed_idx(PIXELS / 255, 0x0D, ">f4")[:-1]})
    error = refused(tmp_path)
    assert error.message.endswith(f"{raw / TRAIN_IMAGES} holds float32 values, not uint8")
    assert error.hint == "replace it with a whole copy of the file"


def test_c5_images_and_labels_files_swapped_are_said_so(tmp_path: Path) -> None:
    images, labels = idx_bytes(PIXELS), idx_bytes(np.arange(60) % 10)
    raw = write_mnist(tmp_path, **{TRAIN_IMAGES: labels, TRAIN_LABELS: images})
    error = refused(tmp_path)
    at_images, at_labels = raw / TRAIN_IMAGES, raw / TRAIN_LABELS
    assert error.message == (
        f"data.root '{tmp_path}' has no readable MNIST idx files: {at_images} holds 1-D data "
        f"(60) and {at_labels} 3-D data (60 x 28 x 28): the two files' names are swapped"
    )
    i, lab, tmp = (shlex.quote(str(p)) for p in (at_images, at_labels, f"{at_images}.swap"))
    assert error.hint == f"swap them back: mv {i} {tmp} && mv {lab} {i} && mv {tmp} {lab}"
    # the fix said works
    at_images.rename(f"{at_images}.swap")
    at_labels.rename(at_images)
    Path(f"{at_images}.swap").rename(at_labels)
    assert len(load_data(DataConfig(name="mnist", root=str(tmp_path))).test.labels) == 20


def test_c5_a_labels_file_in_place_of_the_images_is_not_called_a_swap(tmp_path: Path) -> None:
    """Both files 1-D: the images file is not there, and its own line says what it holds."""
    raw = write_mnist(tmp_path, **{TRAIN_IMAGES: idx_bytes(np.arange(60) % 10)})
    error = refused(tmp_path)
    assert error.message.endswith(
        f"{raw / TRAIN_IMAGES} holds 1-D data (60), not 3-D (images N x H x W)"
    )
    assert error.hint == "write it as 3-D idx data, images N x H x W"
