"""Break-it round 59, fixer G9: a model whose scores are a sparse or a nested tensor.

T2 C1. A user's model returning its scores as a sparse tensor (`y.to_sparse()`, or
`.to_sparse_csr()`) or a nested one (`torch.nested.nested_tensor([y])`) passed the check of the
output's type (a torch.Tensor) and then failed reading it: `dlperf run` and `dlperf export` ended
in torch's NotImplementedError (the SparseCPU backend, ~150 lines of dispatch keys) or its
"NestedTensorImpl doesn't support sizes" RuntimeError, exit 1; `dlperf analyze` of the nested
one printed torch's prototype UserWarning and blamed the input ("the model rejects input [1, 1,
8, 8]: ... INTERNAL ASSERT FAILED"). Now run and export say in one line (exit 2, nothing stored
or written) that the model returns a sparse or a nested tensor where dense scores are expected,
with the fix; analyze says in one line that the forward makes a nested tensor it cannot count
(the input is fine), without torch's warning. analyze still counts a model whose output is
sparse, as it counts one returning a dict: its output's type is not what it counts.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.deploy.export import check_scores
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

MODELS = """\
import torch
from torch import nn


class Base(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.f = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))


class Coo(Base):
    def forward(self, x):
        return self.f(x).to_sparse()


class Csr(Base):
    def forward(self, x):
        return self.f(x).to_sparse_csr()


class Nested(Base):
    def forward(self, x):
        return torch.nested.nested_tensor([self.f(x)])
"""

EXP = """\
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
"""

SPARSE = "(return them dense: y.to_dense())"
NESTED = "returns a nested tensor (torch.nested)"

CASES = [
    ("Coo", f"returns a tensor of layout torch.sparse_coo; expected {{}} {SPARSE}"),
    ("Csr", f"returns a tensor of layout torch.sparse_csr; expected {{}} {SPARSE}"),
    ("Nested", f"{NESTED}; expected {{}}"),
]


@pytest.fixture
def models(tmp_path: Path) -> Path:
    (tmp_path / "net.py").write_text(MODELS)
    (tmp_path / "exp.toml").write_text(EXP)
    return tmp_path


@pytest.mark.parametrize(("factory", "said"), CASES)
def test_run_of_a_model_whose_scores_are_sparse_or_nested_is_one_line(
    cli: Cli, store: RunStore, models: Path, factory: str, said: str
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = cli("run", "exp.toml", "--set", f"model.name=net.py:{factory}")
    expected = "a classifier's scores, shape [batch, classes]: [2, 10] for 2 images"
    one_line(r, 2, f"/net.py:{factory}' {said.format(expected)}")
    assert store.list_runs() == []  # refused before anything is recorded
    assert not [w for w in caught if "prototype" in str(w.message)]  # torch's, of nested_tensor


@pytest.mark.parametrize(("factory", "said"), CASES[::2])
def test_export_of_a_model_whose_scores_are_sparse_or_nested_is_one_line(
    cli: Cli, models: Path, factory: str, said: str
) -> None:
    r = cli("export", f"net.py:{factory}", "--input", "1,8,8", "--out", "m.onnx")
    expected = "an exported classifier's scores, one dense tensor of shape [batch, classes]"
    one_line(r, 2, f"model 'net.py:{factory}' {said.format(expected)}")
    assert not (models / "m.onnx").exists()


def test_analyze_of_a_nested_tensor_names_it_not_the_input(cli: Cli, models: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = cli("analyze", "net.py:Nested", "--input", "1,8,8")
    one_line(r, 2, "the model's forward makes a nested tensor (torch.nested.nested_tensor)")
    assert "rejects input" not in r.err
    assert "prototype" not in r.err
    assert not [w for w in caught if "prototype" in str(w.message)]


def test_analyze_counts_a_model_whose_output_is_sparse(cli: Cli, models: Path) -> None:
    r = cli("analyze", "net.py:Coo", "--input", "1,8,8", "--json")
    assert r.code == 0, r.err
    assert '"params": 650' in r.out


def test_exports_check_of_scores_at_another_batch_refuses_a_sparse_tensor() -> None:
    """export's later forwards (the batch sizes it checks) go through the same check."""
    scores = torch.zeros(3, 10).to_sparse()
    with pytest.raises(UserError, match=r"^model 'm' returns in eval mode a tensor of layout"):
        check_scores(scores, "m", 3)
