"""The staleness study as dlperf.experiment records it: both runs start from the experiment's
weights, stream their metrics to the store while they train, and a diverged loss fails a run
as it fails `dlperf run`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.config import load_experiment
from dlperf.data import load_data
from dlperf.engine import async_sgd
from dlperf.engine.build import build_model
from dlperf.engine.hooks import HOOKS_ENV, StepEnd
from dlperf.experiment import staleness
from dlperf.models.transfer import head_name
from dlperf.store import RunStore
from tests.conftest import CliResult

SMALL = ["data.limit=160", "run.log_every=1"]  # every step's loss stored as it is taken
STOP_AT = 7  # after the async run's first epoch (5 steps of 32 of the 160 images' training split)
# dlperf run's message for a loss that is not finite (dlperf.engine.loop.Diverged) of an fp32
# run that does not clip: run.precision = "fp32" is not advised, as it is in force
DIVERGED = re.compile(
    r"loss became (nan|inf|-inf) at step \d+ \(epoch 1\); try a lower train\.lr \(now [\d.e+]+\) "
    r"or train\.grad_clip = 1\.0"
)


class StopAsync:
    """A hook that stops the async run after step STOP_AT as Ctrl-C would: the study's process
    ends there, mid-epoch, before the run's summary exists."""

    def start(self, trainer: str, model: torch.nn.Module) -> None:
        pass

    def step_end(self, event: StepEnd) -> None:
        if event.trainer == "async" and event.step == STOP_AT:
            raise KeyboardInterrupt


def test_a_run_stopped_mid_training_keeps_the_metrics_it_streamed(
    tiny_exp: Callable[..., Path], store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HOOKS_ENV, f"{__name__}:StopAsync")
    exp = load_experiment(tiny_exp(epochs=3), SMALL)
    with pytest.raises(KeyboardInterrupt):
        staleness.study(exp, {"L1": 1.0, "L2": 0.5}, store)
    sync, stopped = sorted(store.list_runs(kind="staleness"), key=lambda r: r.id)
    assert sync.status == "finished" and stopped.status == "killed"
    assert stopped.name == "smallcnn async" and stopped.summary == {}
    per_epoch = sync.summary["steps_per_epoch"]
    assert per_epoch < STOP_AT  # the stop lands in the second epoch
    losses = store.metrics(stopped.id, "train/loss")
    assert [step for step, _ in losses] == list(range(1, STOP_AT + 1))
    assert [step for step, _ in store.metrics(stopped.id, "val/acc1")] == [1]
    # The finished run streamed the same keys, all of them.
    assert len(store.metrics(sync.id, "train/loss")) == 3 * per_epoch
    assert {"epoch/train_loss", "val/loss", "val/acc1"} <= set(store.metric_keys(stopped.id))


def test_a_diverged_async_run_fails_as_dlperf_run_says_it(
    cli: Callable[..., CliResult], store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    path = tiny_exp(epochs=2)
    sets = [f"--set={s}" for s in [*SMALL, "train.lr=1e12", "train.momentum=0.0"]]
    r = cli("staleness", "--train", str(path), "--learners", "2", *sets, "--json")
    assert r.code == 1, r.err
    doc = json.loads(r.out)
    for mode in ("sync", "async"):
        run = store.get_run(doc[mode]["run_id"])
        assert run.status == "failed" and DIVERGED.fullmatch(run.error or ""), run.error
        assert doc[mode] == {"run_id": run.id, "status": "failed", "error": run.error}
        # The losses up to the bad one were streamed; the bad one is the last.
        losses = [v for _, v in store.metrics(run.id, "train/loss")]
        assert losses and not torch.tensor(losses[-1]).isfinite()
    assert "figure" not in doc  # nothing to draw
    r = cli("staleness", "--train", str(path), "--learners", "2", *sets)
    assert r.code == 1 and r.out == ""
    ids = sorted(run.id for run in store.list_runs(kind="staleness"))[-2:]
    said = [f"run {i} failed: {store.get_run(i).error}" for i in ids]
    assert r.err.splitlines()[-2:] == said
    # `dlperf run` of the same experiment: the same line, the same message.
    r = cli("run", str(path), *sets)
    assert r.code == 1
    [run] = store.list_runs(kind="run")
    assert (
        DIVERGED.fullmatch(run.error or "")
        and r.err.splitlines()[-1] == f"run {run.id} failed: {run.error}"
    )


def test_both_runs_start_from_the_weights_and_freeze_the_backbone(
    tiny_exp: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both runs of a feature-extract study start from model.weights and train the head alone."""
    source = load_experiment(tiny_exp(epochs=1), ["data.limit=160", "run.seed=7"])
    weights = build_model(source, load_data(source.data), torch.device("cpu")).state_dict()
    torch.save(weights, tmp_path / "weights.pt")
    start = [f'model.weights="{tmp_path / "weights.pt"}"', 'model.transfer="feature-extract"']
    exp = load_experiment(tiny_exp(epochs=1), ["data.limit=160", *start])
    trained = []
    original = async_sgd.train

    def train(*args: Any, **kwargs: Any) -> Any:
        trained.append(args[2])  # the model
        return original(*args, **kwargs)

    monkeypatch.setattr(async_sgd, "train", train)
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")
    staleness.study(exp, {"L1": 1.0, "L2": 0.5}, store)
    assert len(trained) == 2
    head = head_name(trained[0]) + "."
    for model in trained:
        for key, value in model.state_dict().items():
            assert torch.equal(value, weights[key]) != key.startswith(head), key


def test_the_study_document_is_each_mode_as_dlperf_run_json_gives_it() -> None:
    """A finished run's entry is its curve then its summary; a failed one is `dlperf run
    --json`'s failed document; `failed` lists only those."""
    from dlperf.records import RunResult

    hist = {"0": 3, "1": 9}
    done = staleness.TrainedRun(4, (0.5, None), 5, None, 0.7, 0.75, hist)
    lost = RunResult(5, "failed", error="loss became nan at step 3 (epoch 1)")
    study = staleness.StalenessStudy(2, {"L1": 1.0}, {"sync": done, "async": lost})
    assert study.failed == [lost]
    assert study.to_dict() == {
        "study_id": 2,
        "learners": {"L1": 1.0},
        "sync": {"run_id": 4, "val_acc1": [0.5, None], "steps_per_epoch": 5,
                 "val_accuracy": None, "val_loss": 0.7, "mean_staleness": 0.75,
                 "staleness_histogram": hist},
        "async": {"run_id": 5, "status": "failed", "error": "loss became nan at step 3 (epoch 1)"},
    }  # fmt: skip
    assert json.loads(json.dumps(study.to_dict())) == study.to_dict()
