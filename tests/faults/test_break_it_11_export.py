"""Issue 41, eleventh break-it round: an export that answers otherwise than its model.

A model whose forward chooses by its input's values (`if x.sum().item() > 40`) is refused by
the dynamo exporter; the TorchScript exporter it fell back to traced the branch the all-zero
example takes, and torch's TracerWarning saying so ("Converting a tensor to a Python number
might cause the trace to be incorrect") was hidden with every other exporter warning. The
parity check compares on random inputs, whose sum is near 0, so it passed (max diff 0), exit
0, and `dlperf infer` answered class 0 for a white image where the model answers 9. Now such
a conversion in the model's code refuses the export in one line, naming the line and the
fix, exit 2, with no file written; a fallback without one still exports, as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dlperf.deploy import export as export_module
from dlperf.deploy.export import export, from_registry
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_9_deploy import no_files

Cli = Callable[..., CliResult]

# The tester's model, as the user wrote it (bk11 A, m/models.py).
MODELS = """
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc1 = nn.Linear(in_channels * 64, 32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class Branchy(Net):
    # data-dependent Python control flow: bright inputs go one way
    def forward(self, x):
        y = super().forward(x)
        if x.sum().item() > 40.0:
            return y * 0 + torch.arange(y.shape[1], dtype=y.dtype)  # favours the last class
        return y * 0 - torch.arange(y.shape[1], dtype=y.dtype)  # favours class 0


def branchy(num_classes=10):
    return Branchy(num_classes)


class Where(Net):
    # the same choice made with tensors: exported as it is
    def forward(self, x):
        y = super().forward(x)
        up = y * 0 + torch.arange(y.shape[1], dtype=y.dtype)
        bright = x.flatten(1).sum(1, keepdim=True) > 40.0
        return torch.where(bright, up, -up)


def where(num_classes=10):
    return Where(num_classes)


class Pointer(Net):
    # the dynamo exporter refuses it (a fake tensor has no data); TorchScript traces it whole
    def forward(self, x):
        y = super().forward(x)
        if x.data_ptr() == 0:
            y = y * 2
        return y


def pointer(num_classes=10):
    return Pointer(num_classes)
"""


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "models.py").write_text(MODELS)
    return "m/models.py"


def _error(result: CliResult) -> str:
    """The one error line of a refusal that comes after the progress lines (a terminal's bar
    is not there off a terminal; plain lines are), with no warning or traceback beside it."""
    assert result.code == 2, (result.code, result.out, result.err)
    assert "Traceback" not in result.err, result.err
    assert result.out == "", result.out
    lines = result.err.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.err
    assert all(line.endswith(" ...") for line in lines[:-1]), result.err  # progress alone
    return errors[0]


def test_export_refuses_a_branch_on_the_inputs_values_and_writes_nothing(
    cli: Cli, models: str, tmp_path: Path
) -> None:
    # before: "warning: the dynamo exporter failed (GuardOnDataDependentSymNode ...); falling
    # back to the TorchScript exporter", exit 0, parity true with max diff 0, and br.onnx
    # answering class 0 for a white image where the model answers class 9
    result = cli("export", f"{models}:branchy", "--input", "1,8,8", "--out", "br.onnx")
    assert _error(result) == (
        f"error: model '{models}:branchy' cannot be exported faithfully: its forward turns a "
        "tensor into a Python number at models.py:22 (`if x.sum().item() > 40.0:`), which the "
        "TorchScript exporter (the fallback, after the dynamo exporter failed: "
        "GuardOnDataDependentSymNode) keeps as the value the example input gives, so the ONNX "
        "graph would take the example input's path for every input (compute it with tensor "
        "operations: torch.where(condition, a, b) to choose between values, torch.cond for a "
        "branch; a size as x.shape[i], without int())"
    )
    no_files(tmp_path / "br.onnx")


def test_the_same_choice_made_with_torch_where_exports_and_answers_as_the_model(
    cli: Cli, models: str, tmp_path: Path
) -> None:
    """The fix the refusal names works: the exported graph answers a white image as the model."""
    result = cli("export", f"{models}:where", "--input", "1,8,8", "--out", "w.onnx", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["parity"] is True
    Image.fromarray(np.full((8, 8), 255, np.uint8)).save(tmp_path / "white.png")
    answer = cli("infer", "w.onnx", "white.png", "--topk", "1", "--json")
    assert answer.code == 0, answer.err
    assert json.loads(answer.out)["predictions"][0]["top"][0]["index"] == 9, answer.out


def test_a_fallback_that_traces_the_whole_forward_still_exports_and_says_so(
    cli: Cli, models: str
) -> None:
    result = cli("export", f"{models}:pointer", "--input", "1,8,8", "--out", "p.onnx", "--json")
    assert result.code == 0, (result.code, result.err)
    done = json.loads(result.out)
    assert done["exporter"] == "torchscript" and done["parity"] is True
    assert "warning: the dynamo exporter failed (" in result.err, result.err
    assert "falling back to the TorchScript exporter" in result.err, result.err
    assert Path("p.onnx").is_file()


# --- each way a forward turns a tensor into a Python value, as the tracer warns of it ----------


def _bool(x: torch.Tensor) -> torch.Tensor:
    return x if x.max() > 0 else -x


def _float(x: torch.Tensor) -> torch.Tensor:
    return x * float(x.mean())


def _int(x: torch.Tensor) -> torch.Tensor:
    return x[:, : int(x.abs().argmax()) % 3 + 1]


def _list(x: torch.Tensor) -> torch.Tensor:
    return x + x.flatten()[:1].tolist()[0]


def _numpy(x: torch.Tensor) -> torch.Tensor:
    return x + float(x.numpy().sum() > 4)


def _twice(x: torch.Tensor) -> torch.Tensor:
    y = x * x.sum().item()
    return y if y.max() > 0 else -y


IDS = ["boolean", "float", "integer", "list", "numpy"]
CONVERSIONS = [
    (_bool, "a Python boolean", "return x if x.max() > 0 else -x"),
    (_float, "a Python float", "return x * float(x.mean())"),
    (_int, "a Python integer", "return x[:, : int(x.abs().argmax()) % 3 + 1]"),
    (_list, "a Python list", "return x + x.flatten()[:1].tolist()[0]"),
    (_numpy, "a NumPy array", "return x + float(x.numpy().sum() > 4)"),
]


@pytest.mark.parametrize(("forward", "kind", "code"), CONVERSIONS, ids=IDS)
def test_every_conversion_of_a_tensor_in_the_traced_code_is_named_with_its_line(
    forward: Callable[[torch.Tensor], torch.Tensor], kind: str, code: str
) -> None:
    with export_module._quiet() as caught:
        torch.jit.trace(forward, torch.zeros(2, 4), check_trace=False)
    line = forward.__code__.co_firstlineno + 1
    assert export_module._traced_constant(caught) == (
        f"turns a tensor into {kind} at test_break_it_11_export.py:{line} (`{code}`)"
    )


def test_more_places_than_the_first_are_counted() -> None:
    with export_module._quiet() as caught:
        torch.jit.trace(_twice, torch.zeros(2, 4), check_trace=False)
    said = export_module._traced_constant(caught)
    assert said is not None and said.startswith("turns a tensor into a Python number at ")
    assert said.endswith(" and in 1 other place"), said


def _sizes(x: torch.Tensor) -> torch.Tensor:
    y = x.view(x.size(0), -1)
    for i in range(x.shape[1]):
        y = y + i
    return torch.where(y.sum(1, keepdim=True) > 4, y, -y)


def test_sizes_and_tensor_choices_are_no_conversion() -> None:
    """What the hint tells the user to write traces whole: nothing is refused."""
    with export_module._quiet() as caught:
        torch.jit.trace(_sizes, torch.zeros(2, 4), check_trace=False)
    assert export_module._traced_constant(caught) is None


def test_the_export_api_refuses_as_the_cli(tmp_path: Path, models: str) -> None:
    source = from_registry(f"{models}:branchy", (1, 8, 8))
    with pytest.raises(UserError, match=r"cannot be exported faithfully: its forward turns a t"):
        export(source, tmp_path / "api.onnx")
    no_files(tmp_path / "api.onnx")
