"""Break-it round 52, fixer F5: torch functions whose kernel returns more than they do.

T1 C1. A torch function called in a model's own forward (a container's row, or the `(model)`
row) counted as activations every output of the ATen kernel it runs, and the row's shape was
the first of them: `torch.linalg.det` 73 for its 1 (`_linalg_det`'s LU and pivots),
`slogdet` 76 for 2, `solve` 201 for 64 (LU, pivots, info), `svdvals` 136 of shape [1, 8, 8]
for its 8 of [1, 8] (S is the middle of `_linalg_svd`'s U, S, Vh), `eigvalsh` 72 for 8 (the
eigenvectors), `inv`, `cholesky` and `lu_factor` one more (an info tensor),
`F.cross_entropy`/`F.nll_loss` their `total_weight`, `F.ctc_loss` its `log_alpha`,
`F.multilabel_margin_loss` its `is_target`. Round 50's `ops.PUBLIC_OUTPUTS`, a count of
leading outputs, could not say S, nor that `torch.linalg.svd`, `eigh` and the `*_ex` forms
return more of the same kernels. Each such kernel now counts the outputs its calling function
returns (`ops.public_outputs`: their indices, by kernel and call), its row's shape the first
of them; MACs and FLOPs are unchanged, and the module twins (nn.CrossEntropyLoss) count their
output as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dlperf
from dlperf.analytic import ops

INPUT = (1, 8, 8)
Fn = Callable[[torch.Tensor], Any]


class Call(nn.Module):
    """A container (of an nn.Identity) whose own forward calls `fn` on the input (1x1x8x8):
    its row counts what the call's operators return."""

    def __init__(self, fn: Fn) -> None:
        super().__init__()
        self.fn = fn
        self.input = nn.Identity()

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(self.input(x))


class Model(nn.Module):
    """`Call(fn)` then a linear head on the first tensor it returns."""

    def __init__(self, fn: Fn) -> None:
        super().__init__()
        self.call = Call(fn)
        self.fc = nn.LazyLinear(10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.call(x)
        first = out[0] if isinstance(out, tuple) else out
        return self.fc(first.real.float().reshape(1, -1))


def _matrix(fn: Callable[[torch.Tensor], Any]) -> Fn:
    """`fn` of the input's 1x8x8 matrix (a view: no activation)."""
    return lambda x: fn(x[:, 0])


def _returned(fn: Fn) -> tuple[int, list[int]]:
    """What `fn` returns in plain torch, of a symmetric positive definite 1x8x8 matrix: the
    elements of its tensors, and the first one's shape."""
    a = torch.randn(1, 8, 8, dtype=torch.float64)
    spd = (a @ a.mT + 8 * torch.eye(8, dtype=torch.float64)).float().unsqueeze(1)
    with torch.no_grad():
        out = fn(spd)
    tensors = [t for t in (out if isinstance(out, tuple) else (out,)) if torch.is_tensor(t)]
    return sum(t.numel() for t in tensors), list(tensors[0].shape)


# Each call of the input's matrix, and what the row counted before.
LINALG: dict[str, tuple[Fn, int]] = {
    "linalg.det": (_matrix(torch.linalg.det), 73),
    "det": (_matrix(torch.det), 73),
    "linalg.slogdet": (_matrix(torch.linalg.slogdet), 74),
    "linalg.solve": (_matrix(lambda a: torch.linalg.solve(a, a)), 137),
    "linalg.svdvals": (_matrix(torch.linalg.svdvals), 136),
    "linalg.eigvalsh": (_matrix(torch.linalg.eigvalsh), 72),
    "linalg.eigvals": (_matrix(torch.linalg.eigvals), 72),
    "linalg.inv": (_matrix(torch.linalg.inv), 65),
    "inverse": (_matrix(torch.inverse), 65),
    "linalg.cholesky": (_matrix(torch.linalg.cholesky), 65),
    "linalg.lu_factor": (_matrix(torch.linalg.lu_factor), 73),
    # the calls that return more of the same kernels' outputs keep them
    "linalg.svd": (_matrix(torch.linalg.svd), 136),
    "svd": (_matrix(torch.svd), 136),  # its V: Vh transposed, a view
    "linalg.eigh": (_matrix(torch.linalg.eigh), 72),
    "linalg.eig": (_matrix(torch.linalg.eig), 72),
    "linalg.inv_ex": (_matrix(torch.linalg.inv_ex), 65),
    "linalg.cholesky_ex": (_matrix(torch.linalg.cholesky_ex), 65),
    "linalg.lu_factor_ex": (_matrix(torch.linalg.lu_factor_ex), 73),
    "linalg.solve_ex": (_matrix(lambda a: torch.linalg.solve_ex(a, a)), 137),
}


def call_row(fn: Fn, train: bool = False) -> dict[str, Any]:
    rows = {r["name"]: r for r in dlperf.analyze(Model(fn), INPUT, train=train).layers}
    return rows["call"]


@pytest.mark.parametrize("case", LINALG)
def test_a_linalg_functions_activations_are_what_it_returns_in_torch(case: str) -> None:
    fn, _ = LINALG[case]
    row = call_row(fn)
    returned, shape = _returned(fn)
    assert (row["activations"], row["output_shape"]) == (returned, shape)


def test_svdvals_counts_s_alone_in_training_too() -> None:
    """Its kernel keeps U and Vh for the backward then; the function returns S."""
    row = call_row(LINALG["linalg.svdvals"][0], train=True)
    assert (row["activations"], row["output_shape"]) == (8, [1, 8])  # was 136, [1, 8, 8]


def test_a_norm_made_of_svdvals_counts_s_and_its_max() -> None:
    row = call_row(_matrix(lambda a: torch.linalg.matrix_norm(a, 2)))
    assert (row["activations"], row["output_shape"]) == (8 + 1, [1])  # was 137


def _zeros(x: torch.Tensor, *shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.long, device=x.device)


def _ctc(x: torch.Tensor) -> torch.Tensor:
    """8 steps of 8 classes, one target of length 1 (the targets, lengths: 1 element each)."""
    log_probs = x[:, 0].transpose(0, 1).log_softmax(2)
    one = torch.ones(1, 1, dtype=torch.long, device=x.device)
    eight = torch.full((1,), 8, device=x.device)
    return F.ctc_loss(log_probs, one, eight, one[:, 0], reduction="sum")


# The loss, and the row's activations: its operators' outputs (the target's zeros, the log
# softmax of cross entropy), the loss one; before, one more for the kernel's buffer.
LOSSES: dict[str, tuple[Fn, int]] = {
    # log_softmax 64 + target 1 + loss 1 (was 67: nll_loss_forward's total_weight)
    "cross_entropy": (lambda x: F.cross_entropy(x.flatten(1), _zeros(x, 1)), 66),
    # log_softmax 64 + target 64 + loss 1 (was 130: nll_loss2d_forward's)
    "cross_entropy 2d": (lambda x: F.cross_entropy(x, _zeros(x, 1, 8, 8)), 129),
    "nll_loss": (lambda x: F.nll_loss(x.flatten(1), _zeros(x, 1)), 2),  # was 3
    # log_softmax 64 + targets 1 + lengths 1 + loss 1 + its sum 1 (was 92: log_alpha 1x8x3)
    "ctc_loss": (_ctc, 68),
    # target 8 + loss 1 (was 17: is_target 8)
    "multilabel_margin_loss": (lambda x: F.multilabel_margin_loss(x[:, 0, 0], _zeros(x, 1, 8)), 9),
}


@pytest.mark.parametrize("case", LOSSES)
def test_a_loss_counts_its_value_not_its_kernels_buffers(case: str) -> None:
    fn, activations = LOSSES[case]
    assert call_row(fn)["activations"] == activations


def test_the_loss_modules_count_their_output_as_before() -> None:
    """nn.CrossEntropyLoss, nn.NLLLoss and nn.CTCLoss: their output, as the functions now."""

    class Losses(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ce, self.nll, self.ctc = nn.CrossEntropyLoss(), nn.NLLLoss(), nn.CTCLoss()
            self.fc = nn.Linear(64, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.fc(x.flatten(1))
            t = _zeros(x, 1)
            log_probs = y.unsqueeze(0).log_softmax(2)
            one = torch.ones(1, 1, dtype=torch.long, device=x.device)
            ctc = self.ctc(log_probs, one, one[:, 0], one[:, 0])
            return y + self.ce(y, t) + self.nll(y, t) + ctc

    rows = {r["name"]: r for r in dlperf.analyze(Losses(), INPUT).layers}
    assert [rows[n]["activations"] for n in ("ce", "nll", "ctc")] == [1, 1, 1]


def test_macs_and_flops_are_unchanged() -> None:
    """The work is counted as before: the losses' FLOPs (log_softmax's 5 per element of 64,
    ctc_loss 1 more), the head's 10 MACs of one input each, the linalg kernels none."""
    counted = {"cross_entropy": 320, "ctc_loss": 321, "nll_loss": 0}
    for case, flops in counted.items():
        analysis = dlperf.analyze(Model(LOSSES[case][0]), INPUT)
        row = {r["name"]: r for r in analysis.layers}["call"]
        assert (row["macs"], row["flops"]) == (0, flops)
        assert (analysis.totals["macs"], analysis.totals["flops"]) == (10, flops + 30)
    solve = dlperf.analyze(Model(LINALG["linalg.solve"][0]), INPUT).totals
    assert (solve["macs"], solve["flops"]) == (640, 1290)


def test_the_table_by_kernel_and_call() -> None:
    assert ops.public_outputs("_linalg_svd", "linalg_svdvals") == (1,)
    assert ops.public_outputs("_linalg_svd", "linalg_svd") is None
    assert ops.public_outputs("_linalg_solve_ex", "linalg_solve_ex") == (0, 3)
    assert ops.public_outputs("linalg_lu_factor_ex", "linalg_lu_factor") == (0, 1)
    assert ops.public_outputs("native_layer_norm", "") == (0,)
    assert ops.public_outputs("add", "add") is None
