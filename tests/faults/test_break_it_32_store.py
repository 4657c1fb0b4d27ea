"""Break-it round 32, P3 (stores written by older dlperf), cause C1.

C1. A run stored before the commands' sections left `Experiment` (0cf54d3f) holds them in its
    config, its [detect] with the recipe keys that c217a742 moved to [train] and [run]
    (detect.epochs, now train.epochs). `export N`, `run --resume N` and a distill teacher
    refused it as if the user had typed an old key ("'detect.epochs' is 'train.epochs' now
    (give it as train.epochs)"), and a sweep and the MLflow export read no experiment in it.
    A stored run's config is read as stored (`stored_experiment`): its command sections,
    which no stored run needs, are left out; a file, --set and a dict given to dlperf.run keep
    the refusal.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlperf.config import Commands, Experiment, load_file, stored_experiment
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult, TrainedRun, fresh_store_url

Cli = Callable[..., CliResult]

# A run's config as dlperf stored it before 0cf54d3f (here 4c8df444^'s, the tester's v2.db:
# `dlperf run examples/digits_smallcnn.toml --set train.epochs=1`), wrapped.
OLD_CONFIG = json.loads(
    """{
    "model": {"name": "smallcnn", "kwargs": {}, "weights": null, "transfer": "scratch", "head":
    "new"},
    "data": {"name": "digits", "root": "data", "download": false, "loader": "tensor",
    "num_workers": 2, "in_memory": null, "max_memory_gb": 4.0, "val_fraction": 0.1,
    "test_fraction": 0.2, "split_seed": 0, "limit": null, "holdout": 0.0, "image_size": null,
    "mean": null, "std": null, "shape": [3, 32, 32], "num_classes": 10, "size": 2048},
    "train": {"epochs": 1, "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
    "nesterov": false, "weight_decay": 0.0005, "grad_clip": null, "label_smoothing": 0.0,
    "backbone_lr_scale": 1.0, "schedule": {"kind": "cosine", "milestones": [], "gamma": 0.1,
    "warmup_epochs": 0.0, "min_lr": 0.0}},
    "augment": {"crop_padding": 0, "flip": false, "cutout": 0, "batch_aug_m": 1},
    "target": {"accuracy": 0.95},
    "run": {"name": "digits_smallcnn", "seed": 0, "device": "auto", "precision": "fp32",
    "channels_last": false, "compile": false, "threads": null, "timing": "coarse", "warmup_steps":
    5, "log_every": 10, "out_dir": "dlperf_runs", "checkpoint": true},
    "scale": {"workers": [1, 2], "mode": "strong", "global_batch": null, "per_worker_batch": null,
    "steps": null, "epochs": null, "warmup_steps": 5, "synthetic": false, "backend": "auto",
    "comm": ["allreduce"], "framework": "torch", "strategy": [], "allreduce": [], "bucket_mb": [],
    "comm_split": true, "price_per_hour": null, "device": null, "on_failure": "continue",
    "allow_oversubscribe": false, "nnodes": 1, "node_rank": 0, "rdzv": null, "chunks": 5, "plots":
    true, "memory_cap_gb": null},
    "serve": {"host": "127.0.0.1", "port": 8000, "max_batch": 32, "max_wait_ms": 5.0, "queue":
    256, "threads": null, "max_body_mb": 8.0, "max_pixels": null},
    "detect": {"model": "ssdlite320_mobilenet_v3_large", "size": null, "epochs": 10, "batch": 8,
    "lr": 0.01, "momentum": 0.9, "weight_decay": 4e-05, "train_split": "train", "val_split":
    "val", "ap_method": "area", "seed": 0, "threads": null, "precision": "fp32"},
    "distill": {"unlabeled": null, "top_k": [100], "top_p": 1, "teacher": null, "student": null,
    "pretrain_epochs": null, "finetune_epochs": null, "finetune_lr": null, "score_batch": 256},
    "analyze": {"input": null, "batch": 1, "train": false, "precision": "fp32", "classes": null,
    "bias": true, "activations": "all"},
    "predict": {"device": null, "ppp": null, "peak_tflops": null, "flops": null, "measure": false,
    "reps": 10},
    "export": {"input": null, "num_classes": null, "opset": null, "dynamic_batch": false,
    "single_file": false, "rtol": 0.001, "atol": 1e-05},
    "infer": {"topk": 5, "batch": [1, 8, 32], "threads": null, "repeats": 20, "torch": null},
    "converge": {"x": null, "y": null, "metric": "loss", "key": null, "upto": null, "upto_step":
    null, "target": null, "form": "ensemble"}}"""
)
OLD_SECTIONS = {key: OLD_CONFIG[key] for key in Commands.model_fields}
# The experiment sections alone: what the run trains
EXPERIMENT = {key: OLD_CONFIG[key] for key in Experiment.model_fields}
MOVED_LINE = "'detect.epochs' is 'train.epochs' now"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bk32_old")


def _stored(url: str, tmp_path: Path) -> RunStore:
    """`url`'s store holding one killed run of OLD_CONFIG, its files in tmp_path."""
    config = copy.deepcopy(OLD_CONFIG)
    config["run"]["out_dir"] = str(tmp_path / "runs")
    store = RunStore.open(url)
    digest = Experiment.model_validate(EXPERIMENT).config_hash()
    run_id = store.create_run("digits_smallcnn", "run", config, digest, system={})
    store.update_run(run_id, status="killed")
    return store


def test_an_old_runs_command_sections_are_read_as_stored(
    cli: Cli, store_url: str, tmp_path: Path
) -> None:
    from dlperf.exporters import steps_per_epoch
    from dlperf.sweep.runner import point_key, run_key

    store = _stored(store_url, tmp_path)
    old = store.list_runs()[0]
    assert old.config["detect"]["epochs"] == 10  # as stored, on either backend
    result = cli("--db", store_url, "run", "--resume", str(old.id))
    assert result.code == 2, (result.out, result.err)
    assert MOVED_LINE not in result.err
    assert "it stopped before its first epoch ended; start it again" in result.err
    # a sweep finds it among its points; the MLflow export puts its epochs on the steps
    assert run_key(old, False) == point_key(Experiment.model_validate(EXPERIMENT).to_dict(), False)
    assert run_key(old, False) is not None
    series = {"val/accuracy": [(1, 0.9, 0.0)]}
    assert steps_per_epoch(old, series, []) == 1294 // 32  # digits' training images


def test_an_old_trained_run_is_exported_and_teaches(
    trained_digits: TrainedRun, tmp_path: Path
) -> None:
    from dlperf.deploy.export import from_run
    from dlperf.distill import teacher

    store, run_id, exp = trained_digits.copy_to(tmp_path)
    store.update_run(run_id, config={**store.get_run(run_id).config, **OLD_SECTIONS})
    assert from_run(store, run_id).meta.run_id == run_id
    assert teacher.stored(store, run_id).exp.train == exp.train


def test_a_file_set_and_a_given_dict_keep_the_refusal(tmp_path: Path) -> None:
    """What the user gives is checked; the same config read back from a store is not."""
    import dlperf

    assert stored_experiment(OLD_CONFIG, "run 1") == Experiment.model_validate(EXPERIMENT)
    with pytest.raises(UserError, match=MOVED_LINE):
        load_file(None, ["detect.epochs=3"])
    with pytest.raises(UserError, match=MOVED_LINE):
        dlperf.run(OLD_CONFIG, store=tmp_path / "given.db")
