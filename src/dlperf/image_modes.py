"""Image modes to 8-bit RGB over each mode's own range, shared by the training readers of image
files (`dlperf.data.sources`) and by inference (`dlperf infer`, `dlperf serve`), so that an
exported model sees an image as training saw it. Imports neither torch nor torchvision.
"""

from __future__ import annotations

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
