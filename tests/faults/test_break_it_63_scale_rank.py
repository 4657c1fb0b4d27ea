"""Break-it round 62, V1 cause 3: a model that raises in a scale worker (on one rank only, or
on every rank once training is under way).

Before: the point failed `worker rank 1 failed: ValueError: rank one fails`, then the last
lines of the worker's traceback: torch's DDP frame (`return self.module(*inputs, **kwargs)`)
and nn.Module's `_wrapped_call_impl` and `_call_impl` first, the model file's own frame last,
which read as a traceback of torch's or dlperf's. A plain run says `the model raised ...`
with the model file's frames only.

Now the worker says it so (`worker.model_raised`): `worker rank 1 failed: the model raised
ValueError: rank one fails`, then the frames from the model file's first on, stored as the
point's error and printed below the study; the whole traceback stays in the launch's log.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.distributed.worker import model_raised
from dlperf.models.registry import load_factory
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.distributed.test_study import WEAK

# Raises on rank 1 alone, in training at the point's batch (the up-front checks in dlperf's
# own process use other sizes and eval mode).
RANK_ONE = """\
import os
from torch import nn


class R1Raise(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.l = nn.Linear(in_channels * 64, num_classes)

    def forward(self, x):
        if self.training and os.environ.get("RANK", "0") == "1" and x.shape[0] > 3:
            raise ValueError("rank one fails")
        return self.l(x.flatten(1))


def r1raise(num_classes=10, in_channels=1):
    return R1Raise(num_classes, in_channels)
"""


def _frames(path: Path) -> list[str]:
    return [
        f'  File "{path}", line 12, in forward',
        '    raise ValueError("rank one fails")',
    ]


def test_a_models_error_is_said_from_its_own_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Called through torch's modules (as DDP calls it): none of their frames, the model
    file's on; an error raised outside any model file is not the model's."""
    path = tmp_path / "m.py"
    path.write_text(RANK_ONE)
    monkeypatch.setenv("RANK", "1")
    model = load_factory(f"{path}:r1raise")()
    wrapped = nn.Sequential(model)  # torch's own frames above the model's, as DDP's are
    with pytest.raises(ValueError) as raised:
        wrapped(torch.zeros(8, 1, 8, 8))
    assert model_raised(raised.value, 1) == "\n".join(
        ["worker rank 1 failed: the model raised ValueError: rank one fails", *_frames(path)]
    )
    with pytest.raises(ValueError) as own:
        int("x")
    assert model_raised(own.value, 0) is None


@pytest.mark.faults  # a torchrun launch of 2 workers: over 10 s under load
def test_a_model_raising_on_one_rank_is_said_as_the_models_error(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    (tmp_path / "m.py").write_text(RANK_ONE)
    exp = tmp_path / "sc.toml"
    exp.write_text(
        f'[model]\nname = "{tmp_path / "m.py"}:r1raise"\n[data]\nname = "digits"\n'
        f'[train]\nlr = 0.05\n[run]\nout_dir = "{tmp_path / "dlperf_runs"}"\n'
    )
    done = cli("scale", "run", str(exp), *WEAK, "--workers", "2", "--steps", "5",
               "--no-comm-split", "--threads-per-worker", "1", "--allow-oversubscribe")  # fmt: skip
    assert done.code == 1, done.err
    said = ["worker rank 1 failed: the model raised ValueError: rank one fails",
            *_frames(tmp_path / "m.py")]  # fmt: skip
    (run,) = RunStore.open(db).list_runs(kind="scale")
    assert (run.status, run.error) == ("failed", "\n".join(said))
    lines = done.err.splitlines()
    assert lines[-3:] == said, done.err
    assert "torch" not in done.err and "Traceback" not in done.err, done.err
