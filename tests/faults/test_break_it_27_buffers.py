"""Break-it round 27, after P1 cause C1: a run's non-persistent buffers beyond `--resume`.

Checkpoints keep a model's non-persistent buffers (`register_buffer(..., persistent=False)`)
beside its state dict, and `--resume` put them back; every other reader of a run's checkpoint
rebuilt them at their starting values. With a model that counts its training forwards in such
a buffer and scales its scores by it:
- `dlperf export RUN_ID` exported scores scaled by the untrained count, and its parity check,
  comparing with the same rebuilt model, said "yes";
- distill's teacher scored the pool with the untrained count;
- `model.weights = "run:ID"` started from weights trained with another count than the model's.
Each now puts the run's buffers back after its weights: the model as the run left it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dlperf.config import load_experiment
from dlperf.deploy import runtime
from dlperf.deploy.export import export, from_run, run_onnx
from dlperf.distill import teacher
from dlperf.engine import checkpoint
from dlperf.engine.build import prepare_run
from dlperf.experiment.run import run_experiment
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from tests.faults.test_break_it_27_resume import MODEL  # m/npb.py: a buffer training changes

EXPERIMENT = """
[model]
name = "{model}:build"
{weights}
[data]
name = "digits"
limit = 128
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
out_dir = "{out}"
"""


class Trained:
    """One run of the counting model, trained once for this file's tests (each only reads
    it), with what its checkpoint keeps."""

    def __init__(self, root: Path) -> None:
        (root / "npb.py").write_text(MODEL)
        self.root = root
        self.store = RunStore.open(f"sqlite:///{root / 'dlperf.db'}")
        ran = run_experiment(load_experiment(self.experiment()), self.store)
        assert ran.status == "finished", ran.error
        self.run_id = ran.run_id
        kept = self.store.artifacts(ran.run_id)
        (where,) = [a["path"] for a in kept if a["kind"] == "checkpoint"]
        saved = torch.load(where, map_location="cpu", weights_only=True)
        self.weights: dict[str, torch.Tensor] = saved["model"]
        self.count = saved[checkpoint.BUFFERS]["count"].item()
        assert self.count == ran.summary.steps > 0  # a training forward a step

    def experiment(self, weights: str = "") -> Path:
        path = self.root / f"exp{len(weights)}.toml"
        model = self.root / "npb.py"
        path.write_text(EXPERIMENT.format(model=model, weights=weights, out=self.root / "runs"))
        return path

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """The trained model's scores, computed from its checkpoint by hand."""
        linear = x.flatten(1) @ self.weights["f.weight"].T + self.weights["f.bias"]
        return linear * (1.0 + 0.05 * self.count)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    return Trained(tmp_path_factory.mktemp("npb"))


def test_an_exported_run_scores_with_its_trained_buffers(trained: Trained, tmp_path: Path) -> None:
    out = tmp_path / "npb.onnx"
    report: dict[str, Any] = export(from_run(trained.store, trained.run_id), out, threads=1)
    assert report["parity"]
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    session = runtime.session(out, 1, cpu=True)
    onnx = run_onnx(session, x.numpy())  # in the graph's batch of 1
    np.testing.assert_allclose(onnx, trained.scores(x).numpy(), rtol=1e-4, atol=1e-5)


def test_a_teacher_scores_with_its_trained_buffers(trained: Trained) -> None:
    source = teacher.stored(trained.store, trained.run_id)
    images = torch.randint(0, 256, (5, 1, 8, 8), generator=torch.Generator().manual_seed(0))
    images = images.to(torch.uint8)
    scored = teacher.score(source, trained.store, images, torch.device("cpu"), 2)
    mean = torch.tensor(source.mean).view(-1, 1, 1)
    std = torch.tensor(source.std).view(-1, 1, 1)
    expected = torch.softmax(trained.scores((images.float() / 255 - mean) / std), dim=1)
    torch.testing.assert_close(scored.scores, expected)


def test_a_run_started_from_run_id_starts_with_its_trained_buffers(trained: Trained) -> None:
    # Starting weights are the model as the run left it: the weights were fit to scores
    # scaled by the run's count, not by a count started again.
    path = trained.experiment(f'weights = "run:{trained.run_id}"\nhead = "keep"')
    prepared = prepare_run(load_experiment(path), trained.store, NullReporter())
    model: Any = prepared.model
    assert model.count.item() == trained.count
    x = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), trained.scores(x))
