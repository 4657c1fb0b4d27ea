"""dlperf.config.experiment: the sections of an experiment, their cross-key checks, the hash
of what is trained, and the keys a model-argument command refuses."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from dlperf.config.experiment import (
    Experiment,
    ModelConfig,
    ProfileConfig,
    RunConfig,
    refused_model_keys,
)


def invalid(data: dict[str, Any], context: dict[str, Any] | None = None) -> str:
    with pytest.raises(ValidationError) as e:
        Experiment.model_validate(data, context=context)
    return str(e.value.errors()[0]["msg"]).removeprefix("Value error, ")


def test_weights_without_transfer_mean_finetune_and_scratch_otherwise() -> None:
    assert ModelConfig().transfer == "scratch"
    assert ModelConfig.model_validate({"weights": "run:3"}).transfer == "finetune"
    given = ModelConfig.model_validate({"weights": "run:3", "transfer": "scratch"})
    assert given.transfer == "scratch"


def test_nesterov_needs_momentum() -> None:
    msg = invalid({"train": {"nesterov": True, "momentum": 0.0}})
    assert msg == "train.nesterov: Nesterov momentum needs train.momentum > 0"
    # adamw ignores nesterov: no error
    Experiment.model_validate({"train": {"optimizer": "adamw", "nesterov": True, "momentum": 0.0}})


def test_multistep_needs_a_milestone() -> None:
    msg = invalid({"train": {"schedule": {"kind": "multistep"}}})
    assert msg == "train.schedule.milestones: multistep needs at least one epoch"


def test_transfer_needs_weights_except_when_only_counting() -> None:
    data = {"model": {"transfer": "feature-extract"}}
    assert invalid(data).startswith("model.transfer: feature-extract needs model.weights")
    exp = Experiment.model_validate(data, context={"architecture_only": True})
    assert exp.model.transfer == "feature-extract"


def test_cosine_min_lr_cannot_exceed_lr() -> None:
    msg = invalid({"train": {"lr": 0.1, "schedule": {"kind": "cosine", "min_lr": 0.2}}})
    assert msg == "train.schedule.min_lr: must not exceed train.lr 0.1 (got 0.2)"
    Experiment.model_validate({"train": {"lr": 0.1, "schedule": {"kind": "cosine", "min_lr": 0.1}}})


def test_target_accuracy_is_a_fraction() -> None:
    assert invalid({"target": {"accuracy": 95}}) == "is a fraction in (0, 1], e.g. 0.95"
    assert invalid({"target": {"accuracy": 0.0}}) == "is a fraction in (0, 1], e.g. 0.95"
    assert Experiment.model_validate({"target": {"accuracy": 1.0}}).target.accuracy == 1.0


def test_a_synthetic_set_larger_than_memory_is_refused_before_allocation() -> None:
    data = {"data": {"name": "synthetic", "shape": [3, 2**20, 2**20], "size": 2**20}}
    msg = invalid(data)
    assert msg.startswith("data.shape [3, 1048576, 1048576]: the synthetic set's ")
    # by hand: 2**20 training images + 2 * 2**17 held out each
    assert f"{2**20 + 2 * 2**17} images" in msg
    assert msg.endswith("(give a smaller data.shape or data.size)")


def test_run_name_refuses_control_characters_and_threads_say_the_count_error() -> None:
    with pytest.raises(ValidationError, match="control characters"):
        RunConfig(name="a\x1bb")
    with pytest.raises(ValidationError) as e:
        RunConfig.model_validate({"threads": 0})
    assert [x["type"] for x in e.value.errors()] == ["greater_than_equal"]
    with pytest.raises(ValidationError) as e:
        RunConfig.model_validate({"threads": "many"})
    assert [x["type"] for x in e.value.errors()] == ["literal_error"]
    assert RunConfig.model_validate({"threads": "auto"}).threads == "auto"


def test_profile_steps_count_only_when_enabled() -> None:
    assert ProfileConfig(warmup=2, active=3).steps == 0
    assert ProfileConfig(enabled=True, warmup=2, active=3).steps == 5


def test_config_hash_ignores_names_paths_and_profiling_but_not_what_is_trained() -> None:
    base = Experiment()
    h = base.config_hash()
    assert len(h) == 16 and int(h, 16) >= 0
    same = Experiment.model_validate(
        {
            "run": {
                "name": "x",
                "out_dir": "/elsewhere",
                "log_every": 3,
                "profile": {"enabled": True},
            }
        }
    )
    assert same.config_hash() == h
    # The stored runs' hashes: a registry model's (smallcnn on digits) must never change, or
    # every sweep point and distill stage stored before trains again. This value is the one
    # the code of before round 30 (the command sections inside Experiment) gave it.
    assert h == "ffceb6dce126d9bc"
    assert Experiment.model_validate({"train": {"lr": 0.01}}).config_hash() != h
    assert Experiment.model_validate({"run": {"seed": 1}}).config_hash() != h
    assert base.to_dict()["run"]["name"] is None  # to_dict is left whole


def test_refused_model_keys() -> None:
    assert refused_model_keys(ModelConfig(), "resnet18", ("kwargs",)) is None
    named = ModelConfig(name="smallcnn")
    assert refused_model_keys(named, "resnet18", ()) == (
        "model.name='smallcnn' disagrees with the model argument 'resnet18'"
    )
    assert refused_model_keys(named, "smallcnn", ()) is None
    one = ModelConfig(head="keep")
    assert refused_model_keys(one, "x", ()) == "model.head: this command cannot honour it"
    two = ModelConfig.model_validate({"weights": "run:1", "kwargs": {"a": 1}})
    assert refused_model_keys(two, "x", ("kwargs",)) == (
        "model.weights, model.transfer: this command cannot honour them"
    )
