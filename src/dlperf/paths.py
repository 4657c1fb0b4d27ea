"""Output paths, checked before the work that fills them."""

from __future__ import annotations

from pathlib import Path


def check_writable(path: Path, make_parents: bool = False) -> Path:
    """Make sure `path` can be written, so an unusable output fails at once (main() prints
    the OSError in one line) rather than after minutes of work. Leaves no empty file behind.
    A missing directory is refused (a typo in it would otherwise create a tree at the root)
    unless `make_parents`, for dlperf's own directories."""
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    with open(path, "ab"):
        pass
    if not existed:
        path.unlink()
    return path
