"""Break-it round 37, the rest of cause C3: an exception whose own __str__ raises.

Round 37's fixer F1 told such an exception as `<str() failed>` (errors.error_text) where a
run's failed mark and the CLI's model line format it. Other places formatted the user's
exception the same unguarded way, and the __str__'s RuntimeError replaced it: `analyze` of a
model file that fails to import, of a factory that raises (the meta device's retry read its
text), of a forward that raises ("error: the model raised RuntimeError: str broke", the
frames of the __str__), a library's exception out of a factory, and a sweep point that
fails (its point's error unrecorded); torch's missing-forward and missing-device checks read
the text of a model's NotImplementedError and of a library's exception out of a forward (a
traceback). Each now tells the user's exception in its line; error_text moved to errors.py,
whose checks need it (parsing imports errors).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from starlette.requests import Request

import dlperf
from dlperf.deploy.server import create_app
from tests.conftest import CliResult
from tests.deploy.test_server import tiny_classifier

Cli = Callable[..., CliResult]

STR_BROKE = """
class StrBroke(Exception):
    def __str__(self):
        raise RuntimeError("str broke")
"""

MODELS = f"""
import sys
from pathlib import Path

from torch import nn

sys.path.insert(0, str(Path(__file__).parent / "lib"))
import strlib  # not beside the model file: a library's
{STR_BROKE}

class NotYet(NotImplementedError):
    def __str__(self):
        raise RuntimeError("str broke")


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1, mid_training=False, raises=StrBroke):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)
        self.mid_training = mid_training
        self.raises = raises

    def forward(self, x):
        if self.raises is None:
            strlib.fail()
        if not self.mid_training or (self.training and x.shape[0] == 16):
            raise self.raises()
        return self.fc(x.flatten(1))


def in_forward(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels)


def not_implemented(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels, raises=NotYet)


def library_in_forward(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels, raises=None)


def mid_training(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels, mid_training=True)


def in_factory(num_classes=10, in_channels=1):
    raise StrBroke()


def in_library(num_classes=10, in_channels=1):
    strlib.fail()
"""

LIBRARY = f"""{STR_BROKE}

def fail():
    raise StrBroke()
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "strlib.py").write_text(LIBRARY)
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def _told(result: CliResult, first: str, code: int) -> None:
    """`first` the line the CLI says, and the __str__'s error nowhere."""
    assert result.code == code, (result.code, result.err)
    assert result.err.splitlines()[0] == first, result.err
    assert "str broke" not in result.err and "During handling" not in result.err, result.err


def test_a_model_file_whose_import_raises_such_an_exception_is_one_line(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "broken.py"
    path.write_text(f"{STR_BROKE}\nraise StrBroke()\n")
    result = cli("analyze", f"{path}:net", "--input", "1,8,8")
    # before: "error: the model raised RuntimeError: str broke", the __str__'s frames
    _told(
        result,
        f"error: model file {path} failed to import (broken.py, line 6): StrBroke: <str() failed>",
        2,
    )
    assert len(result.err.splitlines()) == 1


@pytest.mark.parametrize(
    ("factory", "raised"),
    [("in_factory", "StrBroke"), ("in_forward", "StrBroke"), ("not_implemented", "NotYet")],
)
def test_analyze_tells_the_models_exception_whose_str_raises(
    cli: Cli, models: Path, factory: str, raised: str
) -> None:
    result = cli("analyze", f"{models}:{factory}", "--input", "1,8,8")
    # before: "error: the model raised RuntimeError: str broke" (the meta device's retry of the
    # factory, the forward's error line, the check for torch's missing forward read its text)
    _told(result, f"error: the model raised {raised}: <str() failed>", 1)


@pytest.mark.parametrize("command", ["analyze", "export"])
def test_a_librarys_exception_whose_str_raises_in_the_forward_is_one_line(
    cli: Cli, models: Path, tmp_path: Path, command: str
) -> None:
    spec = f"{models}:library_in_forward"
    out = [] if command == "analyze" else ["--out", str(tmp_path / "m.onnx")]
    result = cli(command, spec, "--input", "1,8,8", *out)
    # before: a traceback (the check for a missing device read its text)
    assert result.code == 2, result.err
    assert "StrBroke: <str() failed>" in result.err, result.err
    assert len(result.err.splitlines()) == 1 and "str broke" not in result.err, result.err


def test_a_librarys_exception_whose_str_raises_out_of_a_factory_is_one_line(
    cli: Cli, models: Path
) -> None:
    result = cli("analyze", f"{models}:in_library", "--input", "1,8,8")
    _told(result, f"error: factory {models}:in_library failed: StrBroke: <str() failed>", 2)
    assert len(result.err.splitlines()) == 1


SWEEP_BASE = """
[model]
name = "{model}"
[data]
name = "digits"
limit = 32
[train]
epochs = 1
batch_size = 16
[run]
threads = 1
warmup_steps = 0
checkpoint = false
"""


def test_a_sweep_point_whose_model_raises_such_an_exception_fails_in_one_line(
    cli: Cli, db: str, tmp_path: Path, models: Path
) -> None:
    (tmp_path / "base.toml").write_text(SWEEP_BASE.format(model=f"{models}:mid_training"))
    (tmp_path / "sw.toml").write_text('base = "base.toml"\n[grid]\n"train.lr" = [0.1]\n')
    result = cli("sweep", "sw.toml")
    # before: "error: the model raised RuntimeError: str broke" ended the sweep, the point's
    # error unrecorded
    assert result.code == 1, result.err
    assert "point 1/1 failed: the model raised StrBroke: <str() failed>" in result.err, result.err
    assert "str broke" not in result.err, result.err
    assert [(r.status, r.error) for r in dlperf.Store(db).runs()] == [
        ("failed", "StrBroke: <str() failed>")
    ]


EXPORTED = f"""
import torch
from torch import nn
{STR_BROKE}

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        if torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling():
            raise StrBroke()
        return self.fc(x.flatten(1))


def net(num_classes=10, in_channels=1):
    return Net()
"""


@pytest.mark.faults  # both exporters run: about 10 s on a busy machine
def test_export_tells_an_exception_whose_str_raises_in_the_exporters_in_one_line(
    cli: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "exported.py"
    path.write_text(EXPORTED)
    result = cli("export", f"{path}:net", "--input", "1,8,8", "--out", str(tmp_path / "m.onnx"))
    # before: "error: the model raised RuntimeError: str broke" (the exporters' first lines)
    assert result.code == 2, result.err
    line = result.err.splitlines()[-1]
    assert line.startswith(f"error: cannot export model '{path}:net' to ONNX: "), result.err
    # torch's dynamo exporter reads the text itself, and fails with the __str__'s error: its
    # own failure, told as it is
    assert line.endswith("and the TorchScript exporter too (StrBroke: <str() failed>)"), line
    assert "Traceback" not in result.err, result.err


class StrBroke(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str broke")


def test_serves_internal_error_answer_tells_an_exception_whose_str_raises(tmp_path: Path) -> None:
    """Not a user's code (the served model is ONNX), but the last handler answers whatever a
    route raised: before, the __str__'s RuntimeError escaped it."""
    app = create_app(tiny_classifier(tmp_path / "tiny.onnx"), threads=1)
    failure = app.exception_handlers[Exception]
    request = Request({"type": "http", "method": "POST", "path": "/predict", "headers": []})
    reply = asyncio.run(failure(request, StrBroke()))
    assert (reply.status_code, reply.body) == (
        500,
        b'{"error":"internal error: StrBroke: <str() failed>"}',
    )
