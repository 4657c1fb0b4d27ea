"""One training program behind every launcher: the same experiment, with settings away from
their defaults (SGD with Nesterov and weight decay, clipping, label smoothing, a cosine
schedule, the channels-last memory format), trained by `dlperf run`, a DDP point of one worker
under a real torchrun, the emulated synchronous and asynchronous SGD of `dlperf staleness
--train` and (with Horovod built) a Horovod point of one worker, against a run in the
contiguous format Horovod trains in: each takes the same first batch to the same loss and
the same parameters; detection fine-tuning, a program of its own, takes the step of its
[detect] recipe. Each trainer saves its first step through the first_step test hook
(tests.hooks), and every step is seen by the hooks as the one training loop
(dlperf.engine.train_loop) took and counted it, from 1 up (tests.loop_probe)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.config import DetectJob, load_job
from dlperf.detect import finetune, ssd, voc
from dlperf.distributed import hvd_launch
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.hooks import install
from tests.loop_probe import add_probe, steps_seen

EXPERIMENT = """
[model]
name = "smallcnn"
[data]
name = "synthetic"
shape = [3, 8, 8]
size = 256
[train]
batch_size = 16
epochs = 1
lr = 0.2
nesterov = true
weight_decay = 0.01
grad_clip = 0.001
label_smoothing = 0.1
schedule = {{ kind = "cosine", min_lr = 0.01, warmup_epochs = 0.125 }}
[run]
seed = 3
threads = 1
channels_last = true
out_dir = "{out}"
"""
SCALE = ["--workers", "1", "--mode", "weak", "--per-worker-batch", "16", "--no-plots"]
SCALE += ["--warmup-steps", "1", "--steps", "4", "--repeat", "1", "--json"]


@pytest.fixture
def first_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    prefix = tmp_path / "first"
    install(monkeypatch, "first_step", str(prefix))
    add_probe(monkeypatch, prefix)
    return prefix


def load(prefix: Path, trainer: str) -> dict[str, object]:
    return torch.load(f"{prefix}.{trainer}.pt")


def assert_one_loop(prefix: Path, trainer: str, steps: int | None = None) -> None:
    """Every step of the trainer's launches (a run each) was taken in the one loop and
    counted 1, 2, ... as the hooks saw it; `steps` a launch, where given."""
    seen = steps_seen(prefix, trainer)
    assert seen and all(looped for _, looped in seen), f"{trainer}: a step outside the loop"
    counted = [step for step, _ in seen]
    launches = [i for i, step in enumerate(counted) if step == 1] + [len(counted)]
    for start, end in itertools.pairwise(launches):
        assert counted[start:end] == list(range(1, end - start + 1)), (trainer, counted)
        assert steps is None or end - start == steps, (trainer, counted)


def test_every_launcher_takes_the_same_first_step(
    cli: Callable[..., CliResult], tmp_path: Path, first_steps: Path, store: RunStore
) -> None:
    """The module's first step, clipped: grad_clip (0.001) is far under the first step's
    gradient norm, so a launcher that did not clip as a plain run does (its step, prepare, is
    tests/engine/test_step.py's) moves its parameters elsewhere. And the DDP point's 5th step
    (1 warm-up + 4 timed) takes the plain run's 5th step's learning rate: 16 steps an epoch
    at the point's global batch, as in the run, the cosine past its 2 warm-up steps. (Folded
    in from tests/distributed/test_study.py, whose schedule-and-clipping test of a one-worker
    point took a launch of its own.)"""
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(out=tmp_path / "runs"))
    run = cli("run", str(exp), "--json")
    assert run.code == 0, run.err
    scale = cli("scale", str(exp), *SCALE)
    assert scale.code == 0, scale.err
    assert json.loads(run.out)["steps_per_epoch"] == 16
    lrs = dict(store.metrics(json.loads(run.out)["run_id"], "train/lr"))
    (result,) = (tmp_path / "runs").glob("**/p0/result.json")
    (rank,) = json.loads(result.read_text())["ranks"]
    assert rank["main"]["lr"] == lrs[5] and lrs[2] < lrs[3] > lrs[5]  # warm-up, then cosine
    staleness = cli("staleness", "--train", str(exp), "--learners", "2", "--json")
    assert staleness.code == 0, staleness.err
    references = {trainer: load(first_steps, "run") for trainer in ("ddp", "sync", "async")}
    for trainer in ["run", *references]:  # run.channels_last reaches every torch launcher
        dumped = load(first_steps, trainer)
        assert dumped["x"].is_contiguous(memory_format=torch.channels_last), trainer
        assert dumped["params"]["0.weight"].is_contiguous(memory_format=torch.channels_last)
        assert not dumped["params"]["0.weight"].is_contiguous()
    if hvd_launch.horovodrun() is not None:
        horovod = cli("scale", str(exp), *SCALE, "--framework", "horovod", "--json")
        assert horovod.code == 0, horovod.err
        # Horovod reduces only contiguous tensors: it says so and trains in that format,
        # which draws other dropout masks; its reference is a run in that format too.
        assert any(
            "Horovod ignores run.channels_last" in w for w in json.loads(horovod.out)["warnings"]
        )
        contiguous = cli("run", str(exp), "--set", "run.channels_last=false", "--json")
        assert contiguous.code == 0, contiguous.err
        references["horovod"] = load(first_steps, "run")
    # A scale point warms up 1 step and times 4 (its compute-only copy has no hooks).
    for trainer in ("run", "sync", "async"):
        assert_one_loop(first_steps, trainer)
    for trainer in {"ddp", "horovod"} & references.keys():
        assert_one_loop(first_steps, trainer, 5)
    for trainer, reference in references.items():
        other = load(first_steps, trainer)
        assert torch.equal(other["x"], reference["x"]) and torch.equal(other["y"], reference["y"])
        # Thread counts differ between the launchers: the last bits may too.
        torch.testing.assert_close(
            other["loss"], reference["loss"], rtol=1e-6, atol=1e-7, msg=f"{trainer} loss"
        )
        assert other["params"].keys() == reference["params"].keys()
        for name, p in reference["params"].items():
            torch.testing.assert_close(other["params"][name], p, rtol=1e-5, atol=1e-7, msg=name)


def test_detection_fine_tuning_takes_its_recipes_step(tmp_path: Path, first_steps: Path) -> None:
    """The engine's step (prepare) of `dlperf detect finetune`: AdamW with beta1 = momentum
    and decoupled weight decay at the peak rate of its cosine schedule, on the detector's
    summed loss terms, done by hand on the same first batch from the same weights."""
    torch.set_num_threads(1)
    labels = ["__background__", "disc", "square"]
    voc.make_shapes(tmp_path, images=3, size=96, seed=1)
    data = voc.VocDataset(tmp_path, voc.load_split(tmp_path, "train"), labels)
    # detection's [train] and [run]: its preset, one epoch at batch 2
    exp = load_job(DetectJob, None, [], train={"epochs": 1, "batch_size": 2}).experiment
    cfg = exp.train
    torch.manual_seed(0)
    det = ssd.build("ssdlite320_mobilenet_v3_large", labels=labels, size=96)
    reference = ssd.build("ssdlite320_mobilenet_v3_large", labels=labels, size=96).model
    reference.load_state_dict(det.model.state_dict())
    finetune.train(det, data, cfg, exp.run, max_steps=1)
    first = load(first_steps, "detect")
    assert_one_loop(first_steps, "detect", 1)

    reference.train()
    params = [p for p in reference.parameters() if p.requires_grad]
    assert cfg.optimizer == "adamw"
    adamw = torch.optim.AdamW(
        params, lr=cfg.lr, betas=(cfg.momentum, 0.999), weight_decay=cfg.weight_decay
    )
    loss = torch.stack(list(reference(first["x"], first["y"]).values())).sum()
    loss.backward()
    adamw.step()
    torch.testing.assert_close(first["loss"], loss.detach(), rtol=1e-6, atol=1e-7)
    for name, p in reference.named_parameters():
        torch.testing.assert_close(first["params"][name], p.detach(), rtol=1e-5, atol=1e-7)
