"""What the seventh break-it round found (issue 41), each seen failing before its fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("peak_tflops = { fp32 = 0.0 }", "peak_tflops.fp32"),  # was a ZeroDivisionError
        ("peak_tflops = { fp32 = -14.0 }", "peak_tflops.fp32"),  # was a negative peak listed
        ("peak_tflops = { fp32 = nan }", "peak_tflops.fp32"),  # was a time of null
        ("memory_bandwidth_gbs = -900.0", "memory_bandwidth_gbs"),  # was a negative time
        ("price_per_hour_usd = -3.0", "price_per_hour_usd"),  # was a negative bill
        ("ppp = inf", "ppp"),
    ],
)
def test_a_device_figure_that_cannot_be_a_machines_is_one_line(
    override: str,
    said: str,
    cli: Callable[..., CliResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    device_refused(cli, tmp_path, monkeypatch, override, said)


def device_refused(
    cli: Callable[..., CliResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    override: str,
    said: str,
) -> None:
    """A device file overriding V100 with `override` is one line naming `said`, the key,
    and the file, in `devices` and in `predict`."""
    devices = tmp_path / "devices.toml"
    devices.write_text(f"[V100]\n{override}\n")
    monkeypatch.setenv("DLPERF_DEVICES", str(devices))
    for args in (["devices", "--json"], ["predict", "smallcnn", "--device", "V100", "--json"]):
        r = cli(*args)
        assert r.code == 2, (args, r.out[:200], r.err)
        assert r.err.startswith(f"error: device V100: {said}: "), r.err
        assert r.err.count("\n") == 1 and str(devices) in r.err


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_tracked_config_holding_nan_or_infinity_is_refused_on_every_backend(
    value: float, tmp_path: Path
) -> None:
    """SQLite kept {"lr": NaN} (Python's JSON writes it), PostgreSQL's JSON type refused it
    with a raw psycopg DataError: one UserError before the run is recorded, on both."""
    import dlperf
    from dlperf.errors import UserError

    store = tmp_path / "t.db"
    said = r"config\['opt'\]\['lr'\] is .*JSON has no NaN"
    with (
        pytest.raises(UserError, match=said),
        dlperf.track("t", config={"opt": {"lr": value}}, store=str(store)),
    ):
        pass
    assert not store.exists() or "t" not in [r.name for r in dlperf.Store(str(store)).runs()]


def test_a_model_name_in_another_case_is_suggested(cli: Callable[..., CliResult]) -> None:
    """'SmallCNN' got only "see `dlperf models`": difflib is case-sensitive."""
    r = cli("analyze", "SmallCNN")
    assert r.code == 2 and r.err == "error: unknown model 'SmallCNN' (did you mean smallcnn?)\n"


RAISES = """
import torch
from torch import nn


class ShardLost(Exception):
    pass


class M(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.c = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.l = nn.Linear(4, num_classes)
        self.calls = 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.calls > 3:  # past the dry checks, mid-training
                raise ShardLost("shard 7 went away")
        return self.l(self.c(x).mean((2, 3)))


def Net(num_classes=10, in_channels=1):
    return M(num_classes, in_channels)
"""


def test_an_exception_of_the_models_own_is_told_with_its_frames_only(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """A model that raises mid-training printed a 58-line traceback, 8 of its frames
    dlperf's and most of the rest Typer's and torch's: the error's line, then the model's
    own frames (where to look); `--debug` shows the whole traceback."""
    (tmp_path / "shard.py").write_text(RAISES)
    exp = tmp_path / "exp.toml"
    exp.write_text(
        f'[model]\nname = "{tmp_path / "shard.py"}:Net"\n[data]\nname = "digits"\nlimit = 200\n'
        "[train]\nepochs = 1\nbatch_size = 32\n"
        f'[run]\nthreads = 1\ncheckpoint = false\nout_dir = "{tmp_path}"\n'
    )
    r = cli("run", str(exp))
    assert r.code == 1
    lines = r.err.strip().splitlines()
    assert lines[0] == "error: the model raised ShardLost: shard 7 went away", r.err
    assert f'File "{tmp_path / "shard.py"}", line 21, in forward' in lines[1], r.err
    assert "src/dlperf" not in r.err and "typer" not in r.err and len(lines) <= 4, r.err
    assert "dlperf --debug" in lines[-1]
    r = cli("runs", "list", "--json")
    assert [run["status"] for run in json.loads(r.out)] == ["failed"]
    r = cli("--debug", "run", str(exp))
    assert r.code == 1 and "Traceback (most recent call last)" in r.err and "engine" in r.err
