"""Break-it round 65, Y3 cause 5: serve's log writer thread refused.

Before: under `ulimit -v 400000` `dlperf serve` said "serving m1 (...) on http://..." and then
ended in a 47-line traceback, "RuntimeError: can't start new thread", exit 1: its log's writer
thread (serve_log.Writer) was started after serving was said, and unlike the batcher's threads
(batcher.start_threads) its refusal was not told. Now it is started before that line, and a
refused start is the same one line as the batcher's, exit 1, with no word of serving.

The refusal is made by hand (Thread.start raising as CPython does when it cannot make the
thread), for that one thread: which of serve's threads the kernel refuses first under a memory
limit depends on the machine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliResult
from tests.deploy.test_server import tiny_classifier

pytestmark = pytest.mark.timeout(120)


def test_a_refused_log_writer_is_one_line_before_serving_is_said(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_classifier(tmp_path / "tiny.onnx")
    real = threading.Thread.start

    def start(self: threading.Thread, *args: Any) -> None:
        if self.name == "serve-log":
            raise RuntimeError("can't start new thread")
        real(self, *args)

    monkeypatch.setattr(threading.Thread, "start", start)
    done = cli("serve", str(model), "--port", "0", "--threads", "1")
    assert done.code == 1, done.err
    assert done.err.startswith("error: the server could not start its threads"), done.err
    assert done.err.count("\n") == 1 and "serving" not in done.err, done.err
