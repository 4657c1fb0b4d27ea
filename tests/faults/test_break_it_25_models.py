"""The twenty-fifth break-it round, P1 (the user's own models): the CLI's line for a model's
errors, and `dlperf run`'s dry checks.

- B: an OSError the model's own code raised (its factory's OSError, its forward's
  ConnectionError) was told as the system's ("error: disk gone (the system named no file
  ...)"), with no word of the model.
- C: a forward that fails to read a file (np.load of a missing one) was blamed on the images
  ("the model rejects digits images of shape (1, 8, 8): FileNotFoundError ...").
- J: the dry checks did not use the run's batch size: a forward ending in .squeeze() at
  train.batch_size 1, or returning y[:4] at batch 32, failed only after the run was recorded.
- E: a factory asking for pretrained weights offline printed torch's "Downloading: ..." and
  then a URLError, with no fix.
- I: a zero-width layer (model.kwargs.width=0) printed torch's raw warnings, then blamed the
  images.
- H: a model file defining a class that is no nn.Module "defines no function or class".
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.faults.test_break_it_22_models import _unwrapped, _write
from tests.faults.test_break_it_24_models_a import _refused, _run

# --- B: an OSError of the model's own code ------------------------------------------------------

OWN_OS = """
import torch.nn as nn
def boom(num_classes=10, in_channels=1):
    raise OSError("disk gone")
class FwdOS(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.l = nn.Linear(64, num_classes)
    def forward(self, x):
        raise ConnectionError("parameter server unreachable")
def fwdos(num_classes=10, in_channels=1): return FwdOS(num_classes)
"""


@pytest.mark.parametrize(
    ("command", "factory", "expected"),
    [
        ("analyze", "boom", "error: the model raised OSError: disk gone"),
        ("run", "fwdos", "error: the model raised ConnectionError: parameter server unreachable"),
    ],
)
def test_an_oserror_of_the_models_own_code_is_the_models(
    cli: Callable[..., CliResult], tmp_path: Path, command: str, factory: str, expected: str
) -> None:
    if command == "analyze":
        done = cli("analyze", f"{_write(tmp_path, OWN_OS)}:{factory}", "--input", "1,8,8")
    else:
        done = _run(cli, tmp_path, OWN_OS, factory)
    assert done.code == 1, done.err
    assert expected in done.err, done.err
    assert "model.py" in done.err, done.err  # the model file's frame
    assert "the system named no file" not in done.err, done.err


# --- C: a forward that fails to read a file ------------------------------------------------------

READS = """
import numpy as np, torch.nn as nn
class FwdNp(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.l = nn.Linear(64, num_classes)
    def forward(self, x):
        self.stats = np.load("stats.npy")
        return self.l(x.flatten(1))
def fwdnp(num_classes=10, in_channels=1): return FwdNp(num_classes)
"""


def test_a_forward_that_fails_to_read_a_file_names_the_file_not_the_images(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    said = _refused(cli, db, tmp_path, READS, "fwdnp")
    assert "rejects" not in said and "images" not in said, said
    assert _unwrapped("model.py:fwdnp' failed to read stats.npy") in said, said
    assert _unwrapped("No such file or directory") in said, said
    assert _unwrapped("(at model.py:7)") in said, said  # the model's line that read it
    assert _unwrapped("read from the working directory") in said, said


# --- J: the run's own batch size ----------------------------------------------------------------

DIGITS_200 = {"name": "digits", "limit": 200}  # as _run's RUN

BATCHED = """
import torch.nn as nn
class Cap(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__(); self.l = nn.Linear(64, num_classes)
    def forward(self, x):
        return self.l(x.flatten(1))[:4]
def cap(num_classes=10, in_channels=1): return Cap(num_classes)
class Sq(Cap):
    def forward(self, x):
        return self.l(x.flatten(1)).squeeze()
def sq(num_classes=10, in_channels=1): return Sq(num_classes)
"""


@pytest.mark.parametrize(
    ("factory", "batch", "expected"),
    [
        ("cap", 32, "returns shape [4, 10] for a batch of 32 images"),
        ("sq", 1, "returns shape [10] for a batch of 1 image"),
    ],
)
def test_a_forward_that_breaks_at_the_runs_batch_size_is_refused_before_the_run(
    cli: Callable[..., CliResult], db: str, tmp_path: Path, factory: str, batch: int, expected: str
) -> None:
    said = _refused(cli, db, tmp_path, BATCHED, factory, f"train.batch_size={batch}")
    assert _unwrapped(expected) in said, said
    assert _unwrapped(f"train.batch_size {batch}") in said, said


def test_a_forward_that_breaks_at_an_evaluation_splits_last_batch_is_refused_before_the_run(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    """Evaluation keeps its incomplete last batch: a .squeeze() forward at a batch size whose
    val split ends in one image trained its first epoch, then failed evaluating it (found
    by fxG, left in round 25's first pass)."""
    from dlperf.config import Experiment
    from dlperf.data import load_data

    exp = Experiment.model_validate({"model": {"name": "smallcnn"}, "data": DIGITS_200})
    images = len(load_data(exp.data).val.labels)
    batch = next(b for b in range(4, images) if images % b == 1)
    said = _refused(cli, db, tmp_path, BATCHED, "sq", f"train.batch_size={batch}")
    assert _unwrapped("returns shape [10] for a batch of 1 image (the val split's last") in said
    assert "x.flatten(1)" in said, said


# --- E: a factory that fetches pretrained weights, offline -------------------------------------

PRETRAINED = """
import torch, torchvision
def tv(num_classes=10, in_channels=3):
    m = torchvision.models.resnet18(weights="DEFAULT")
    m.fc = torch.nn.Linear(512, num_classes)
    return m
"""


def test_a_factory_fetching_pretrained_weights_offline_says_so_in_one_line(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.error

    import torch.hub

    def offline(*args: object, **kwargs: object) -> None:  # never a real download in tests
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(torch.hub, "urlopen", offline)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))  # an empty hub cache
    done = cli("analyze", f"{_write(tmp_path, PRETRAINED)}:tv", "--input", "3,32,32")
    assert done.code == 2, done.err
    said = _unwrapped(done.err)
    assert done.err.startswith("error: ") and "Downloading" not in done.err, done.err
    assert _unwrapped("fetches pretrained weights from the network") in said, said
    assert _unwrapped(f"{tmp_path}/torch/hub/checkpoints") in said, said
    assert "weights=None" in said, said


# --- H: a model file whose class is no nn.Module -----------------------------------------------


def test_a_model_file_with_a_plain_class_is_not_said_to_define_no_class(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    path = _write(tmp_path, 'X = 3\nNAME = "net"\nclass Foo: pass\n')
    done = cli("analyze", f"{path}:build", "--input", "1,8,8")
    assert done.code == 2, done.err
    said = _unwrapped(done.err)
    assert _unwrapped("defines no function or nn.Module class (found: class Foo") in said, said


# --- I: a zero-size layer -------------------------------------------------------------------------

WIDE = """
import torch.nn as nn
def build(num_classes=10, in_channels=1, width=8):
    return nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(width, num_classes),
    )
"""


def test_a_zero_size_layer_is_named_with_the_kwarg_not_blamed_on_the_images(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        said = _refused(cli, db, tmp_path, WIDE, "build", "model.kwargs.width=0")
    assert [str(w.message) for w in caught] == []  # torch's 4 raw lines before
    assert "rejects" not in said, said
    assert _unwrapped("has layers of no size: 0.weight [0, 1, 3, 3]") in said, said
    assert _unwrapped("model.kwargs: width=0") in said, said
