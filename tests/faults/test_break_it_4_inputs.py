"""What the fourth break-it round found in the inputs (issue 41): a config string that is not
UTF-8 (a file name from the shell) stored with a traceback, an image folder's class named
in bytes that are not UTF-8 crashing `data describe`, the Python API's wrong types raising
foreign errors or storing a run on a device the host lacks, and an npz naming a class twice.
Each through the real entry point, each seen failing before its fix."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dlperf
from dlperf.errors import UserError
from dlperf.system import pick_device
from tests.conftest import CliResult

TINY = ("--set", "run.threads=1", "--set", "data.limit=64")

MODEL_FILE = """\
from torch import nn


class Base(nn.Module):
    def __init__(self, num_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))

    def forward(self, x):
        return self.net(x)
"""


def test_a_config_string_that_is_not_utf8_is_refused_in_one_line(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    tiny_exp(epochs=1)
    model = tmp_path / os.fsdecode(b"b\xe4se.py")  # as the shell hands such a name over
    model.write_text(MODEL_FILE)
    result = cli("run", "tiny.toml", *TINY, "--set", f'model.name="{model}:Base"')
    # before: the model was found and built, then the store's flush raised
    # UnicodeEncodeError (an 87-line traceback), exit 1
    assert result.code == 2, result.err
    assert result.err == (
        f"error: tiny.toml with --set: model.name: is not UTF-8: '{tmp_path}/b\\xe4se.py:Base' "
        "(rename the file or folder so that its name is UTF-8)\n"
    )
    runs = cli("runs", "list", "--json")
    assert runs.code == 0 and json.loads(runs.out) == []


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("data.root", b"/d/r\xe9", "data.root: is not UTF-8: '/d/r\\xe9'"),
        ("run.out_dir", b"o\xff", "run.out_dir: is not UTF-8: 'o\\xff'"),
        ("model.kwargs.tag", b"t\xe4", "model.kwargs: is not UTF-8: 't\\xe4' (at tag)"),
    ],
)
def test_every_config_string_must_be_utf8(
    cli: Callable[..., CliResult], key: str, value: bytes, said: str
) -> None:
    result = cli("config", "show", "--set", f'{key}="{os.fsdecode(value)}"')
    assert result.code == 2, result.err
    assert result.err == (
        f"error: config with --set: {said} (rename the file or folder so that its name is UTF-8)\n"
    )


def _image_folder(root: Path, classes: list[str], per_class: int = 6) -> None:
    from PIL import Image

    for split in ("train", "val"):
        for c, name in enumerate(classes):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                Image.new("RGB", (8, 8), (40 * c, 10 * i, 0)).save(folder / f"{i}.png")


def test_an_image_folder_class_named_in_bytes_not_utf8_is_described(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    _image_folder(tmp_path / "if", ["a", os.fsdecode(b"cl\xe9")])
    sets = ("--set", 'data.root="if"', "--set", "data.image_size=8")
    result = cli("data", "describe", "imagefolder", *sets, "--json")
    # before: matplotlib's set_text() refused 'cl\udce9' (a traceback), exit 1
    assert result.code == 0, result.err
    described = json.loads(result.out)
    assert described["classes"] == ["a", "cl\ufffd"]
    assert list(described["counts"]) == ["a", "cl\ufffd"]
    assert Path(described["plots"]["counts"]).is_file()


def _npz(path: Path, classes: list[str]) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (60, 1, 8, 8), dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(60) % 3, classes=np.array(classes))


def test_an_npz_that_names_a_class_twice_is_refused(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    tiny_exp(epochs=1)
    _npz(tmp_path / "dup.npz", ["a", "a", "b"])
    sets = ("--set", "data.name=npz", "--set", 'data.root="dup.npz"')
    result = cli("run", "tiny.toml", *TINY, *sets, "--set", "train.batch_size=8")
    # before: trained, exit 0, two classes shown as "a"
    assert result.code == 2, result.err
    assert result.err == (
        "error: dup.npz: 'classes' names a class more than once: a (give each class its own name)\n"
    )
    runs = cli("runs", "list", "--json")
    assert runs.code == 0 and json.loads(runs.out) == []


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (
            lambda: dlperf.analyze("resnet20", (3, 32, 32), batch="2"),  # type: ignore[arg-type]
            "batch is a whole number ≥ 1, got '2'",
        ),
        (
            lambda: dlperf.analyze("resnet20", (3, 32, 32), batch=1.5),  # type: ignore[arg-type]
            "batch is a whole number ≥ 1, got 1.5",
        ),
        (
            lambda: dlperf.analyze("resnet20", (3, 32, 32), train="no"),  # type: ignore[arg-type]
            "train is True or False, got 'no'",
        ),
    ],
    ids=["batch text", "batch float", "train text"],
)
def test_analyze_refuses_wrong_types_as_user_errors(call: Callable[[], Any], said: str) -> None:
    # before: TypeError ('<' between str and int), and torch's ValueError for train
    with pytest.raises(UserError) as caught:
        call()
    assert str(caught.value) == said


def _track(db: str, **given: Any) -> None:
    with dlperf.track("x", store=db, **given):
        pass


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"config": 5}, "config is a dict of JSON values, got int 5"),
        ({"config": [("a", 1)]}, "config is a dict of JSON values, got list [('a', 1)]"),
        (
            {"config": {"a": object()}},
            "config['a'] is not JSON-serialisable (object) (give numbers, text, lists or dicts)",
        ),
        (
            {"config": {"train": {"lr": {1.0, 2.0}}}},
            "config['train']['lr'] is not JSON-serialisable (set) (give numbers, text, lists "
            "or dicts)",
        ),
        (
            {"config": {"path": os.fsdecode(b"b\xe4se")}},
            "config['path'] is not UTF-8 text: 'b\\udce4se' (give numbers, text, lists or dicts)",
        ),
        (
            {"config": {("a", "b"): 1}},
            "config key ('a', 'b') is tuple: keys are text (write each key as a str)",
        ),
        (
            {"device": 5},
            "device is a name such as 'cpu' or 'cuda:0', or a torch.device, got int 5",
        ),
        (
            {"device": "banana"},
            "device: unknown device 'banana' (use auto, cpu, cuda, cuda:N or mps)",
        ),
    ],
    ids=[
        "config int",
        "config list",
        "config object",
        "config set",
        "config not utf8",
        "config tuple key",
        "device int",
        "banana",
    ],
)
def test_track_refuses_wrong_types_and_stores_nothing(
    db: str, given: dict[str, Any], said: str
) -> None:
    # before: TypeError, SQLAlchemy's StatementError, torch's RuntimeError; device=5 stored
    # a finished run on cuda:5 on a host without CUDA
    with pytest.raises(UserError) as caught:
        _track(db, **given)
    assert str(caught.value) == said
    assert dlperf.Store(db).runs() == []


def test_track_refuses_a_device_this_host_lacks_as_dlperf_run_does(db: str) -> None:
    with pytest.raises(UserError) as refused:  # what run.device = "cuda:99" says here
        pick_device("cuda:99")
    # before: a finished run stored with system.device "cuda:99"
    with pytest.raises(UserError) as caught:
        _track(db, device="cuda:99")
    assert str(caught.value) == f"device: {refused.value}"
    assert dlperf.Store(db).runs() == []


def test_track_still_takes_a_torch_device_and_a_json_config(db: str) -> None:
    import torch

    with dlperf.track(
        "x", config={"lr": 0.1, "tags": ["a", None]}, store=db, device=torch.device("cpu")
    ):
        pass
    (run,) = dlperf.Store(db).runs()
    assert run.status == "finished" and (run.system or {}).get("device") == "cpu"
    assert run.config == {"lr": 0.1, "tags": ["a", None]}
