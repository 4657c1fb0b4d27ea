"""Break-it round 67, W1 C2, C4, C5, fixer G2: kinds of failed training step round 66 left out.

Before: round 66 made a backward or optimizer step that fails in torch, past the dry checks,
one line (engine.step.StepFailed), but only for a RuntimeError, and with no hint for two
causes torch does not name:
- a forward that set the optimizer's lr to a str mid-run ("fast") failed its optimizer step
  with torch's TypeError ("bad operand type for unary -: 'str'"): `dlperf run`, `staleness
  --train` and `distill` printed dlperf's whole traceback (74-85 lines, ending in
  torch/optim/sgd.py), and a sweep's point line said only "TypeError: ...", no step;
- a forward that froze every parameter mid-run (requires_grad_(False)) was told its fix was
  to turn gradients back on (torch.no_grad, .detach()), which it had never turned off;
- a forward that made an nn.Embedding sparse mid-run (sparse=True), with weight decay, ended
  in torch's "add(sparse, dense) is not supported. Use add(dense, sparse) instead.", advice
  for torch's own code, with no word of the sparse gradient.

Now any error torch raises in the step (not one of the model's own code, which keeps its
frames) is the one line, with what failed, where, torch's message and the cause: the frozen
parameters named, the parameter whose gradient is sparse (use sparse=False, as the dry
check before a run says), or the optimizer hyperparameter set to a non-number.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_66_step_errors import told_in_one_line

Cli = Callable[..., CliResult]

EXP = """
[model]
name = "m.py:make"
[data]
name = "digits"
limit = 256
[train]
epochs = 1
batch_size = 32
lr = 0.05
weight_decay = 0.0005
[run]
threads = 1
warmup_steps = 1
"""

# Each model does its harm from its third training step of 32 images (past every dry check).
COUNTS = """
import gc, torch, torch.nn as nn
class Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x): return x.clone()
    @staticmethod
    def backward(ctx, g): raise TypeError("the model's own")
class M(nn.Module):
    def __init__(s, num_classes=10, in_channels=1):
        super().__init__()
        s.l = nn.Linear(64 * in_channels, num_classes); s.e = nn.Embedding(1, num_classes)
        s.n = 0
    def late(s, x):
        if s.training and torch.is_grad_enabled() and x.shape[0] == 32:
            s.n += 1
        return s.n >= 3
    def scores(s, x):
        return s.l(x.flatten(1)) + s.e(torch.zeros(x.shape[0], dtype=torch.long))
def make(num_classes=10, in_channels=1): return M(num_classes, in_channels)
"""

FROZEN = """
    def forward(s, x):
        if s.late(x):
            for p in s.parameters(): p.requires_grad_(False)
        return s.scores(x)
"""

SPARSE = """
    def forward(s, x):
        if s.late(x):
            s.e.sparse = True
        return s.scores(x)
"""

# The tester's b6.py: the optimizer's lr set to a str, found among the process's objects.
LR_STR = """
    def forward(s, x):
        if s.late(x) and s.n == 3:
            for o in gc.get_objects():
                if type(o) is torch.optim.SGD:  # not isinstance: a module warns of it
                    o.param_groups[0]["lr"] = "fast"
        return s.scores(x)
"""

# The model's own backward raises a TypeError: its frames, not the step's line.
OWN = """
    def forward(s, x):
        y = s.scores(x)
        return Boom.apply(y) if s.late(x) else y
"""

FROZEN_SAID = (
    "model M's backward failed at step 3 (epoch 1): element 0 of tensors does not require "
    "grad and does not have a grad_fn (its forward froze l.weight, l.bias, e.weight "
    "(requires_grad=False) during training, after the optimizer was built: the scores carry "
    "no gradient; freeze in __init__ only what should not train, and leave requires_grad "
    "alone in forward)"
)
SPARSE_SAID = (
    "model M's optimizer step (SGD) failed at step 3 (epoch 1): add(sparse, dense) is not "
    "supported. Use add(dense, sparse) instead. (its parameter e.weight got a sparse gradient "
    "(Embedding(sparse=True)) during training, which dlperf's optimizers, gradient clipping "
    "and DDP do not take: use sparse=False)"
)
LR_STR_SAID = (
    "model M's optimizer step (SGD) failed at step 3 (epoch 1): bad operand type for unary "
    "-: 'str' (the optimizer's lr is 'fast' (str), set during training: leave its param "
    "groups to dlperf (train.lr and the schedule set the learning rate))"
)


def _write(tmp_path: Path, forward: str) -> Path:
    # The forward is a method of M: put it inside the class, before the factory
    source = COUNTS.replace("def make(", forward.lstrip("\n") + "def make(")
    (tmp_path / "m.py").write_text(source)
    (tmp_path / "exp.toml").write_text(EXP)
    return tmp_path / "exp.toml"


@pytest.mark.parametrize(
    ("forward", "said"),
    [(FROZEN, FROZEN_SAID), (SPARSE, SPARSE_SAID), (LR_STR, LR_STR_SAID)],
    ids=["frozen", "sparse", "lr-str"],
)
def test_a_failed_step_is_one_line_naming_its_cause(
    cli: Cli, tmp_path: Path, store: RunStore, forward: str, said: str
) -> None:
    told_in_one_line(cli("run", str(_write(tmp_path, forward))), store, said)


def test_staleness_train_says_the_type_error_in_one_line(cli: Cli, tmp_path: Path) -> None:
    result = cli("staleness", "--train", str(_write(tmp_path, LR_STR)), "--learners", "2")
    assert result.code == 1, result.err
    assert "Traceback" not in result.err, result.err
    assert f"run 1 failed: {LR_STR_SAID}" in result.err.splitlines()


def test_the_models_own_error_keeps_its_frames(cli: Cli, tmp_path: Path) -> None:
    """A TypeError the model's own backward raises is its code's: told with its frames."""
    result = cli("run", str(_write(tmp_path, OWN)))
    assert result.code == 1, result.err
    lines = result.err.splitlines()
    assert "error: the model raised TypeError: the model's own" in lines, result.err
    assert '    def backward(ctx, g): raise TypeError("the model\'s own")' in lines
    assert not any("backward failed at step" in line for line in lines), result.err
