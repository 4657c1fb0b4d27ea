"""Break-it round 25, part P1, cause F: `dlperf infer bench` rebuilt the PyTorch contender
from the export's metadata without the `model.kwargs` the model was exported with, and looked
its model file up relative to the current directory. `export net.py:build --set
model.kwargs.width=32` was raced against the factory's default width-4 network without a word
(torch "400x faster" than ONNX Runtime). The metadata now records the kwargs and the file's
absolute path; a file exported before it did is rebuilt with the factory's defaults, said so,
and not raced where its parameters' shapes are not the ONNX file's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from torch import nn

from dlperf.deploy import bench, meta
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.deploy.test_bench import Recorder

Cli = Callable[..., CliResult]

NET = """\
from torch import nn


def build(num_classes=10, in_channels=3, width=4):
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes),
    )
"""


def _no_store() -> RunStore:
    raise AssertionError("a registry model's contender needs no store")


def _drop_recorded(model_path: Path) -> None:
    """The metadata as an export before the fix wrote it: no kwargs, no absolute path."""
    doc = json.loads(meta.sidecar(model_path).read_text())
    for key in ("model_kwargs", "model_path"):
        doc.pop(key, None)
    proto = onnx.load(str(model_path), load_external_data=False)
    for prop in proto.metadata_props:
        if prop.key == meta.KEY:
            prop.value = json.dumps(doc)
    onnx.save(proto, str(model_path))
    meta.sidecar(model_path).write_text(json.dumps(doc) + "\n")


def test_bench_rebuilds_the_exported_kwargs(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "net.py").write_text(NET)
    monkeypatch.chdir(work)
    out = tmp_path / "w.onnx"
    done = cli(
        "export", "net.py:build", "--input", "3,8,8", "--out", str(out),
        "--set", "model.kwargs.width=32",
    )  # fmt: skip
    assert done.code == 0, done.err
    recorded = meta.load(out)
    assert recorded.model_kwargs == {"width": 32}
    assert recorded.model_path == f"{work / 'net.py'}:build"

    # Raced from another directory: the file is found by its absolute path, built at width 32.
    monkeypatch.chdir(tmp_path)
    said = Recorder()
    model = bench.pytorch_contender(out, None, _no_store, said)
    assert model is not None and said.logs == []
    conv = model[0]
    assert isinstance(conv, nn.Conv2d) and conv.out_channels == 32
    # --torch naming the exported model takes its kwargs too.
    named = bench.pytorch_contender(out, "net.py:build", _no_store, Recorder())
    assert isinstance(named, nn.Sequential) and named[0].out_channels == 32

    # Metadata from before: the factory's defaults (width 4) are not the file's network
    # (width 32): not raced, said so in one line.
    monkeypatch.chdir(work)
    _drop_recorded(out)
    said = Recorder()
    assert bench.pytorch_contender(out, None, _no_store, said) is None
    assert len(said.logs) == 1, said.logs
    line = said.logs[0]
    assert "model.kwargs" in line and "0.weight" in line and "timing ONNX Runtime only" in line

    # Metadata from before of a network the factory's defaults do build: raced, said so.
    (work / "net.py").write_text(NET.replace("width=4", "width=32"))
    said = Recorder()
    model = bench.pytorch_contender(out, None, _no_store, said)
    assert isinstance(model, nn.Sequential) and model[0].out_channels == 32
    assert len(said.logs) == 1 and "factory's defaults" in said.logs[0], said.logs
