"""Break-it round 37, T1 (the user's own models), fixer F11.

C6. analyze's "modules that never ran" named a container (`ml ModuleList`) whose
    parameter-free members ran (a ReLU) instead of the layer that never ran (`ml.1 Linear`):
    `not_run` let a container stand for its subtree when no parameter under it was counted,
    though modules without parameters under it had run. It stands for its subtree only if no
    module under it ran.
"""

from __future__ import annotations

import torch
from torch import nn

from dlperf.analytic.counting import analyze_module

# --- C6: a container whose parameter-free members ran ---------------------------------------


class _Forgotten(nn.Module):
    """The tester's model (c6_model.py), and a container none of whose members ran (`aux`)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(64, 10)
        self.ml = nn.ModuleList([nn.ReLU(), nn.Linear(7, 7)])  # ml[0] runs, ml[1] never
        self.md = nn.ModuleDict({"act": nn.ReLU(), "spare": nn.Linear(5, 5)})
        self.aux = nn.ModuleList([nn.ReLU(), nn.Linear(3, 3)])  # none of it runs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.md["act"](self.ml[0](self.head(x.flatten(1))))


def test_a_container_whose_members_ran_is_not_named_for_the_layer_that_never_ran() -> None:
    a = analyze_module(_Forgotten(), [1, 8, 8])
    # before: [("ml", "ModuleList", 56), ("md", "ModuleDict", 30), ("aux", ...)], while
    # ml.0 and md.act were rows of the same table
    assert [(m.name, m.type, m.params) for m in a.not_run] == [
        ("ml.1", "Linear", 56),
        ("md.spare", "Linear", 30),
        ("aux", "ModuleList", 12),
    ]
