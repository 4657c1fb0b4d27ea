"""Break-it round 20, part RE: `infer bench MODEL.onnx` rebuilding the PyTorch contender from
the metadata's run id in the current store (the id is of the store it was exported from).

- a: this store's run of that id is not a training run (a distill selection): it said "run 1
  of this store is model 'None'"; it now says what the run is, and races the registry model.
- b: this store's run of that id is the same model trained on other data (another input
  shape, or another number of classes): exit 2, "the PyTorch model takes (1, 8, 8), ... takes
  (3, 8, 8)"; it now warns and races the registry model at the ONNX file's input.
- c: the run's model file was edited since it trained: the edited network was raced without a
  word; it now warns as export does.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import onnx
import torch
from onnx import TensorProto, helper

from dlperf.deploy import bench
from dlperf.deploy import meta as meta_io
from tests.conftest import CliResult, TrainedRun
from tests.deploy.test_bench import Recorder, holding_tensors_of
from tests.deploy.test_server import OPSET
from tests.faults.test_break_it_19_return import NET, _train_file_model

Cli = Callable[..., CliResult]

RACING = "racing registry model 'smallcnn' with random weights"


def _smallcnn_onnx(path: Path, run_id: int, channels: int, classes: int) -> Path:
    """An ONNX classifier [N, channels, 8, 8] -> [N, classes] whose metadata names smallcnn's
    run `run_id`: the id another store's run had."""
    size = channels * 8 * 8
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("Gemm", ["flat", "W"], ["logits"]),
        ],
        "other",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", channels, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        [helper.make_tensor("W", TensorProto.FLOAT, [size, classes], [0.0] * size * classes)],
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    pre = meta_io.Preprocess((8, 8), channels, (0.5,) * channels, (0.5,) * channels)
    labels = [str(i) for i in range(classes)]
    described = meta_io.ModelMeta(
        "classification", "smallcnn", "input", (channels, 8, 8), pre, labels, run_id
    )
    described.model_kwargs = {}  # as export records them since round 25: none given
    meta_io.save(path, described)
    return holding_tensors_of(path, "smallcnn", (channels, 8, 8), classes)


# --- a: the store's run of that id is not a training run ---------------------------------------


def test_bench_races_the_registry_model_when_the_runs_id_is_a_distill_selection(
    cli: Cli, tmp_path: Path, trained_digits: TrainedRun
) -> None:
    """Before: "warning: run 1 of this store is model 'None', not the 'smallcnn' ...", which
    says nothing of what the run is."""
    _, run_id, _ = trained_digits.copy_to(tmp_path)
    # The ONNX file export would write of that run, as far as bench reads it (its metadata):
    # built, not exported (an ONNX export's seconds); c below races a real export.
    _smallcnn_onnx(tmp_path / "m1.onnx", run_id, channels=1, classes=10)
    with closing(sqlite3.connect(tmp_path / "dlperf.db")) as conn, conn:
        # this store's run of that id is distill's selection, as in a store distill made
        selection = json.dumps({"teacher": 7, "top_k": 3})
        update = "UPDATE runs SET kind = 'select', config = ? WHERE id = ?"
        conn.execute(update, (selection, run_id))
    r = cli("infer", "bench", "m1.onnx", "--batch", "1", "--repeats", "1", "--json")
    assert r.code == 0, r.err
    said = " ".join(r.err.split())  # the console may wrap a long line
    assert (
        f"warning: run {run_id} is a select run (distill's selection): it has no model to "
        f"race; {RACING}"
    ) in said
    assert "'None'" not in said
    assert {row["contender"] for row in json.loads(r.out)["rows"]} >= {"torch eager"}


# --- b: the same model name, another network ---------------------------------------------------


def test_bench_races_the_registry_model_when_the_runs_input_shape_differs(
    tmp_path: Path, trained_digits: TrainedRun
) -> None:
    """The ONNX takes (3, 8, 8): its run 1 was smallcnn on a 3-class colour folder; this store's
    run 1 is smallcnn on digits, (1, 8, 8). Before: UserError "the PyTorch model takes
    (1, 8, 8), ... takes (3, 8, 8)", exit 2."""
    store, run_id, _ = trained_digits.copy_to(tmp_path)
    path = _smallcnn_onnx(tmp_path / "m1.onnx", run_id, channels=3, classes=3)
    reporter = Recorder()
    contender = bench.pytorch_contender(path, None, lambda: store, reporter)
    assert reporter.logs == [
        f"warning: run {run_id} of this store takes (1, 8, 8) with 10 classes, not the "
        f"(3, 8, 8) with 3 classes {path} takes; {RACING}"
    ]
    assert contender is not None
    with torch.no_grad():
        assert contender(torch.zeros(2, 3, 8, 8)).shape == (2, 3)


def test_bench_races_the_registry_model_when_the_runs_classes_differ(
    tmp_path: Path, trained_digits: TrainedRun
) -> None:
    """Same input (1, 8, 8), 4 classes in the ONNX and 10 in this store's run: the run's
    network would have timed another head (and been called the ONNX file's)."""
    store, run_id, _ = trained_digits.copy_to(tmp_path)
    path = _smallcnn_onnx(tmp_path / "m1.onnx", run_id, channels=1, classes=4)
    reporter = Recorder()
    contender = bench.pytorch_contender(path, None, lambda: store, reporter)
    assert reporter.logs == [
        f"warning: run {run_id} of this store takes (1, 8, 8) with 10 classes, not the "
        f"(1, 8, 8) with 4 classes {path} takes; {RACING}"
    ]
    assert contender is not None
    with torch.no_grad():
        assert contender(torch.zeros(2, 1, 8, 8)).shape == (2, 4)


def test_bench_still_races_the_run_when_it_is_the_onnx_files_network(
    tmp_path: Path, trained_digits: TrainedRun
) -> None:
    store, run_id, _ = trained_digits.copy_to(tmp_path)
    path = _smallcnn_onnx(tmp_path / "m1.onnx", run_id, channels=1, classes=10)
    reporter = Recorder()
    contender = bench.pytorch_contender(path, None, lambda: store, reporter)
    assert reporter.logs == [] and contender is not None


# --- c: the run's model file edited since it trained -------------------------------------------


def test_bench_warns_when_the_runs_model_file_changed_since_it_trained(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: exit 0 and nothing said, the 'torch eager' rows timing Tanh where the run and
    its ONNX file have ReLU."""
    run_id, model = _train_file_model(cli, tmp_path)
    r = cli("export", str(run_id), "--out", "m1.onnx")
    assert r.code == 0, r.err
    model.write_text(NET.replace("nn.ReLU()", "nn.Tanh()"))
    said = (
        f"warning: model file {model} changed since run {run_id} was trained (its parameters "
        "still fit): raced as the file is now"
    )
    for torch_flag in ([], ["--torch", str(run_id)]):
        r = cli("infer", "bench", "m1.onnx", "--batch", "1", "--repeats", "1", *torch_flag)
        assert r.code == 0, r.err
        assert said in " ".join(r.err.split()), torch_flag  # the console may wrap a long line
