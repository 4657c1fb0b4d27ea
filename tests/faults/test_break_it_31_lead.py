"""What the thirty-first break-it round found that the lead fixed, reproduced first:

- `detect make-shapes` under a file size limit (or on a full disk) wrote cut JPEGs, said
  "wrote N images" and exited 0: Pillow's JPEG encoder writes to the raw descriptor and takes
  a short write for success (P4 C3).
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from tests.faults.test_break_it_16_outputs import LIMIT_HINT, _dlperf, _last_line


def test_make_shapes_under_a_file_size_limit_says_so_and_leaves_no_cut_image(
    tmp_path: Path,
) -> None:
    """Before: 'wrote 5 images ...', exit 0, every JPEG cut at the limit (8 KiB of ~16)."""
    result = _dlperf(
        tmp_path, "detect", "make-shapes", "shapes", "--images", "5", "--size", "160",
        file_cap=8192,
    )  # fmt: skip
    assert result.code == 1, result.err
    assert _last_line(result).endswith(LIMIT_HINT), result.err
    for jpeg in (tmp_path / "shapes").rglob("*.jpg"):
        Image.open(jpeg).load()  # no cut image under a .jpg name
