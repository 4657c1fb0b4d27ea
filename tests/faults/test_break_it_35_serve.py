"""Break-it round 35 (P4): what dlperf's workers import, ...

C1: a user's file named like a module (`random.py`, `typing.py`) in the working directory broke
every `sweep --jobs N` worker and every `scale` worker (`ImportError: cannot import name
'Random' from 'random' (.../proj/random.py)`), where `run` and `sweep --jobs 1` worked: the
workers start as `python -m ...` and `python -c ...`, which put the working directory first
on sys.path, and dlperf's own process (a console script) never has it there.
C2: serve batched a plain ONNX model whose outputs' dynamic first dimension is not the batch (x
[N, 3] -> Reshape(-1) -> y [K]; the positions of the positive values, [K, 2]) and split each
output at the requests' rows: each client got a slice of the batch's results, the second
client the first one's numbers, with 200.
C3: serve started a plain ONNX model with an output it cannot return (a sequence, skl2onnx's
ZipMap map, a bfloat16 tensor, which ONNX Runtime gives no numpy array for), described it with
ONNX Runtime's type names (`TYPE_seq(tensor(float))`), and answered every inference 500 with
a traceback in its log.
C4: `detect export --num-classes 99999999999` built the heads until memory ran out (11 GB in
200 s, no line; under a ulimit the limit was blamed).
C5: `detect export --size 0` exported at the model's own size (320), where -32 and 33 were refused.
C6: serve of an ONNX model with no inputs (a Constant graph) was a 46-line IndexError traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlperf.deploy.served_model import ServedModel
from dlperf.errors import UserError
from dlperf.procs import Supervisor
from tests.conftest import CliResult
from tests.deploy.test_server import OPSET


def test_a_child_imports_what_dlperf_imports_not_the_working_directorys_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every worker starts through the Supervisor (sweep's, torchrun and its workers,
    horovodrun's, TensorFlow's): `-c` and `-m` there read no module from the user's folder."""
    (tmp_path / "random.py").write_text("raise SystemExit('the user random.py was imported')\n")
    (tmp_path / "typing.py").write_text("raise SystemExit('the user typing.py was imported')\n")
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "log"
    with Supervisor() as supervisor:
        supervisor.start([sys.executable, "-c", "import random; print(random.Random)"], log)
        assert supervisor.wait(timeout_s=120) == [0], log.read_text()
    assert log.read_text().strip() == "<class 'random.Random'>"


def test_what_a_worker_starts_gets_the_users_own_safepath_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: PYTHONSAFEPATH reached past the workers into what they start: a user's model
    running `python tools/script.py`, which imports a module beside it, worked under `run`
    and failed under `sweep --jobs N` and `scale`. A worker gives the setting back."""
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "helper.py").write_text("WORD = 'beside'\n")
    (tmp_path / "tools" / "script.py").write_text("from helper import WORD\nprint(WORD)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    worker = (
        "import subprocess, sys; from dlperf.procs import restore_safepath; restore_safepath(); "
        "subprocess.run([sys.executable, 'tools/script.py'], check=True)"
    )
    log = tmp_path / "log"
    with Supervisor() as supervisor:
        supervisor.start([sys.executable, "-c", worker], log)
        assert supervisor.wait(timeout_s=120) == [0], log.read_text()
    assert log.read_text().strip() == "beside"


def flattening(path: Path, declared: list[str | int]) -> Path:
    """x [N, 3] -> Reshape(-1) -> y, its shape declared as `declared`: its length is 3 N,
    not N."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"])],
        "flat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)],
        [numpy_helper.from_array(np.array([-1], np.int64), "s")],
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    return path


REQUESTS = [{"x": np.array([[1, 2, 3]], np.float32)}, {"x": np.array([[4, -5, 6]], np.float32)}]


def test_an_output_whose_first_dimension_is_not_the_batch_is_not_batched(tmp_path: Path) -> None:
    served = ServedModel(flattening(tmp_path / "flat.onnx", ["K"]), threads=1)
    assert not served.batchable
    assert served.note == (
        "output 'y' has first dimension K, not the inputs' batch dimension N: requests run one "
        "at a time"
    )
    answers = served.run(REQUESTS)
    assert [a["y"].tolist() for a in answers] == [[1, 2, 3], [4, -5, 6]]


def test_an_output_declared_as_the_batch_that_is_not_is_answered_per_request(
    tmp_path: Path,
) -> None:
    """The file says y is [N] (wrongly): the batch's outputs, which do not have its rows, are
    not split among the requests; each request runs alone."""
    served = ServedModel(flattening(tmp_path / "lies.onnx", ["N"]), threads=1)
    assert served.batchable
    answers = served.run(REQUESTS)
    assert [a["y"].tolist() for a in answers] == [[1, 2, 3], [4, -5, 6]]


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
UNSERVABLE = {
    "seq": (
        [helper.make_node("SequenceConstruct", ["x", "x"], ["y"])],
        X,
        helper.make_tensor_sequence_value_info("y", TensorProto.FLOAT, None),
        "output 'y' is a seq(tensor(float))",
    ),
    "zipmap": (
        [
            helper.make_node(
                "ZipMap", ["x"], ["y"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2]
            )
        ],
        X,
        helper.make_value_info(
            "y",
            helper.make_sequence_type_proto(
                helper.make_map_type_proto(
                    TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])
                )
            ),
        ),
        "output 'y' is a seq(map(int64,tensor(float)))",
    ),
    "bf16_out": (
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)],
        X,
        helper.make_tensor_value_info("y", TensorProto.BFLOAT16, ["N", 3]),
        "output 'y' is a tensor(bfloat16)",
    ),
    "bf16_in": (
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
        helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["N", 3]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
        "input 'x' is a tensor(bfloat16)",
    ),
}


@pytest.mark.parametrize("kind", UNSERVABLE)
def test_a_model_with_a_tensor_serve_cannot_pass_is_refused_as_it_starts(
    tmp_path: Path, kind: str
) -> None:
    nodes, x, y, said = UNSERVABLE[kind]
    opsets = [*OPSET, helper.make_opsetid("ai.onnx.ml", 1)]
    graph = helper.make_graph(nodes, kind, [x], [y])
    path = tmp_path / f"{kind}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets, ir_version=10), path)
    with pytest.raises(UserError) as e:
        ServedModel(path, threads=1)
    assert e.value.message == f"{path}: {said}, which dlperf serve cannot pass as a v2 tensor"
    assert e.value.hint is not None and e.value.hint.startswith("it passes tensors of BOOL, ")


def test_a_model_without_inputs_is_refused_in_one_line(tmp_path: Path) -> None:
    value = numpy_helper.from_array(np.ones(3, np.float32), "c")
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["y"], value=value)],
        "noin",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    path = tmp_path / "noin.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    with pytest.raises(UserError) as e:
        ServedModel(path, threads=1)
    assert e.value.message == f"{path} takes no inputs: the v2 protocol has nothing to send it"


def test_detect_export_refuses_a_class_count_no_machine_holds(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    r = cli("detect", "export", "--num-classes", "99999999999", "--out", str(tmp_path / "n.onnx"))
    assert (r.code, r.err) == (
        2,
        "error: --num-classes 99999999999: at most 10,000 (LVIS, the largest common detection "
        "set, has 1,203; ssd300_vgg16's heads take 134k parameters a class)\n",
    )


def test_detect_export_refuses_size_0_as_it_refuses_33(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    r = cli("detect", "export", "--size", "0", "--out", str(tmp_path / "s.onnx"))
    assert (r.code, r.err) == (
        2,
        "error: input size 0 not supported (use a multiple of 32 in 96..640)\n",
    )
