"""The sixteenth break-it round (part A), a user's model file: a factory that runs its own model,
and a model file named by a relative path.

Cause 1. A factory that runs the model it builds on a real tensor (a self-check forward,
torch.jit.trace) failed `analyze` and `predict` with "factory f.py:net failed: RuntimeError:
Tensor on device meta is not on the expected device cpu!", exit 2, or, for a traced conv model,
"TypeError: cond must be a bool, but got a Tensor ... (give the argument a default, or its value
in [model] kwargs)", blaming arguments it does not have; `run` trains the same factory. A build
that fails on the meta device is built again on real tensors, as a run builds it, and counted;
a factory that fails there too keeps its one line, with the "give the argument a default" hint
only for a missing argument.

Cause 4. A relative model-file path was stored as typed: `model.name = "model.py:net"` run in
d1 and in d2, two different networks, got the same stored config and config_hash, and
`dlperf export 2` from d1 loaded d1's file ("run 2's checkpoint does not fit model file
model.py:net as it is now"). A model file's path is made absolute against the current
directory where the config is validated, and stored so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.config import DistillJob, load_job
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
INPUT = ("--input", "1,8,8")

# The tester's /tmp/bk16/A/min/f.py and t.py, and cases/m/small.py's net and traced
FACTORIES = """
import torch, torch.nn as nn

def plain(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))

def net(num_classes=10, in_channels=1):
    m = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
    with torch.no_grad():
        assert m(torch.zeros(1, in_channels, 8, 8)).shape == (1, num_classes)  # a self-check
    return m

def traced(num_classes=10, in_channels=1):
    m = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
    return torch.jit.trace(m, torch.zeros(2, in_channels, 8, 8))

class Net(nn.Module):
    def __init__(s, num_classes=10, in_channels=1):
        super().__init__()
        s.c = nn.Conv2d(in_channels, 8, 3, padding=1); s.fc = nn.Linear(8, num_classes)
    def forward(s, x): return s.fc(torch.relu(s.c(x)).mean((2, 3)))

def conv(num_classes=10, in_channels=1): return Net(num_classes, in_channels)
def conv_traced(num_classes=10, in_channels=1):
    return torch.jit.trace(Net(num_classes, in_channels), torch.zeros(2, in_channels, 8, 8))

def bad_dtype(num_classes=10, in_channels=1):
    return nn.Linear(in_channels * 64, num_classes, dtype="float32")

def required(width, num_classes=10, in_channels=1):
    return nn.Linear(in_channels * 64, num_classes)
"""


def counted(cli: Cli, spec: str, *extra: str) -> dict[str, Any]:
    result = cli("analyze", spec, *INPUT, "--json", *extra)
    assert result.code == 0, result.err
    assert "error" not in result.err and "Traceback" not in result.err, result.err
    doc: dict[str, Any] = json.loads(result.out)
    return doc


def predicted_macs(cli: Cli, spec: str) -> int:
    result = cli("predict", spec, *INPUT, "--device", "V100", "--json")
    assert result.code == 0, result.err
    macs: int = json.loads(result.out)["flops_over_peak"]["counted_macs_per_image"]
    return macs


# --- Cause 1: a factory that runs its own model ------------------------------------------------


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit.trace's deprecation
@pytest.mark.parametrize(("factory", "plain"), [("net", "plain"), ("traced", "plain")])
def test_a_factory_running_its_model_is_counted_as_the_plain_model(
    cli: Cli, db: str, tmp_path: Path, factory: str, plain: str
) -> None:
    """Before: 'error: factory f.py:net failed: RuntimeError: Tensor on device meta is not on
    the expected device cpu!', exit 2, from analyze and predict."""
    (tmp_path / "f.py").write_text(FACTORIES)
    doc, expected = counted(cli, f"f.py:{factory}"), counted(cli, f"f.py:{plain}")
    assert doc["totals"]["params"] == 64 * 10 + 10 and doc["totals"]["macs"] == 640
    # A traced model runs its Flatten inside its own graph: no row of its own, so no output
    # counted as an activation, and the receptive field names another row. The work is equal.
    counts = ("params", "trainable_params", "macs", "flops", "bytes", "calls", "params_not_run")
    assert {k: doc["totals"][k] for k in counts} == {k: expected["totals"][k] for k in counts}
    assert predicted_macs(cli, f"f.py:{factory}") == predicted_macs(cli, f"f.py:{plain}") == 640


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit.trace's deprecation
def test_a_traced_conv_model_is_counted_as_the_plain_model(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    """Before: 'factory small.py:traced failed: TypeError: cond must be a bool, but got a
    Tensor. ... (give the argument a default, or its value in [model] kwargs)'."""
    (tmp_path / "small.py").write_text(FACTORIES)
    doc, expected = counted(cli, "small.py:conv_traced"), counted(cli, "small.py:conv")
    assert doc["totals"]["macs"] == expected["totals"]["macs"] == 8 * 9 * 64 + 8 * 10 == 4688
    assert doc["totals"]["params"] == expected["totals"]["params"] == 8 * 9 + 8 + 8 * 10 + 10
    assert predicted_macs(cli, "small.py:conv_traced") == 4688


def test_a_factory_failing_on_real_tensors_too_is_one_line_without_the_default_hint(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    """A TypeError that is not about a missing argument, with no [model] kwargs given, said
    'give the argument a default' of a factory whose every argument has one."""
    (tmp_path / "f.py").write_text(FACTORIES)
    for command, device in (("analyze", ()), ("predict", ("--device", "V100"))):
        result = cli(command, "f.py:bad_dtype", *INPUT, *device)
        one_line(result, 2)
        assert result.err.splitlines()[-1] == (
            "error: factory f.py:bad_dtype failed: TypeError: empty(): argument 'dtype' must "
            "be torch.dtype, not str"
        )
    # a missing argument keeps its hint
    one_line(
        cli("analyze", "f.py:required", *INPUT), 2,
        "error: factory f.py:required failed: TypeError: required() missing 1 required "
        "positional argument: 'width' (give the argument a default, or its value in [model] "
        "kwargs)",
    )  # fmt: skip


# --- Cause 4: a relative model-file path -------------------------------------------------------

SMALL = """import torch.nn as nn
def net(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
"""
WIDE = """import torch.nn as nn
def net(num_classes=10, in_channels=1):
    wide = nn.Linear(in_channels * 64, 128)
    return nn.Sequential(nn.Flatten(), wide, nn.ReLU(), nn.Linear(128, num_classes))
"""
EXP = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
"""


def test_runs_of_two_files_with_one_relative_name_are_told_apart_and_exported_from_anywhere(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: both runs stored model.name 'model.py:net' with one config_hash, and `export 2`
    from d1 said "run 2's checkpoint does not fit model file model.py:net as it is now"."""
    (tmp_path / "exp.toml").write_text(EXP)
    for name, text in (("d1", SMALL), ("d2", WIDE)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.py").write_text(text)
        monkeypatch.chdir(tmp_path / name)
        result = cli("run", "../exp.toml", "--set", "model.name=model.py:net", "--json")
        assert result.code == 0, result.err
    one, two = sorted(store.list_runs(), key=lambda run: run.id)
    assert one.config["model"]["name"] == f"{tmp_path / 'd1' / 'model.py'}:net"
    assert two.config["model"]["name"] == f"{tmp_path / 'd2' / 'model.py'}:net"
    assert one.config_hash != two.config_hash
    assert two.name == "exp model.name=model.py:net"  # the run's label says it as typed

    monkeypatch.chdir(tmp_path / "d1")
    result = cli("export", str(two.id), "--out", "two.onnx", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["model"] == f"{tmp_path / 'd2' / 'model.py'}:net"


def test_the_model_argument_and_a_relative_model_name_agree(
    cli: Cli, db: str, tmp_path: Path
) -> None:
    """analyze's MODEL argument and --set model.name name the same file, typed the same way:
    not refused as disagreeing now that model.name is stored absolute."""
    (tmp_path / "f.py").write_text(FACTORIES)
    doc = counted(cli, "f.py:plain", "--set", "model.name=f.py:plain")
    assert doc["totals"]["macs"] == 640


def test_a_relative_student_naming_the_experiments_model_file_is_that_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """distill trains the experiment's model (and its [model] kwargs) when --student names it:
    both are resolved alike, so the comparison still holds."""
    monkeypatch.chdir(tmp_path)
    names = ["model.name=f.py:plain", "distill.student=f.py:plain"]
    job = load_job(DistillJob, None, names)
    assert job.distill.student == job.experiment.model.name == f"{tmp_path}/f.py:plain"
