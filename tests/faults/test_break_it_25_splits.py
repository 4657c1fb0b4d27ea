"""Break-it round 25, fxK: a split, data.holdout or data.limit that leaves a class no
training image, on every data set (round 25's fxB refused it for imagefolder's validation
split only).

Before: digits with data.test_fraction=0.999 described 2 training images in 2 classes and 0
in the other 8, without a word: the run trained on 2 classes and the test accuracy counted
the other 8. data.val_fraction, data.holdout and data.limit (the first N training images)
could empty a class as silently. Now `dlperf run` refuses it in one line (as it refuses a
training split of one class) and `data describe` warns of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.data.sources import too_few_classes
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def refusal(**keys: object) -> UserError | None:
    """What training says of digits split by `keys` (None: it trains)."""
    cfg = DataConfig.model_validate({"name": "digits", **keys})
    data = load_data(cfg)
    return too_few_classes(data, cfg.limit)


def _short_limit() -> int:
    """A data.limit whose first training images of digits (at the default split_seed) hold
    several classes but not all 10: one short of the first image of the class met last."""
    first: dict[int, int] = {}
    for i, label in enumerate(load_data(DataConfig(name="digits")).train.labels.tolist()):
        first.setdefault(label, i)
    return max(first.values())


def test_run_refuses_and_describe_warns(cli: Cli, tiny_exp: Callable[..., Path]) -> None:
    """The round's example (0.999: 2 training images in 2 classes, 8 classes tested
    untrained) at 0.995, which leaves the target's validation split an image."""
    sets = ("--set", "data.test_fraction=0.995", "--set", "train.batch_size=1")
    r = cli("run", str(tiny_exp(epochs=1)), *sets)
    one_line(r, 2, "data.test_fraction 0.995", "no training image", "the model would never see")
    assert "and 2 more" in r.err, r.err  # 5 classes: the first 3 named
    for fraction in ("0.995", "0.999"):
        args = ("--set", f"data.test_fraction={fraction}", "--json")
        r = cli("data", "describe", "digits", *args)
        assert r.code == 0, r.err
        (warning,) = json.loads(r.out)["warnings"]
        assert f"data.test_fraction {fraction}" in warning, warning
        assert "`dlperf run` refuses it" in warning, warning


@pytest.mark.parametrize(
    ("key", "value"),
    [("test_fraction", 0.99), ("val_fraction", 0.98), ("holdout", 0.98), ("limit", None)],
)
def test_the_key_that_emptied_a_class_is_named_with_fixes(key: str, value: float | None) -> None:
    """Each key that can take a class's last training image is named, with a data.split_seed
    that keeps every class and a value of the key that does; both are checked."""
    given = value if value is not None else _short_limit()
    refused = refusal(**{key: given})
    assert refused is not None
    assert refused.message.startswith(f"data.{key} {given:g}"), refused.message
    assert "no training image" in refused.message and "class" in refused.message
    seed = re.search(r"data\.split_seed = (\d+)", refused.hint or "")
    assert seed is not None, refused.hint
    assert refusal(**{key: given, "split_seed": int(seed[1])}) is None
    bound = re.search(rf"data\.{key} = ([0-9.]+)", refused.hint or "")
    assert bound is not None, refused.hint
    assert refusal(**{key: float(bound[1]) if value is not None else int(bound[1])}) is None


def test_limits_the_examples_use_keep_every_class() -> None:
    """data.limit=200 on digits (the docs' and tests' limit) keeps each class, as do the
    default splits of digits and mnist5k."""
    assert refusal(limit=200) is None
    assert refusal() is None
    data = load_data(DataConfig(name="mnist5k"))
    assert too_few_classes(data) is None


def test_an_unlabelled_pool_is_left_out() -> None:
    """A distillation's unlabelled pool uses no label: data.limit=5 of digits (5 of its 10
    classes) stays a pool of 5 images."""
    from dlperf.distill import pool

    assert len(pool._read(DataConfig(name="digits", limit=5), None).train) == 5


def test_a_class_the_set_has_no_training_image_of_is_named(tmp_path: Path) -> None:
    """A CIFAR test batch holding a class its training batches lack: no key took it."""
    import numpy as np

    from tests.faults.test_break_it_21_data import NAMES, batch, write_cifar

    nine = batch(labels=(np.arange(20) % 9).tolist())  # classes 0..8
    write_cifar(tmp_path, over={f"data_batch_{i}": nine for i in range(1, 6)})
    cfg = DataConfig(name="cifar10", root=str(tmp_path))
    refused = too_few_classes(load_data(cfg), cfg.limit)
    assert refused is not None
    assert refused.message.startswith(
        f"the training split of cifar10 holds no image of class {NAMES[9]}:"
    )
    assert refused.hint == "give it training images"
