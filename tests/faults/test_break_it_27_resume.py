"""Break-it round 27, P1 cause C1: resuming a model whose forward reads a non-persistent buffer.

A model that counts its training forwards in a `persistent=False` buffer and scales its
scores by it resumed inexactly (test accuracy 0.9443 against the uninterrupted 0.9109): the
checkpoint was `model.state_dict()`, which leaves such buffers out, so the resumed model
started them at their initial values. The checkpoint now keeps them beside the state dict
(not in it: exports and `model.weights = run:ID` still read a plain state dict) and `--resume`
puts them back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.config import load_experiment
from dlperf.engine import checkpoint
from dlperf.engine.hooks import HOOKS_ENV
from dlperf.experiment.run import resume_run, run_experiment
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.hooks import SIGNAL_ENV, install

# The reporter's m/npb.py without its sleep: a forward that reads a buffer training changes.
MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.f = nn.Linear(64 * in_channels, num_classes)
        self.register_buffer("count", torch.zeros(()), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.count += 1
        return self.f(x.flatten(1)) * (1.0 + 0.05 * self.count)


def build(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return Net(num_classes, in_channels)
"""

EXPERIMENT = """
[model]
name = "{model}:build"
[data]
name = "digits"
limit = 128
[train]
epochs = 2
batch_size = 32
lr = 0.05
[run]
threads = 1
log_every = 1
"""


def test_a_non_persistent_buffer_resumes_exactly(
    cli: Callable[..., CliResult],
    store: RunStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "npb.py").write_text(MODEL)
    path = tmp_path / "exp.toml"
    path.write_text(EXPERIMENT.format(model=tmp_path / "npb.py"))
    reference = run_experiment(load_experiment(path), store)
    assert reference.status == "finished", reference.error
    per_epoch = reference.summary.steps_per_epoch

    # Stopped by SIGINT (Ctrl-C) in the first step after epoch 1's checkpoint, in this process
    # through the CLI's own stop handling: a process start is most of a run's time here.
    install(monkeypatch, "signal_in_exec", f"{per_epoch + 1}:INT")
    stopped = cli("run", str(path))
    for name in (HOOKS_ENV, SIGNAL_ENV):
        monkeypatch.delenv(name)
    assert stopped.code == 130, stopped.err
    run_id = reference.run_id + 1
    assert store.last_step(run_id, "val/acc1") == 1
    assert store.get_run(run_id).status == "killed"

    resumed = resume_run(run_id, store)
    assert resumed.status == "finished", resumed.error
    assert resumed.summary.steps == reference.summary.steps
    assert resumed.summary.test_loss == reference.summary.test_loss
    assert resumed.summary.test_accuracy == reference.summary.test_accuracy
    for key in ("train/loss", "val/loss", "val/acc1"):
        assert store.metrics(run_id, key) == store.metrics(reference.run_id, key), key
    # The buffer is kept beside the model's state dict, which stays a plain one (what exports
    # and `model.weights = run:ID` read), and loads with the weights-only loader: the final
    # checkpoint holds the count the uninterrupted run's does.
    counts = []
    for run in (run_id, reference.run_id):
        (where,) = [a["path"] for a in store.artifacts(run) if a["kind"] == "checkpoint"]
        saved = torch.load(where, map_location="cpu", weights_only=True)
        assert set(saved["model"]) == {"f.weight", "f.bias"}
        counts.append(saved[checkpoint.BUFFERS]["count"].item())
    assert counts == [2 * per_epoch] * 2  # a training forward a step
