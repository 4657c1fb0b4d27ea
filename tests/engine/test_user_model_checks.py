"""A user's model and data that cannot train as a classifier are refused before the run is
recorded: one line saying what came and what was expected, exit 2, nothing stored.

The models are real model files (`model.name = "file.py:factory"`) run through the real
entry point; each used to fail at the first step with the loss's or the optimizer's
traceback, and the run was left stored as failed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from dlperf.data import ImageData, Split
from dlperf.data.sources import too_few_classes
from dlperf.engine.checks import (
    check_classes,
    check_classifier,
    check_finite,
    dry_forward,
    misfit,
)
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult

MODELS = """
import torch
from torch import nn


class Scalar(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.LazyLinear(1)

    def forward(self, x):
        return self.fc(x.flatten(1)).sum()


class Pair(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.fc = nn.LazyLinear(num_classes)

    def forward(self, x):
        y = self.fc(x.flatten(1))
        return y, y


# Scores alone in eval mode, auxiliary outputs too in training mode (as googlenet).
class Auxiliary(Pair):
    def forward(self, x):
        return super().forward(x) if self.training else self.fc(x.flatten(1))


class Labels(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.fc = nn.LazyLinear(num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1)).argmax(1, keepdim=True).expand(-1, self.fc.out_features)


def three(**kw):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(3))


def scalar(**kw):
    return Scalar()


def feature_map(in_channels, **kw):
    return nn.Conv2d(in_channels, 10, 3)


def pair(num_classes, **kw):
    return Pair(num_classes)


def auxiliary(num_classes, **kw):
    return Auxiliary(num_classes)


def labels(num_classes, **kw):
    return Labels(num_classes)


def no_parameters(num_classes, **kw):
    return nn.Sequential(nn.Flatten(), nn.AdaptiveAvgPool1d(num_classes))


class TwoInputs(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.fc = nn.LazyLinear(num_classes)

    def forward(self, x, y):
        return self.fc(x.flatten(1))


def two_inputs(num_classes, **kw):
    return TwoInputs(num_classes)


def fits(num_classes, **kw):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))
"""

# 64 digits (10 classes, 8x8 grey): the check comes before the first step in any case.
EXP = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
[run]
threads = 1
warmup_steps = 1
"""

EXPECTED = "expected a classifier's scores, shape [batch, classes]: [2, 10] for 2 images"


@pytest.fixture
def exp(tmp_path: Path) -> Path:
    (tmp_path / "net.py").write_text(MODELS)
    path = tmp_path / "exp.toml"
    path.write_text(EXP)
    return path


def _one_line(result: CliResult, store: RunStore) -> str:
    lines = result.err.strip().splitlines()
    assert result.code == 2, result.err
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    assert store.list_runs() == [], "a mistake caught up front leaves nothing in the store"
    return lines[0]


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("three", f"model 'net.py:three' returns shape [2, 3]; {EXPECTED}"),
        ("scalar", f"model 'net.py:scalar' returns shape []; {EXPECTED}"),
        ("feature_map", f"model 'net.py:feature_map' returns shape [2, 10, 6, 6]; {EXPECTED}"),
        ("pair", f"model 'net.py:pair' returns a tuple, not a tensor; {EXPECTED}"),
        ("labels", "model 'net.py:labels' returns torch.int64 values; expected float scores"),
        (
            "auxiliary",
            f"model 'net.py:auxiliary' returns in training mode a tuple, not a tensor; {EXPECTED}",
        ),
        ("no_parameters", "model 'net.py:no_parameters' has no parameters to train"),
        (
            "two_inputs",
            "the model's forward(x, y) needs 2 arguments: dlperf feeds it one tensor, a batch "
            "of images (give y a default (y=None)",
        ),
    ],
)
def test_a_model_that_does_not_fit_the_task_is_one_line(
    cli: Callable[..., CliResult], store: RunStore, exp: Path, factory: str, said: str
) -> None:
    result = cli("run", str(exp), "--set", f"model.name=net.py:{factory}")
    # model.name is stored with the file's path made absolute, and the line names it so
    assert said.replace("'net.py:", f"'{exp.parent}/net.py:") in _one_line(result, store)


def test_the_line_says_how_to_size_the_model(
    cli: Callable[..., CliResult], store: RunStore, exp: Path
) -> None:
    line = _one_line(cli("run", str(exp), "--set", "model.name=net.py:three"), store)
    assert line.endswith(
        "(end the model in one score per class (10); a factory that takes num_classes gets "
        "the data's count)"
    )


def test_a_model_that_fits_trains(
    cli: Callable[..., CliResult], store: RunStore, exp: Path
) -> None:
    result = cli("run", str(exp), "--set", "model.name=net.py:fits")
    assert result.code == 0, result.err
    (run,) = store.list_runs()
    assert run.status == "finished"


def test_a_sweep_point_with_a_model_that_does_not_fit_refuses_the_sweep_in_one_line(
    cli: Callable[..., CliResult], store: RunStore, exp: Path, tmp_path: Path
) -> None:
    """A sweep's points go through the same check, all of them before the first runs: the
    sweep is refused in one line naming the point, and nothing is stored."""
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('base = "exp.toml"\n[grid]\n"model.name" = ["net.py:three"]\n')
    said = _one_line(cli("sweep", str(sweep)), store)
    assert said.startswith(f"error: {sweep} point 1 (model.name=net.py:three): "), said
    assert f"model '{tmp_path}/net.py:three' returns shape [2, 3]; {EXPECTED}" in said


def test_a_scale_study_of_a_model_that_does_not_fit_is_one_line(
    cli: Callable[..., CliResult], store: RunStore, exp: Path
) -> None:
    """Its workers build the model through the same check; the study checks it once before
    launching any, so the mistake is one line and no point is stored."""
    args = ["--workers", "1", "--mode", "weak", "--per-worker-batch", "8", "--steps", "2"]
    result = cli("scale", str(exp), "--set", "model.name=net.py:three", *args)
    said = f"model '{exp.parent}/net.py:three' returns shape [2, 3]; {EXPECTED}"
    assert said in _one_line(result, store)
    assert store.find_study("scale net.py:three", "scale") is None


def _npz(path: Path, labels: list[int]) -> Path:
    images = np.random.default_rng(0).integers(0, 256, (len(labels), 1, 8, 8), dtype=np.uint8)
    np.savez(path, images=images, labels=np.array(labels))
    return path


def test_a_data_set_of_one_class_is_refused_before_training(
    cli: Callable[..., CliResult], store: RunStore, exp: Path, tmp_path: Path
) -> None:
    data = _npz(tmp_path / "one.npz", [0] * 60)  # labels 3 alone leave 0-2 imageless (round 28)
    args = ["--set", "data.name=npz", "--set", f"data.root={data}", "--set", "train.batch_size=8"]
    line = _one_line(cli("run", str(exp), *args, "--set", "data.limit=40"), store)
    assert line.startswith("error: the training split of npz holds images of class 0 only: a")
    assert "a classifier needs at least 2 classes" in line


def test_a_limit_that_leaves_one_class_says_so(
    cli: Callable[..., CliResult], store: RunStore, exp: Path, tmp_path: Path
) -> None:
    # Half the images are of each class; data.limit keeps one training image.
    data = _npz(tmp_path / "two.npz", [0, 1] * 30)
    args = ["--set", "data.name=npz", "--set", f"data.root={data}", "--set", "train.batch_size=1"]
    line = _one_line(cli("run", str(exp), *args, "--set", "data.limit=1"), store)
    assert line.endswith("(train on more of it (a larger data.limit))")  # no holdout set


def _data(labels: list[int], num_classes: int) -> ImageData:
    split = Split(torch.tensor(labels), torch.zeros(len(labels), 1, 2, 2, dtype=torch.uint8))
    return ImageData("set", split, split, split, num_classes, (1, 2, 2), classes=["a", "b"])


def test_check_classes_counts_the_labels_present() -> None:
    check_classes(_data([0, 1, 0], 2), None)
    with pytest.raises(UserError, match="holds images of class b only"):
        check_classes(_data([1, 1], 2), None)
    with pytest.raises(UserError, match="holds images of no labels"):
        check_classes(_data([], 2), None)


def test_too_few_classes_names_only_the_keys_that_cut_the_training_split() -> None:
    one = Split(torch.tensor([1, 1]), torch.zeros(2, 1, 2, 2, dtype=torch.uint8))
    both = Split(torch.tensor([0, 1]), torch.zeros(2, 1, 2, 2, dtype=torch.uint8))
    data = ImageData("set", one, both, both, 2, (1, 2, 2), classes=["a", "b"])
    # neither data.limit nor data.holdout set: both were named all the same
    refused = too_few_classes(data, None)
    assert refused is not None
    assert (
        refused.hint
        == "train on more of it (more images of each class, or a smaller data.val_fraction)"
    )
    assert (r := too_few_classes(data, 4)) and r.hint == "train on more of it (a larger data.limit)"
    held = replace(data, unlabeled=one)
    assert (
        r := too_few_classes(held, None)
    ) and r.hint == "train on more of it (a smaller data.holdout)"


def test_check_classifier_takes_a_fitting_model() -> None:
    model = nn.Linear(4, 10)
    check_classifier(model, model(torch.zeros(2, 4)), 10, "m")
    with pytest.raises(UserError, match=r"returns shape \[2, 9\]"):
        check_classifier(model, torch.zeros(2, 9), 10, "m")
    model.requires_grad_(False)  # every weight frozen: nothing would train
    with pytest.raises(UserError, match="has 50 parameters, all frozen"):
        check_classifier(model, model(torch.zeros(2, 4)), 10, "m")


class Normed(nn.Module):
    """Sound on any real image, NaN on an all-zero one (0 / 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.h = nn.Linear(4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.h(x / x.norm(dim=1, keepdim=True))


def test_check_finite_refuses_nan_scores_of_the_model_not_of_zero_images() -> None:
    model = Normed()
    zeros = model(torch.zeros(2, 4))
    assert torch.isnan(zeros).all()
    check_finite(model, zeros, [4], "'m'")  # random images give finite scores: not refused
    with torch.no_grad():
        model.h.weight[0, 0] = float("nan")
    with pytest.raises(UserError, match=r"^model 'm' gives NaN or inf scores for finite images"):
        check_finite(model, model(torch.zeros(2, 4)), [4], "'m'")


class Refuses(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("no image will do")


def test_misfit_finds_the_smallest_side_a_lazy_model_takes() -> None:
    # A 5x5 kernel, then a lazy head: the sides tried double to 8, which would size the head
    # for 8x8 and make 5, 6 and 7 fail after it, were every try not made on a copy.
    lazy = nn.Sequential(nn.Conv2d(1, 4, 5), nn.Flatten(), nn.LazyLinear(2))
    refused = misfit(lazy, (1, 1, 1), "npz")
    assert refused is not None
    assert refused.message == (
        "npz images of 1x1 are too small for the model: the smallest it takes is 5x5"
    )
    assert misfit(Refuses(), (1, 1, 1), "npz") is None  # no size will do: the model's own error
    hwc = misfit(Refuses(), (32, 32, 3), "npz")
    assert hwc is not None and "look channels-last (N, H, W, C)" in hwc.message


def test_the_training_mode_forward_leaves_the_model_as_it_was() -> None:
    """Its batch-norm statistics and count are put back: the run starts from the model it
    built, whatever the check ran."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(3))
    dry_forward(model, (1, 6, 6), "rejects")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    output = dry_forward(model, (1, 6, 6), "rejects", training=True)
    assert isinstance(output, torch.Tensor) and output.shape == (2, 3)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "buffers moved"
    assert not model.training
