"""Break-it round 38 (T1): serve's names.

C1: a model named "stats" (stats.onnx) was served without a word, and its metadata was lost:
GET /v2/models/stats is Triton's statistics of every model, so tritonclient's
get_model_metadata('stats') got {"model_stats": [...]} (no inputs, no outputs).
C2: serve's "serving NAME (...) on URL" line was split in two by a newline in the model's file
name (its stem is the model's name).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.deploy.served_model import ServedModel
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.deploy.test_server import tiny_classifier


def test_a_model_named_stats_is_refused_as_it_starts(tmp_path: Path) -> None:
    path = tiny_classifier(tmp_path / "stats.onnx")
    with pytest.raises(UserError) as e:
        ServedModel(path, threads=1)
    assert e.value.message == (
        f"{path}: a model named 'stats' cannot be served: GET /v2/models/stats is the "
        "statistics of every model (Triton's statistics extension), not this model's metadata"
    )
    assert (
        e.value.hint == "rename the file: the model's name is the file's name without its extension"
    )


def test_the_serving_line_is_one_line_whatever_the_file_is_called(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dlperf.cli.serve as serve_cli
    import dlperf.deploy.server as server

    path = tiny_classifier(tmp_path / "nl\nx\x1b[31m.onnx")
    loopback = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setattr(serve_cli, "_listen", lambda host, port: loopback)
    monkeypatch.setattr(server, "serve_forever", lambda *args: None)
    result = cli("serve", str(path), "--threads", "1")
    loopback.close()
    assert result.code == 0, result
    said = result.err.splitlines()
    assert len(said) == 1, result.err
    assert said[0].startswith("serving nl\\nx\\x1b[31m (classification; requests are batched"), said
