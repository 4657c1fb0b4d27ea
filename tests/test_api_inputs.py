"""What the public API's functions take: a store as a path, a URL, a `Store` or a `RunStore`
(anything else is a UserError naming it), and `analyze`'s counting options, which give the
numbers `dlperf analyze` gives."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import dlperf
from dlperf.store import RunStore
from tests.conftest import CliResult

torch.set_num_threads(1)

TINY_RUN = {
    "model": {"name": "smallcnn"},
    "data": {"name": "synthetic", "shape": [1, 8, 8], "size": 64, "num_classes": 2},
    "train": {"epochs": 1, "batch_size": 32},
    "run": {"threads": 1, "warmup_steps": 1, "checkpoint": False},
}

STORES: dict[str, Callable[[Path], Any]] = {
    "path text": lambda db: str(db),
    "pathlib path": lambda db: db,
    "url": lambda db: f"sqlite:///{db}",
    "Store": lambda db: dlperf.Store(str(db)),
    "RunStore": lambda db: RunStore.open(str(db)),
}


@pytest.mark.parametrize("given", STORES.values(), ids=STORES.keys())
def test_track_keeps_the_run_in_the_store_named(
    tmp_path: Path, db: str, given: Callable[[Path], Any]
) -> None:
    """store="/path.db" raised AttributeError: 'str' object has no attribute '_store'."""
    mine = tmp_path / "mine.db"
    with dlperf.track("x", store=given(mine)) as run:
        run.log(1, loss=0.5)
    assert dlperf.Store(f"sqlite:///{mine}").metrics(run.id, "loss") == [(1, 0.5)]
    assert dlperf.Store(db).runs() == []  # not in the default store ($DLPERF_DB)


@pytest.mark.parametrize("given", [STORES["path text"], STORES["RunStore"]], ids=["path", "rs"])
def test_run_keeps_the_run_in_the_store_named(
    tmp_path: Path, db: str, given: Callable[[Path], Any]
) -> None:
    mine = tmp_path / "mine.db"
    result = dlperf.run(TINY_RUN, store=given(mine))
    assert result.finished and result.summary is not None
    assert dlperf.Store(str(mine)).run(result.run_id).status == "finished"
    assert dlperf.Store(db).runs() == []


BAD_STORES: dict[str, tuple[Any, str]] = {
    "a number": (42, "a store is a path or a SQLAlchemy URL, got int 42"),
    "bytes": (b"x.db", "a store is a path or a SQLAlchemy URL, got bytes b'x.db'"),
    "a list": (["x.db"], "a store is a path or a SQLAlchemy URL, got list ['x.db']"),
}


@pytest.mark.parametrize(("given", "message"), BAD_STORES.values(), ids=BAD_STORES.keys())
def test_a_store_of_another_kind_is_a_user_error(db: str, given: Any, message: str) -> None:
    hint = " (e.g. 'runs.db' or 'sqlite:///runs.db')"
    with pytest.raises(dlperf.UserError) as caught, dlperf.track("x", store=given):
        pass
    assert str(caught.value) == message + hint
    with pytest.raises(dlperf.UserError) as caught:
        dlperf.run(TINY_RUN, store=given)
    assert str(caught.value) == message + hint
    with pytest.raises(dlperf.UserError) as caught:
        dlperf.Store(given)
    assert str(caught.value) == message + hint
    assert dlperf.Store(db).runs() == []  # nothing stored, nothing trained


def test_a_directory_as_store_is_a_user_error(tmp_path: Path, db: str) -> None:
    with (
        pytest.raises(dlperf.UserError, match="is a directory"),
        dlperf.track("x", store=tmp_path),
    ):
        pass


# (the command's options, the same through the API, the totals the option changes)
OPTIONS: dict[str, tuple[list[str], dict[str, Any], list[str]]] = {
    "ptflops": (["--macs-convention", "ptflops"], {"macs_convention": "ptflops"}, ["macs"]),
    "torchinfo": (["--macs-convention", "torchinfo"], {"macs_convention": "torchinfo"}, ["macs"]),
    "fvcore": (["--macs-convention", "fvcore"], {"macs_convention": "fvcore"}, ["macs"]),
    "no bias": (["--no-bias"], {"bias": False}, ["params"]),
    "conv-pool-fc": (
        ["--activations", "conv-pool-fc"],
        {"activations": "conv-pool-fc"},
        ["activations"],
    ),
    "all three": (
        ["--no-bias", "--activations", "conv-pool-fc", "--macs-convention", "ptflops"],
        {"bias": False, "activations": "conv-pool-fc", "macs_convention": "ptflops"},
        ["params", "activations", "macs"],
    ),
}


@functools.cache
def resnet20_totals() -> dict[str, Any]:
    """Its totals under the defaults, counted once for every case."""
    return dlperf.analyze("resnet20", (3, 32, 32), batch=2).totals


@pytest.mark.parametrize(("args", "kwargs", "changed"), OPTIONS.values(), ids=OPTIONS.keys())
def test_analyze_reaches_what_the_command_does(
    cli: Callable[..., CliResult],
    args: list[str],
    kwargs: dict[str, Any],
    changed: list[str],
) -> None:
    """analyze() had no bias, activations or macs_convention: the command's numbers under
    another convention could not be had from Python."""
    command = cli("analyze", "resnet20", "--batch", "2", "--json", *args)
    assert command.code == 0, command.err
    expected = json.loads(command.out)
    by_name = dlperf.analyze("resnet20", (3, 32, 32), batch=2, **kwargs)
    assert json.loads(by_name.to_json()) == expected
    default = resnet20_totals()
    assert all(by_name.totals[key] != default[key] for key in changed)  # the option counts
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
    mine = dlperf.analyze(module, (3, 8, 8), batch=2, **kwargs).totals
    model_file = Path("mine.py")  # the cli fixture's working directory is tmp_path
    model_file.write_text(
        "from torch import nn\n"
        "def net():\n    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))\n"
    )
    own = cli("analyze", f"{model_file}:net", "--input", "3,8,8", "--batch", "2", "--json", *args)
    assert own.code == 0, own.err
    assert mine == json.loads(own.out)["totals"]
    default = dlperf.analyze(module, (3, 8, 8), batch=2).totals
    assert all(mine[key] != default[key] for key in changed)


BAD_OPTIONS = {
    "convention": ({"macs_convention": "flops"}, "analyze.macs_convention 'flops': use dlperf"),
    "activations": ({"activations": "some"}, "analyze.activations 'some': use all or"),
    "peer training step": (
        {"macs_convention": "fvcore", "train": True},
        "analyze.macs_convention fvcore: the peers count a forward pass only",
    ),
    "dtype": ({"dtype": "fp8"}, "dtype 'fp8': use 'fp32', 'bf16' or 'fp16'"),
    "bias as text": ({"bias": "no"}, "bias is True or False, got 'no'"),
}


@pytest.mark.parametrize(("kwargs", "message"), BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
@pytest.mark.parametrize("model", ["smallcnn", "module"])
def test_bad_analyze_options_are_user_errors(
    model: str, kwargs: dict[str, Any], message: str
) -> None:
    given = torch.nn.Linear(4, 2) if model == "module" else model
    with pytest.raises(dlperf.UserError) as caught:
        dlperf.analyze(given, (1, 4, 4) if model == "smallcnn" else (4,), **kwargs)
    assert str(caught.value).startswith(message)
