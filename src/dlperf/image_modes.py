"""Image modes to 8-bit RGB over each mode's own range, and the resize and centre crop, shared
by the training readers of image files (`dlperf.data.sources`) and by inference (`dlperf infer`,
`dlperf serve`), so that an exported model sees an image as training saw it. Imports neither
torch nor torchvision.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
from collections.abc import Sequence

import numpy as np
from PIL import Image

from dlperf.errors import UserError

# Grey modes whose samples are wider than 8 bits, and the sample value that means white.
# PIL's own convert("RGB") clips them at 255, so a 16-bit PNG came out almost white. "I" (32-bit
# integers, how PIL holds 16-bit samples some files store) and "F" (32-bit floats) carry no
# range of their own: they are read as 16-bit and as 0..1, and refused when outside it.
WIDE_GREY = {"I;16": 65535, "I;16B": 65535, "I;16L": 65535, "I;16N": 65535, "I": 65535, "F": 1}


def rgb(image: Image.Image, source: str) -> Image.Image:
    """`image` (a PIL image of any mode) as 8-bit RGB, each mode's full range at 0..255;
    alpha is dropped, as torchvision's folder loader drops it. `source` names the image in
    the error of a mode that cannot be read."""
    white = WIDE_GREY.get(image.mode)
    if white is None:
        try:
            if image.mode == "P" and "transparency" in image.info:
                # Through RGBA, to the same colours: Pillow's direct convert("RGB") of a palette
                # with transparency in bytes printed a 2-line UserWarning wherever it decoded.
                image = image.convert("RGBA")
            return image.convert("RGB")
        except ValueError as e:  # a mode PIL opens but cannot convert ("La")
            raise UserError(
                f"{source}: cannot decode image mode {image.mode} ({e})",
                "save it as 8-bit RGB or greyscale",
            ) from None
    samples = np.asarray(image, dtype=np.float64)
    if samples.size and not (samples.min() >= 0 and samples.max() <= white):
        raise UserError(
            f"{source}: image mode {image.mode} holds values {samples.min():g}..{samples.max():g}, "
            f"outside the 0..{white:g} dlperf reads it as",
            "save it as 8- or 16-bit RGB or greyscale",
        )
    grey = np.rint(samples * (255 / white)).astype(np.uint8)
    return Image.fromarray(grey).convert("RGB")


# How many times the crop, along its long side, the whole resize of an image may be before
# only the region the crop keeps is resampled (`covered`): a 1 x 1,000,000 PNG of 1 KB,
# resized whole to 32 x 32,000,000, took 4 GB. Below it every image decodes as it always has.
THIN = 16


def covering(size: tuple[int, int], height: int, width: int) -> tuple[int, int, int, int]:
    """(new_w, new_h, top, left): the size an image of `size` (w, h) is resized to so that
    it covers (height, width), and the offset of the centre crop in it, with torchvision's
    rounding (see `covered`)."""
    w, h = size
    if width * h >= height * w:  # the width binds (w <= h for a square target)
        new_w, new_h = width, max(height, int(width * h / w))
    else:
        new_w, new_h = max(width, int(height * w / h)), height
    top, left = round((new_h - height) / 2.0), round((new_w - width) / 2.0)  # an int, ties even
    return new_w, new_h, top, left


def thin(size: tuple[int, int], height: int, width: int) -> bool:
    """Whether covering (height, width) with an image of `size` makes more than THIN times the
    crop along its long side: resampled through the crop's region only (`covered`)."""
    new_w, new_h, _, _ = covering(size, height, width)
    return new_w > THIN * width or new_h > THIN * height


def covered(image: Image.Image, height: int, width: int) -> Image.Image:
    """`image` resized (bilinear, antialiased: Pillow's) so that it covers (height, width),
    then centre-cropped to it, with torchvision's rounding, so that a file gives the very
    pixels training's reader (`dlperf.data.sources.decode_file`: `resize(image, side)`, then
    `center_crop(image, [side, side])`) gives. Reproduced here without torch, from
    torchvision.transforms.functional._compute_resized_output_size (the short side to the
    size, the long one to int(size * long / short): rounded down; a tie, w <= h, binds the
    width) and transforms.v2.functional._center_crop_compute_crop_anchor (the offset
    int(round((resized - size) / 2.0)): half to even). A non-square (height, width) is covered
    by the same rules: the side whose scale is the larger binds, the other rounds down.

    A `thin` image is not resized whole: Pillow resamples only the source region under the
    crop (its resize `box`, the filter's support reaching the source pixels around it): the
    largest image made is the crop's width by the source rows under it, not the whole
    resize. Its pixels are the whole resize's but for the float rounding of the box (at most
    1 of 255 apart)."""
    new_w, new_h, top, left = covering(image.size, height, width)
    if thin(image.size, height, width):
        scale_x, scale_y = image.width / new_w, image.height / new_h
        box = (left * scale_x, top * scale_y, (left + width) * scale_x, (top + height) * scale_y)
        return image.resize((width, height), Image.Resampling.BILINEAR, box=box)
    if (new_w, new_h) != image.size:  # torchvision returns the image itself at its own size
        image = image.resize((new_w, new_h), Image.Resampling.BILINEAR)
    if (top, left, new_h, new_w) == (0, 0, height, width):
        return image
    return image.crop((left, top, left + width, top + height))


def channels_last(shape: Sequence[int], named: str) -> UserError | None:
    """Why images of `shape` (C, H, W) look stored channels-last (N, H, W, C), read as C = H
    and W = C: 1, 3 or 4 channels in the last place and more in the first; None otherwise.
    `named` begins the line ("digits images", "x.npz: images"). The npz reader says it before
    any model is built (a model taking as many channels as H, resnet20's 16, trained on them
    without a word); the model checks say it of any data set whose images a model rejects."""
    c, _, w = shape
    if w in (1, 3, 4) and c > 4:
        return UserError(
            f"{named} of shape {tuple(shape)} look channels-last (N, H, W, C): the model takes "
            "(N, C, H, W)",
            "store them so: images = np.transpose(images, (0, 3, 1, 2))",
        )
    return None


@functools.cache  # once a process: /proc/self/maps is read, not once per image
def quiet_libtiff() -> None:
    """Turn off the error and warning lines the libtiff that Pillow decodes TIFFs with writes
    to fd 2 itself ("tempfile.tif: Using code not yet in table.", naming a file that is not
    the user's), past sys.stderr: a damaged TIFF's failure is the readers' one line
    (`data.sources.opened_image`, `deploy.runtime.decode`).

    The library's own switch (a NULL handler), set once a process before its first decode: a
    store of one global pointer, never undone, so safe with threads, and nothing of dlperf's
    own on fd 2 is lost (a redirect of fd 2 around each decode would lose other threads'
    lines). Pillow sets the warning handler so at each TIFF decode. Only the copy already
    loaded (RTLD_NOLOAD), found in /proc/self/maps: elsewhere libtiff's lines stay."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split(maxsplit=5)[-1].strip() for line in maps if "libtiff" in line}
    except OSError:
        return
    for path in sorted(p for p in paths if re.search(r"/libtiff[^/]*\.so", p)):
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            for name in ("TIFFSetErrorHandler", "TIFFSetWarningHandler"):
                setter = getattr(lib, name)
                setter.restype = None  # the old handler is not kept
                setter.argtypes = [ctypes.c_void_p]
                setter(None)
        except (OSError, AttributeError):  # not loaded, or not libtiff's API: left as it is
            continue
