"""dlperf.distributed.tf_worker without TensorFlow (an optional extra): the settings a
Keras worker cannot honour, one warning per key changed from its default (nested keys one
by one), and that the module imports without TensorFlow or torch. Its Keras paths run under
`make test` only where TensorFlow is installed (tests/distributed/test_tensorflow.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from dlperf.config import Experiment
from dlperf.distributed.tf_worker import KERAS_IGNORES, _changed, ignored_settings


def experiment(**sections: dict[str, Any]) -> Experiment:
    return Experiment.model_validate({"model": {"name": "smallcnn"}, "data": {"name": "digits"}}
                                     | sections)  # fmt: skip


def test_an_experiment_of_defaults_loses_nothing() -> None:
    assert ignored_settings(experiment()) == []


def test_lr_and_momentum_are_honoured() -> None:
    assert ignored_settings(experiment(train={"lr": 0.3, "momentum": 0.5, "epochs": 3})) == []


def test_each_ignored_key_is_one_warning_with_its_value_and_why() -> None:
    exp = experiment(
        train={"optimizer": "adamw", "schedule": {"kind": "cosine", "min_lr": 0.001}},
        augment={"flip": True},
        run={"precision": "bf16"},
    )
    assert ignored_settings(exp) == [
        "TensorFlow ignores train.optimizer = 'adamw': the Keras SGD takes only train.lr and "
        "train.momentum",
        "TensorFlow ignores train.schedule.kind = 'cosine': the Keras SGD takes only train.lr "
        "and train.momentum",
        "TensorFlow ignores train.schedule.min_lr = 0.001: the Keras SGD takes only train.lr "
        "and train.momentum",
        "TensorFlow ignores augment.flip = True: no augmentation",
        "TensorFlow ignores run.precision = 'bf16': fp32, uncompiled",
    ]


def test_changed_walks_nested_sections() -> None:
    default = {"a": 1, "b": {"c": 2, "d": 3}}
    assert _changed("s", {"a": 1, "b": {"c": 2, "d": 4}}, default) == [("s.b.d", 4)]
    assert _changed("s.x", 5, 5) == []


def test_every_ignored_key_exists_in_its_section() -> None:
    exp = experiment()
    for section, names, _ in KERAS_IGNORES:
        values = getattr(exp, section).model_dump()
        assert set(names) <= set(values), f"{section}: {set(names) - set(values)}"


def test_the_worker_module_imports_neither_tensorflow_nor_torch() -> None:
    probe = (
        "import sys, dlperf.distributed.tf_worker; "
        "print(sorted(m for m in ('tensorflow', 'torch', 'keras') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_keras_paths_need_tensorflow() -> None:
    pytest.importorskip("tensorflow", reason="TensorFlow is an optional extra")
    import tensorflow as tf

    from dlperf.distributed.tf_worker import weights

    nbytes, prints = weights([tf.Variable([[1.0, -2.0]]), tf.Variable([3.0])])
    assert nbytes == 3 * 4 and prints == (3.0, 3.0)
