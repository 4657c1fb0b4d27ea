"""Break-it round 20, task RB: `dlperf.run` called inside `torch.inference_mode()`.

Inside inference mode gradients are off, and `dlperf.run` said "gradients are off ... a
torch.no_grad() block around the call (train with them on: torch.set_grad_enabled(True))";
doing that inside the block then blamed the model ("model 'smallcnn' cannot be trained: it
returns scores that carry no gradient (... no .detach() ...)"), as inference mode keeps every
tensor out of autograd whatever set_grad_enabled says. Now both are one line naming inference
mode and its fix, nothing stored; the no_grad line is unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.errors import UserError
from dlperf.store import RunStore

EXP = {
    "model": {"name": "smallcnn"},
    "data": {"name": "digits", "limit": 128},
    "train": {"epochs": 1, "batch_size": 64},
    "run": {"threads": 1, "checkpoint": False},
}
INFERENCE = (
    "torch.inference_mode() is on: dlperf.run trains, which needs autograd "
    "(call it outside the inference_mode block)"
)


@pytest.mark.parametrize("grad", [False, True], ids=["as-entered", "grad-enabled-inside"])
def test_run_inside_inference_mode_is_refused_naming_it(tmp_path: Path, grad: bool) -> None:
    db = tmp_path / "i.db"
    with torch.inference_mode(), torch.set_grad_enabled(grad), pytest.raises(UserError) as e:
        dlperf.run(EXP, store=str(db))
    assert str(e.value) == INFERENCE
    assert RunStore.open(f"sqlite:///{db}").list_runs() == []


def test_run_inside_no_grad_keeps_its_own_line(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    with torch.no_grad(), pytest.raises(UserError) as e:
        dlperf.run(EXP, store=str(db))
    assert str(e.value).startswith("gradients are off as training starts: they were off before")
    assert "torch.set_grad_enabled(True)" in str(e.value)
    assert RunStore.open(f"sqlite:///{db}").list_runs() == []
