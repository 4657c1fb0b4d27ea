"""Break-it round 68, fixer F1: `infer bench`'s default batch sizes against `export`'s default
fixed batch.

Before: `dlperf export RUN --out m.onnx` (no --dynamic-batch) writes a file that takes a batch
of 1 only, and `dlperf infer bench m.onnx` with no --batch measured infer.batch's defaults,
1, 8 and 32, so the plain pair of commands always ended in `error: m.onnx was exported with a
fixed batch of 1 (export it again with --dynamic-batch to measure other batch sizes)`, exit 2,
though the user had asked for no batch size, and the way that works as the file is
(`--batch 1`) went unsaid.
Now: with no batch size asked for (neither --batch nor infer.batch in a config or --set), a
fixed-batch file is measured at the batch it takes, with one note on stderr (--json's stdout
stays JSON, the note among its keys); batch sizes that were asked for and that the file cannot
take are still refused, and the refusal names both ways out: `--batch 1`, or a new export with
--dynamic-batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dlperf.deploy import bench, meta
from dlperf.deploy.export import from_registry
from dlperf.errors import UserError
from dlperf.parsing import absolute_model_name
from tests.conftest import CliResult
from tests.deploy.test_server import OPSET

Cli = Callable[..., CliResult]
NOTE = (
    "note: {} was exported with a fixed batch of 1: measured at that batch alone (export it "
    "again with --dynamic-batch to measure batch 1, 8 and 32)"
)
REFUSED = (
    "error: {} was exported with a fixed batch of 1 and cannot be measured at batch {} "
    "(measure it with --batch 1, or export it again with --dynamic-batch to measure other "
    "batch sizes)"
)
FAST = ("--threads", "1", "--repeats", "1")


NET = """
from torch import nn


def make(num_classes=3):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """net.py:make on 1x8x8 images as `dlperf export` writes it by default, a fixed batch of
    1, with its metadata; made by hand (export takes seconds; `test_the_plain_pair_of_commands`
    runs the real one)."""
    root = tmp_path_factory.mktemp("bk68")
    (root / "net.py").write_text(NET)
    spec = absolute_model_name(f"{root / 'net.py'}:make")
    weights = from_registry(spec, (1, 8, 8), 3, {}).model.state_dict()
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("Gemm", ["flat", "1.weight", "1.bias"], ["logits"], transB=1),
        ],
        "net",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(weights[k].numpy(), k) for k in ("1.weight", "1.bias")],
    )
    path = root / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    pre = meta.Preprocess((8, 8), 1, (0.5,), (0.5,))
    kept = meta.ModelMeta("classification", "net.py:make", "input", (1, 8, 8), pre)
    kept.model_kwargs, kept.model_path = {}, spec
    meta.save(path, kept)
    return path


@pytest.mark.faults
def test_the_plain_pair_of_commands(cli: Cli, tmp_path: Path) -> None:
    """`dlperf export MODEL --out m.onnx`, then `dlperf infer bench m.onnx`: no option."""
    assert cli("export", "smallcnn", "--input", "1,8,8", "--out", "m.onnx").code == 0
    result = cli("infer", "bench", "m.onnx", *FAST)
    assert result.code == 0, result.err
    assert result.err.splitlines() == [NOTE.format("m.onnx")]
    assert "torch channels_last" in result.out


def test_the_defaults_measure_a_fixed_batch_file_at_its_batch_with_a_note(
    cli: Cli, exported: Path
) -> None:
    result = cli("infer", "bench", str(exported), *FAST)
    assert result.code == 0, result.err
    assert result.err.splitlines() == [NOTE.format(exported)]
    assert "onnxruntime" in result.out and "torch eager" in result.out


def test_json_stays_json_and_the_note_goes_to_stderr(cli: Cli, exported: Path) -> None:
    result = cli("infer", "bench", str(exported), *FAST, "--json")
    assert result.code == 0, result.err
    assert result.err.splitlines() == [NOTE.format(exported)]
    report = json.loads(result.out)
    assert {row["batch"] for row in report["rows"]} == {1}
    assert report["note"] == NOTE.format(exported).removeprefix("note: ")


@pytest.mark.parametrize(
    ("asked", "others"),
    [
        (("--batch", "1,8"), "8"),
        (("--batch", "4"), "4"),
        (("--set", "infer.batch=[1, 8, 32]"), "8 or 32"),  # the defaults, asked for
    ],
)
def test_batch_sizes_asked_for_are_refused_naming_both_ways_out(
    cli: Cli, exported: Path, asked: tuple[str, str], others: str
) -> None:
    result = cli("infer", "bench", str(exported), *FAST, *asked)
    assert result.code == 2
    assert result.err.splitlines() == [REFUSED.format(exported, others)], result.err


def test_a_config_files_batch_sizes_are_asked_for(cli: Cli, exported: Path, tmp_path: Path) -> None:
    config = tmp_path / "deploy.toml"
    config.write_text("[infer]\nbatch = [1, 8, 32]\nthreads = 1\nrepeats = 1\n")
    result = cli("infer", "bench", str(exported), "--config", str(config))
    assert result.code == 2
    assert result.err.splitlines() == [REFUSED.format(exported, "8 or 32")], result.err


def test_its_own_batch_asked_for_is_measured_without_a_note(cli: Cli, exported: Path) -> None:
    result = cli("infer", "bench", str(exported), *FAST, "--batch", "1")
    assert result.code == 0 and result.err == "", result.err


def test_the_library_keeps_refusing_unless_told_the_sizes_were_not_asked_for(
    exported: Path,
) -> None:
    with pytest.raises(UserError) as refused:
        bench.bench(exported, [1, 8], threads=1, repeats=1, warmup=0)
    assert f"error: {refused.value}" == REFUSED.format(exported, "8")
    result = bench.bench(exported, [1, 8], threads=1, repeats=1, warmup=0, asked=False)
    assert [row["batch"] for row in result["rows"]] == [1]
