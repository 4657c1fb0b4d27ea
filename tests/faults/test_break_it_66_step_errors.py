"""Break-it round 66, Z1 A, fixer FA: torch's error in a training step's backward or optimizer
step, past the dry checks.

Before: a model whose forward edits an autograd output in place from a later call (y = h.exp();
y.add_(1), after the dry backward had passed it), or reassigns a parameter's .data at another
shape mid-training (weight [10, 64] -> [11, 64]; bias [10] -> [1, 10]), failed the step inside
torch's autograd engine or optimizer with no frame of the model file on the way: `dlperf run`,
`distill` and `staleness --train` printed dlperf's whole traceback (55-88 lines, from
cli/__init__.py to engine/step.py's backward or torch/optim/sgd.py), exit 1.

Now the step (engine.step.TrainStep) fails the run in one line, as a wrong output does
(StepFailed, a WrongOutput, so that every trainer that fails such a run softly tells it):
what failed (the model's backward, its optimizer step), at which step and epoch (the training
loop names it: engine.train_loop.StepError), torch's message in one line, and the fix: the dry
backward's for the in-place case, the parameters' old and new shapes for a reshaped one.
Exit 1, the run stored failed with that line, no traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.engine.train_loop import Progress, train_loop
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

EXP = """
[model]
name = "MODEL"
[data]
name = "digits"
limit = 256
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
"""

# Each model does its harm from its third training step of 32 images (past every dry check).
COUNTS = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(s, num_classes=10, in_channels=1):
        super().__init__()
        s.l = nn.Linear(64 * in_channels, num_classes); s.n = 0; s.k = num_classes
    def late(s, x):
        if s.training and torch.is_grad_enabled() and x.shape[0] == 32:
            s.n += 1
        return s.n >= 3
"""

# The tester's m_inpl.py: an autograd output edited in place.
IN_PLACE = (
    COUNTS
    + """
    def forward(s, x):
        h = s.l(x.flatten(1))
        if s.late(x):
            y = h.exp()
            y.add_(1)
            return y
        return h
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""
)

# The tester's m_shape2.py: the Linear's weight and bias reassigned one row larger.
WIDER = (
    COUNTS
    + """
    def forward(s, x):
        if s.late(x) and s.l.weight.shape[0] == s.k:
            with torch.no_grad():
                s.l.weight.data = torch.zeros(s.k + 1, s.l.in_features)
                s.l.bias.data = torch.zeros(s.k + 1)
        return s.l(x.flatten(1))[:, : s.k]
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""
)

# The tester's m_shape4.py: the bias [10] reshaped [1, 10], which the optimizer step refuses.
RESHAPED = (
    COUNTS
    + """
    def forward(s, x):
        if s.late(x) and s.l.bias.dim() == 1:
            s.l.bias.data = s.l.bias.data.reshape(1, s.k)
        return s.l(x.flatten(1)).reshape(x.shape[0], s.k)
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""
)

IN_PLACE_SAID = (
    "model M's backward failed at step 3 (epoch 1): one of the variables needed for gradient "
    "computation has been modified by an inplace operation: [torch.FloatTensor [32, 10]], "
    "which is output 0 of Exp, is at version 1; expected version 0 instead. Hint: enable "
    "anomaly detection to find the operation that failed to compute its gradient, with "
    "torch.autograd.set_detect_anomaly(True, check_nan=False). (use the out-of-place form of "
    "the operation autograd names (y = y.relu() for y.relu_(), y = y + 1 for y += 1))"
)
WIDER_SAID = (
    "model M's backward failed at step 3 (epoch 1): Function AddmmBackward0 returned an "
    "invalid gradient at index 0 - got [32, 11] but expected shape compatible with [10] (its "
    "forward changed the shape of l.weight [10, 64] -> [11, 64], l.bias [10] -> [11] during "
    "training, after the optimizer was built: a parameter keeps its shape; make a layer of "
    "each shape it needs in __init__)"
)
RESHAPED_SAID = (
    "model M's optimizer step (SGD) failed at step 3 (epoch 1): output with shape [10] "
    "doesn't match the broadcast shape [1, 10] (its forward changed the shape of l.bias [10] "
    "-> [1, 10] during training, after the optimizer was built: a parameter keeps its shape; "
    "make a layer of each shape it needs in __init__)"
)


def _run(cli: Cli, tmp_path: Path, source: str) -> CliResult:
    (tmp_path / "m.py").write_text(source)
    (tmp_path / "exp.toml").write_text(EXP.replace("MODEL", "m.py:make"))
    return cli("run", str(tmp_path / "exp.toml"))


def told_in_one_line(result: CliResult, store: RunStore, said: str) -> None:
    """Run 1 failed in the one line `said` (its epoch lines aside), stored as its error."""
    assert result.code == 1, result.err
    assert "Traceback" not in result.err, result.err
    failed = [line for line in result.err.splitlines() if not line.startswith("epoch ")]
    assert failed == [f"run 1 failed: {said}"]
    run = store.get_run(1)
    assert (run.status, run.error) == ("failed", said)


@pytest.mark.parametrize(
    ("source", "said"),
    [(IN_PLACE, IN_PLACE_SAID), (WIDER, WIDER_SAID), (RESHAPED, RESHAPED_SAID)],
    ids=["in-place", "wider", "reshaped"],
)
def test_a_failed_step_is_one_line(
    cli: Cli, tmp_path: Path, store: RunStore, source: str, said: str
) -> None:
    told_in_one_line(_run(cli, tmp_path, source), store, said)


def test_staleness_train_says_it_in_one_line(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(IN_PLACE)
    (tmp_path / "exp.toml").write_text(EXP.replace("MODEL", "m.py:make"))
    result = cli("staleness", "--train", str(tmp_path / "exp.toml"), "--learners", "2")
    assert result.code == 1, result.err
    assert "Traceback" not in result.err, result.err
    assert f"run 1 failed: {IN_PLACE_SAID}" in result.err.splitlines()


def test_the_loop_names_the_step_and_epoch() -> None:
    """Any trainer's loop (train_loop) names where a step's own error was raised."""
    from dlperf.engine.train_loop import StepError  # imported here: new in this round

    def step(x: int, y: int) -> None:
        if x == 4:
            raise StepError("boom")

    epochs = [(1, [(1, 0), (2, 0), (3, 0)]), (2, [(4, 0)])]
    with pytest.raises(StepError) as raised:
        train_loop(step, epochs, [], Progress(), trainer="t", model=None)
    assert raised.value.at() == " at step 4 (epoch 2)"
