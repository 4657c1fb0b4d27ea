"""`dlperf export`, `dlperf infer` and `dlperf infer bench` through the real entry point."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from PIL import Image

from tests.conftest import CliResult

Cli = Callable[..., CliResult]

EXPORTING = '''
import torch
from torch import nn


class Exporting(nn.Module):
    """A model that answers otherwise while it is exported: the graph holds the other answer."""

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.head = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(x.mean(dim=(2, 3)))
        return -logits if torch.onnx.is_in_onnx_export() else logits


def build(in_channels: int = 3, num_classes: int = 10) -> nn.Module:
    return Exporting(in_channels, num_classes)
'''


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def png(path: Path, seed: int) -> Path:
    pixels = np.random.default_rng(seed).integers(0, 256, (20, 24, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def test_export_then_infer_then_bench(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()  # an output's directory must exist (tests/faults: bad inputs)
    r = cli("export", "smallcnn", "--input", "3,12,12", "--num-classes", "4", "--out",
            "out/small.onnx", "--dynamic-batch", "--single-file", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert {"path", "opset", "check", "max_abs_diff", "max_rel_diff", "top1_agreement",
            "parity", "exporter", "tolerance", "seconds"} <= set(doc)  # fmt: skip
    assert doc["path"] == "out/small.onnx" and doc["parity"] is True and doc["check"] == "passed"
    assert doc["tolerance"] == {"rtol": 1e-3, "atol": 1e-5} and doc["exporter"] == "dynamo"
    assert "exporting smallcnn to out/small.onnx" in r.err
    model = tmp_path / "out" / "small.onnx"
    assert model.is_file() and (tmp_path / "out" / "small.onnx.json").is_file()

    a, b = png(tmp_path / "a.png", 0), png(tmp_path / "b.png", 1)
    r = cli("infer", str(model), str(a), str(b), "--topk", "2", "--json")
    assert r.code == 0, r.err
    predictions = json.loads(r.out)["predictions"]
    assert [p["image"] for p in predictions] == [str(a), str(b)]
    assert all(len(p["top"]) == 2 and p["top"][0]["label"] in "0123" for p in predictions)
    # The explicit sub-command gives the same answer as the short form.
    r2 = cli("infer", "predict", str(model), str(a), str(b), "--topk", "2", "--json")
    assert r2.code == 0 and json.loads(r2.out)["predictions"] == predictions
    r = cli("infer", str(model), str(a))
    assert r.code == 0 and r.out.splitlines()[0].split() == ["image", "┃", "rank", "┃", "label",
                                                             "┃", "probability"]  # fmt: skip

    r = cli("infer", "bench", str(model), "--batch", "1,2", "--threads", "1", "--repeats", "2",
            "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["threads"] == 1 and len(doc["rows"]) == 6  # 2 batches x 3 contenders
    assert all(row["p50_ms"] > 0 and row["ort_speedup"] > 0 for row in doc["rows"])

    # [infer] in a file, --set over it: the same options as the flags
    (tmp_path / "deploy.toml").write_text("[infer]\ntopk = 1\nbatch = [2]\nthreads = 1\n")
    conf = ["--config", str(tmp_path / "deploy.toml"), "--set", "infer.repeats=2", "--json"]
    r = cli("infer", str(model), str(a), *conf)
    assert [len(p["top"]) for p in json.loads(r.out)["predictions"]] == [1]
    doc = json.loads(cli("infer", "bench", str(model), *conf).out)
    assert {row["batch"] for row in doc["rows"]} == {2} and doc["repeats"] == 2

    r = cli("infer", str(model), str(tmp_path / "missing.png"))
    assert (r.code, r.err) == (2, f"error: no image file {tmp_path / 'missing.png'}\n")

    # A file whose graph is broken: metadata readable, ONNX Runtime refuses it in one line.
    proto = onnx.load(str(model))
    proto.graph.node[0].op_type = "NoSuchOp"
    onnx.save(proto, str(tmp_path / "broken.onnx"))
    shutil.copy(model.with_name("small.onnx.json"), tmp_path / "broken.onnx.json")
    r = cli("infer", str(tmp_path / "broken.onnx"), str(a))
    assert r.code == 2 and r.err.startswith(f"error: ONNX Runtime cannot load {tmp_path}")
    assert r.err.count("\n") == 1


def test_parity_failure_exits_1(cli: Cli, tmp_path: Path) -> None:
    """A graph that negates every logit of the model's: parity fails, exit 1, the file kept.
    (A branch on the input's values, the model this test used before, is now refused before
    parity: tests/faults/test_break_it_11_export.py.)"""
    (tmp_path / "exporting.py").write_text(EXPORTING)
    (tmp_path / "export.toml").write_text("[export]\ninput = [3, 8, 8]\n")
    r = cli("export", "exporting.py:build", "--config", "export.toml", "--out", "b.onnx", "--json")
    assert r.code == 1
    doc = json.loads(r.out)
    assert doc["parity"] is False and (tmp_path / "b.onnx").is_file()
    assert doc["top1_agreement"] == 0.0 and doc["max_abs_diff"] > 1e-2
    assert r.err.endswith(
        f"check failed: ONNX Runtime differs from PyTorch by up to {doc['max_abs_diff']:.3g} "
        "(rtol 0.001, atol 1e-05)\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", "resnt20", "--out", "x.onnx"],
         "error: unknown model 'resnt20' (did you mean resnet20, resnet50, resnet32?)"),
        (["export", "42", "--out", "x.onnx"],
         "error: no run 42 in the store (see `dlperf runs list`)"),
        (["export", "smallcnn", "--input", "3,x", "--out", "x.onnx"],
         "error: --input: export.input.1: Input should be a valid integer (got 'x')"),
        (["export", "smallcnn", "--input", "3,8", "--out", "x.onnx"],
         "error: --input: export.input: must have 3 or more values (got [3, 8])"),
        (["export", "7", "--input", "3,8,8", "--out", "x.onnx"],
         "error: export.input and export.num_classes apply to registry models "
         "(a run's input and classes come from its data)"),
        (["infer", "notes.txt", "a.png"], "error: notes.txt is not an ONNX model: DecodeError"),
        (["infer", "none.onnx", "a.png"], "error: no model file none.onnx"),
        (["infer", "bench", "none.onnx"], "error: no model file none.onnx"),
    ],
)  # fmt: skip
@pytest.mark.usefixtures("store")  # there, and without the run: a store not there says so
def test_bad_input_is_one_line_and_exit_2(cli: Cli, tmp_path: Path, args: list[str],
                                          message: str) -> None:  # fmt: skip
    (tmp_path / "notes.txt").write_text("not a model\n")
    r = cli(*args)
    assert (r.code, r.err, r.out) == (2, message + "\n", "")


def test_help_shows_both_forms_and_examples(cli: Cli) -> None:
    r = cli("infer", "--help")
    assert r.code == 0
    assert "[predict] MODEL.onnx IMAGE... | bench MODEL.onnx" in r.out
    assert "Example: dlperf infer model.onnx cat.png dog.jpg --topk 3" in r.out
    r = cli("infer", "bench", "--help")
    assert r.code == 0 and "Example: dlperf infer bench model.onnx --batch 1,8,32" in r.out
    r = cli("export", "--help")
    assert r.code == 0 and "Example: dlperf export resnet20 --input 3,32,32" in r.out
