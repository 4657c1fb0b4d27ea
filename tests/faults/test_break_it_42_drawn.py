"""Break-it round 42, T2's C1: `detect run --out` enlarged an image by a whole factor until
its shorter side was 480 px, however long that made the other: a 20000 x 1 PNG (87 bytes)
became 9,600,000 x 480 px and the OOM killer ended dlperf at 23 GB (under `ulimit -v`, a
MemoryError blamed on the limit); a 2000 x 1 image took 3.9 GB, exit 0, and wrote a PNG
960,000 px wide. Now the enlargement stops where the longer side would pass
`ssd.MAX_DRAWN_SIDE` (4096 px): a thin image is drawn at its own size, or as far as that
allows; a small square one is enlarged as before.
"""

from __future__ import annotations

import pytest
from PIL import Image

from dlperf.detect import ssd


@pytest.mark.parametrize(
    ("size", "scale"),
    [((96, 96), 5), ((20000, 1), 1), ((2000, 1), 2), ((3000, 2), 1), ((1, 4096), 1), ((4, 4), 120)],
)
def test_the_enlargement_stops_at_the_longer_sides_cap(size: tuple[int, int], scale: int) -> None:
    assert ssd.drawn_scale(size) == scale  # was 480 for (20000, 1), 240 for (3000, 2)


def test_a_thin_image_is_drawn_at_a_size_its_memory_allows() -> None:
    drawn = ssd.draw(Image.new("RGB", (20000, 1)), [])
    assert drawn.width == 20000  # was 9,600,000 (and 23 GB)
    assert max(ssd.draw(Image.new("RGB", (2000, 1)), []).size) <= ssd.MAX_DRAWN_SIDE
