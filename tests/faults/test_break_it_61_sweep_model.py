"""Break-it round 61, U1 cause 1: a sweep over `model.name` whose point's model raises in the
checks made before anything is stored (its factory raises, its forward raises, it imports a
missing module) was told "error: the model raised ValueError: boom" with the model's frames,
naming no point: which of the grid's models was it? The line now names the point and its
values first, as a point refused there is named; still exit 1 (the model's own error, as `dlperf
run` tells it), nothing stored.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

MODELS = """\
from torch import nn


def make(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))


def broken(num_classes=10, in_channels=1):
    raise ValueError("boom factory")


class Boom(nn.Module):
    def forward(self, x):
        raise RuntimeError("boom forward")


def fwdboom(num_classes=10, in_channels=1):
    return Boom()


def importerr(num_classes=10, in_channels=1):
    import nonexistent_mod_xyz  # noqa: F401
"""

BASE = """\
[model]
name = "m.py:make"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
"""

SWEEP = """\
base = "base.toml"
[grid]
"model.name" = ["m.py:make", "m.py:{bad}"]
"""


@pytest.mark.parametrize(
    ("bad", "raised"),
    [
        ("broken", "ValueError: boom factory"),
        ("fwdboom", "RuntimeError: boom forward"),
        ("importerr", "ModuleNotFoundError: No module named 'nonexistent_mod_xyz'"),
    ],
)
def test_a_points_model_raising_in_the_checks_is_named_by_its_point(
    cli: Cli, store: RunStore, tmp_path: Path, bad: str, raised: str
) -> None:
    (tmp_path / "m.py").write_text(MODELS)
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "sw.toml").write_text(SWEEP.format(bad=bad))
    done = cli("sweep", "sw.toml")
    assert done.code == 1, done.err
    first = done.err.splitlines()[0]
    assert first == f"error: sw.toml point 2 (model.name=m.py:{bad}): the model raised {raised}"
    assert '/m.py", line' in done.err  # the model's frames, as run shows them
    assert store.list_runs() == []
