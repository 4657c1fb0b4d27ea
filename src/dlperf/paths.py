"""Output paths, checked before the work that fills them."""

from __future__ import annotations

from pathlib import Path


def check_writable(path: Path, make_parents: bool = True) -> Path:
    """Make sure `path` can be written (creating its directory unless told not to), so an
    unusable output fails at once (main() prints the OSError in one line) rather than after
    minutes of work. Leaves no empty file behind."""
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    with open(path, "ab"):
        pass
    if not existed:
        path.unlink()
    return path
