"""Break-it round of issue 41 on the figures: each test reproduces a case that failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image


def test_class_names_the_font_cannot_draw_add_no_warnings_to_stderr(tmp_path: Path) -> None:
    """An image folder whose classes are named 猫 and 犬: `dlperf data describe` printed
    matplotlib's missing-glyph UserWarning with its source lines, eight lines of stderr.
    A real process: pytest resets the warning filters a package sets as it is imported."""
    root = tmp_path / "pets"
    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("val", 2)):
        for name in ("猫", "犬"):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 255, (6, 6, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    command = [sys.executable, "-m", "dlperf", "data", "describe", "imagefolder"]
    options = ["--set", f"data.root={root}", "--set", "data.image_size=6", "--per-class", "1"]
    done = subprocess.run(
        [*command, *options, "--out", str(tmp_path / "figures")],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "猫" in done.stdout  # the names stay whole where text can hold them
    assert "Warning" not in done.stderr and "Glyph" not in done.stderr, done.stderr
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == [
        "imagefolder-counts.png",
        "imagefolder-samples.png",
    ]
