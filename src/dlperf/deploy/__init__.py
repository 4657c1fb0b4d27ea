"""Export to ONNX, inference with ONNX Runtime, and the HTTP inference server."""

from __future__ import annotations

import os
from pathlib import Path

# ONNX Runtime's telemetry off, unless the user set the variable: read once, as the library
# loads, so here, before any module of this package imports it (served_model, runtime). Left
# on, its uploader (1.32's 1DS, on Linux too) kept a store and device id in ~/.cache/Microsoft
# and, some 9 s after the load and every few seconds after, started threads that resolved and
# reached Microsoft's collector, each reserving an 8 MiB stack and a 64 MiB malloc arena: an
# idle `serve` grew from 608 to 895 MB of address space after it said it served, and under
# `ulimit -v 300000` died of it ("cannot allocate memory for thread-local data", SIGABRT,
# SIGSEGV), past every check made before serving (round 52).
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


def check_out(out: Path) -> None:
    """Refuse, in one line, an ONNX file `out` that export could not write (a FIFO, a
    directory, a missing folder, a name that is not UTF-8). Here, not in .export, which
    imports torch: `dlperf export` checks it before that import and the model's load, after
    which (20 s on a busy machine) a typo'd --out was refused."""
    from dlperf.config.base import check_utf8_name
    from dlperf.paths import check_writable

    check_utf8_name("--out", out)  # both exporters write its name into the model, as UTF-8
    check_writable(out)
