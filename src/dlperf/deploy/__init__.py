"""Export to ONNX, inference with ONNX Runtime, and the HTTP inference server."""

from __future__ import annotations

from pathlib import Path


def check_out(out: Path) -> None:
    """Refuse, in one line, an ONNX file `out` that export could not write (a FIFO, a
    directory, a missing folder, a name that is not UTF-8). Here, not in .export, which
    imports torch: `dlperf export` checks it before that import and the model's load, after
    which (20 s on a busy machine) a typo'd --out was refused."""
    from dlperf.config.base import check_utf8_name
    from dlperf.paths import check_writable

    check_utf8_name("--out", out)  # both exporters write its name into the model, as UTF-8
    check_writable(out)
