"""Issue 41, ninth break-it round: export, infer and serve. Images of a model that takes
neither 1 nor 3 channels, an exported graph that fails in ONNX Runtime during the parity
check, a model whose eval scores are on the meta device, and scores that are not float;
each seen failing before its fix."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image
from scipy.special import softmax

from dlperf.deploy import meta
from dlperf.deploy.server import create_app
from dlperf.errors import UserError
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult
from tests.deploy.test_server import OPSET, flat_classifier, running

MODELS = """
import torch
from torch import nn


class Flat(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(in_channels * 8 * 8, num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))


class BakedBatch(Flat):
    def forward(self, x):
        y = self.fc(x.flatten(1))
        if x.data_ptr() == 0:  # no data in a fake tensor: the dynamo exporter refuses
            y = y * 2
        return y + torch.zeros(len(x), self.fc.out_features)  # the batch, baked in by a trace


class MetaOut(Flat):
    def forward(self, x):
        y = self.fc(x.flatten(1))
        return y if self.training else y.to("meta")


class BoolOut(Flat):
    def forward(self, x):
        return self.fc(x.flatten(1)) > 0


class ArgmaxOut(Flat):
    def forward(self, x):
        y = self.fc(x.flatten(1))
        return y.argmax(1, keepdim=True).expand(-1, y.shape[1])


class Bf16Eval(Flat):
    def forward(self, x):
        y = self.fc(x.flatten(1))
        return y if self.training else y.bfloat16()


def flat(num_classes=10, in_channels=1):
    return Flat(num_classes, in_channels)


def baked_batch(num_classes=10, in_channels=1):
    return BakedBatch(num_classes, in_channels)


def meta_out(num_classes=10, in_channels=1):
    return MetaOut(num_classes, in_channels)


def bool_out(num_classes=10, in_channels=1):
    return BoolOut(num_classes, in_channels)


def argmax_out(num_classes=10, in_channels=1):
    return ArgmaxOut(num_classes, in_channels)


def bf16_eval(num_classes=10, in_channels=1):
    return Bf16Eval(num_classes, in_channels)
"""


@pytest.fixture
def models(tmp_path: Path) -> str:
    """The model file, written where the cli fixture runs; its name as export takes it."""
    (tmp_path / "models.py").write_text(MODELS)
    return "models.py"


def exported(cli: Callable[..., CliResult], models: str, channels: int, out: str) -> Path:
    """A classifier of (channels, 8, 8) images into 10 classes, any batch, as export writes
    models.py:flat (Flatten, one linear layer; pixels normalized by 0.5 and 0.5), written with
    onnx's helper: the tests are of reading images, and an export took most of their time."""
    return flat_classifier(Path(out), channels, 10, "flat", seed=channels)


def png(mode: str, path: Path | None = None) -> bytes:
    """An 8x8 PNG of random pixels in `mode` (L, LA, RGB, RGBA), also written to `path`."""
    bands = len(mode)
    pixels = np.random.default_rng(bands).integers(0, 256, (8, 8, bands), dtype=np.uint8)
    image = Image.fromarray(pixels[..., 0] if bands == 1 else pixels)
    assert image.mode == mode
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    if path is not None:
        path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def no_files(out: Path) -> None:
    """Nothing under `out`'s name: the model, its weights, its metadata, the staging."""
    left = [p.name for p in out.parent.iterdir() if p.name.startswith((out.name, f".{out.name}"))]
    assert left == [], left


# --- 1. images of a model that takes neither 1 nor 3 channels --------------------------------


def test_infer_reads_an_la_image_as_a_two_channel_models_grey_and_alpha(
    cli: Callable[..., CliResult], models: str, tmp_path: Path
) -> None:
    model = exported(cli, models, 2, "c2.onnx")
    png("LA", tmp_path / "la.png")
    r = cli("infer", str(model), "la.png", "--topk", "10", "--json")
    # before: ValueError: operands could not be broadcast together with shapes (3,8,8)
    # (2,1,1), a traceback, exit 1
    assert r.code == 0, r.err
    pixels = np.asarray(Image.open(tmp_path / "la.png"), dtype=np.float32) / 255
    x = ((pixels.transpose(2, 0, 1) - 0.5) / 0.5)[None].astype(np.float32)
    logits = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"input": x}
    )[0]
    expected = softmax(logits.astype(np.float64), axis=-1)[0]
    top = json.loads(r.out)["predictions"][0]["top"]
    assert [t["index"] for t in top] == list(np.argsort(-expected, kind="stable"))
    assert [t["probability"] for t in top] == pytest.approx(sorted(expected, reverse=True))


def test_infer_refuses_an_image_for_a_seven_channel_model_in_one_line(
    cli: Callable[..., CliResult], models: str, tmp_path: Path
) -> None:
    model = exported(cli, models, 7, "c7.onnx")
    png("L", tmp_path / "grey.png")
    r = cli("infer", str(model), "grey.png")
    # before: ValueError: operands could not be broadcast together ..., traceback, exit 1
    one_line_error(r, "grey.png: the model takes 7 channels; an image file gives 1 to 4")
    assert "(L, LA, RGB, RGBA)" in r.err


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_serve_predicts_a_two_channel_model_and_refuses_a_seven_channel_one_with_400(
    cli: Callable[..., CliResult], models: str
) -> None:
    for channels, status in ((2, 200), (7, 400)):
        model = exported(cli, models, channels, f"c{channels}.onnx")
        with running(create_app(model, max_batch=4, max_wait_ms=1, threads=1)) as url:
            answer = httpx.post(f"{url}/predict", content=png("LA"), timeout=30)
        # before: 500 "internal error: ValueError" for both, a traceback in the server log
        assert answer.status_code == status, answer.text
        if status == 400:
            said = answer.json()["error"]
            assert "the model takes 7 channels; an image file gives 1 to 4" in said
        else:
            assert len(answer.json()["predictions"]) == 5


# --- 2. an exported graph that fails in ONNX Runtime in the parity check ---------------------


def test_export_whose_graph_fails_in_onnx_runtime_is_one_line_and_leaves_no_file(
    cli: Callable[..., CliResult], models: str, tmp_path: Path
) -> None:
    args = ["export", f"{models}:baked_batch", "--input", "1,8,8", "--out", "baked.onnx"]
    r = cli(*args, "--dynamic-batch", "--json")
    # before: onnxruntime...Fail: ... Attempting to broadcast an axis by a dimension other
    # than 1. 2 by 8, a traceback, exit 1
    assert r.code == 1, r.err
    # The error is the last line, after the progress lines and the exporter's fallback.
    assert "Traceback" not in r.err, r.err
    failed = [line for line in r.err.splitlines() if line.startswith("check failed: ")]
    assert len(failed) == 1 and r.err.strip().splitlines()[-1] == failed[0], r.err
    assert failed[0].startswith(
        "check failed: the exported graph fails in ONNX Runtime at batch 8 (random input): "
    )
    assert "2 by 8" in failed[0] and "a batch size baked into the graph" in failed[0]
    assert "export without --dynamic-batch" in failed[0]
    assert r.out == ""  # as the other parity failures that write no file
    no_files(tmp_path / "baked.onnx")


# --- 3. scores on the meta device --------------------------------------------------------------


def test_export_of_a_model_whose_eval_scores_are_on_the_meta_device_is_one_line(
    cli: Callable[..., CliResult], models: str, tmp_path: Path
) -> None:
    r = cli("export", f"{models}:meta_out", "--input", "1,8,8", "--out", "m.onnx")
    # before: TypeError: can't convert meta device type tensor to numpy, a traceback, exit 1
    one_line_error(r, "returns in eval mode its scores on the meta device")
    no_files(tmp_path / "m.onnx")


# --- 4. scores that are not float ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dtype"), [("bool_out", "torch.bool"), ("argmax_out", "torch.int64")]
)
def test_export_refuses_scores_that_are_not_float(
    name: str, dtype: str, cli: Callable[..., CliResult], models: str, tmp_path: Path
) -> None:
    r = cli("export", f"{models}:{name}", "--input", "1,8,8", "--out", "s.onnx")
    # before: exit 0, a file whose scores infer and serve showed as probabilities
    one_line_error(r, f"returns in eval mode {dtype}")
    assert "values; expected float scores (logits)" in r.err
    no_files(tmp_path / "s.onnx")


def test_export_refuses_bfloat16_scores_that_onnx_runtime_cannot_hand_back(
    cli: Callable[..., CliResult], models: str, tmp_path: Path
) -> None:
    r = cli("export", f"{models}:bf16_eval", "--input", "1,8,8", "--out", "b.onnx")
    # before: TypeError: Got unsupported ScalarType BFloat16 in the parity check, exit 1
    one_line_error(r, "returns in eval mode torch.bfloat16 scores, which ONNX Runtime cannot")
    no_files(tmp_path / "b.onnx")


def bool_scores(path: Path) -> Path:
    """An ONNX classifier with dlperf's metadata whose scores are booleans: x > 0 of a 1x8x8
    image's first 10 pixels (the file `dlperf export` wrote before it refused them)."""
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("Slice", ["flat", "start", "end", "axis"], ["head"]),
            helper.make_node("Greater", ["head", "zero"], ["logits"]),
        ],
        "bools",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.BOOL, ["N", 10])],
        [
            numpy_helper.from_array(np.array([0], np.int64), "start"),
            numpy_helper.from_array(np.array([10], np.int64), "end"),
            numpy_helper.from_array(np.array([1], np.int64), "axis"),
            numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    pre = meta.Preprocess((8, 8), 1, (0.5,), (0.5,))
    meta.save(path, meta.ModelMeta("classification", "bools", "input", (1, 8, 8), pre))
    return path


def test_infer_and_serve_refuse_a_classifier_whose_scores_are_not_float(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    model = bool_scores(tmp_path / "bool.onnx")
    png("L", tmp_path / "seven.png")
    r = cli("infer", str(model), "seven.png")
    # before: every label at "probability 0.1794", the softmax of booleans, exit 0
    one_line_error(r, "bool.onnx gives tensor(bool) scores; expected float scores (logits)")
    # before: served, and /predict answered the same probabilities
    with pytest.raises(UserError, match=r"gives tensor\(bool\) scores; expected float scores"):
        create_app(model, threads=1)
