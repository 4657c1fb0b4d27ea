"""Output paths, checked before the work that fills them."""

from __future__ import annotations

from pathlib import Path


def check_writable(path: Path) -> Path:
    """Create `path`'s directory and make sure `path` itself can be written, so an unusable
    output fails at once (main() prints the OSError in one line) rather than after minutes
    of work. Leaves no empty file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    with open(path, "ab"):
        pass
    if not existed:
        path.unlink()
    return path
