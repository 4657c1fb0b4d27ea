"""The sixth break-it round (issue 41), predict and export: the model.* keys are honoured as
analyze honours them, or refused in one line, never dropped."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def refused(result: CliResult, *words: str) -> None:
    """Exit 2, one line, no traceback, naming `words`."""
    assert result.code == 2, (result.code, result.err)
    assert "Traceback" not in result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert lines and all(word in lines[0] for word in words), result.err


def test_predict_counts_the_classes_of_model_kwargs_as_analyze_does(cli: Cli) -> None:
    kwargs = "model.kwargs.num_classes=7"
    analyzed = cli("analyze", "smallcnn", "--set", kwargs, "--json")
    predicted = cli("predict", "smallcnn", "--set", kwargs, "--device", "K80", "--json")
    assert (analyzed.code, predicted.code) == (0, 0), predicted.err
    last = json.loads(analyzed.out)["layers"][-1]["flops"]
    # before: predict counted smallcnn's own 10 classes
    assert json.loads(predicted.out)["layers"][-1]["flops"] == last


def test_predict_refuses_an_argument_the_model_does_not_take(cli: Cli) -> None:
    refused(cli("predict", "smallcnn", "--set", "model.kwargs.bogus=7", "--device", "K80"), "bogus")


def test_predict_refuses_a_model_name_other_than_its_argument(cli: Cli) -> None:
    result = cli("predict", "smallcnn", "--set", "model.name=resnet20", "--device", "K80")
    refused(result, "model.name", "resnet20")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--input", "1,8,8", "--num-classes", "5", "--set", "model.kwargs.num_classes=7"],
         ["num_classes"]),
        (["--input", "3,8,8", "--set", "model.kwargs.in_channels=1"], ["in_channels"]),
        (["--input", "1,8,8", "--set", "model.kwargs.bogus=7"], ["bogus"]),
        (["--input", "1,8,8", "--set", "model.name=resnet20"], ["model.name", "resnet20"]),
        (["--input", "1,8,8", "--set", "model.weights=w.pt"], ["model.weights"]),
    ],
)  # fmt: skip
def test_export_refuses_model_keys_it_cannot_honour(
    cli: Cli, tmp_path: Path, args: list[str], words: list[str]
) -> None:
    out = tmp_path / "m.onnx"
    refused(cli("export", "smallcnn", "--out", str(out), *args), *words)
    assert not out.exists()


def test_export_builds_the_model_with_model_kwargs(cli: Cli, tmp_path: Path) -> None:
    """model.kwargs.num_classes sizes the head when export.num_classes is not given."""
    out = tmp_path / "m.onnx"
    args = ["--input", "1,8,8", "--set", "model.kwargs.num_classes=7", "--json"]
    result = cli("export", "smallcnn", "--out", str(out), "--single-file", *args)
    assert result.code == 0, result.err
    import onnx

    dims = onnx.load(str(out)).graph.output[0].type.tensor_type.shape.dim
    assert dims[-1].dim_value == 7


def test_export_of_a_run_refuses_model_keys_before_the_store(cli: Cli, tmp_path: Path) -> None:
    """A run is exported as it was trained: model.* is refused, not dropped (run 999 does not
    exist; the refusal comes first, where before the key went unseen)."""
    result = cli("export", "999", "--out", str(tmp_path / "m.onnx"), "--set", "model.kwargs.x=1")
    refused(result, "model.kwargs")
