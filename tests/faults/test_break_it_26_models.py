"""The twenty-sixth break-it round, P1 (the user's own models), fixer I: the dry checks'
word on a softmax output and on a forward failing in the backward's check, run.seed for a
model built as its file is imported, and export's fix for a factory that builds another
network on each call.

- C2: a model ending in softmax trained on probabilities (cross-entropy takes logits) with no
  word, and infer softmaxed them again. The dry forward now warns once.
- C3: a forward that raised on the dry backward check's call was told as "its backward
  fails: ...", where the same forward raising on any other call was the model's own line.
- C5: run.seed did not fix the weights of a model built at import (NET = ... at module
  level): the seed was set after the import only.
- C7: export of a run whose factory builds a different network on each call said "restore
  the file the run was trained with", of a file whose sha256 is the stored one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.engine.build import build_model
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.engine.test_build import FakeData, Log, experiment
from tests.faults.test_break_it_22_models import _unwrapped, _write

CPU = torch.device("cpu")

# --- C2: a model that returns probabilities ------------------------------------------------------

ENDS = """
import torch, torch.nn as nn
class Net(nn.Module):
    def __init__(self, num_classes=10, kind="softmax"):
        super().__init__(); self.fc = nn.Linear(64, num_classes); self.kind = kind
    def forward(self, x):
        z = self.fc(x.flatten(1))
        if self.kind == "softmax":
            return torch.softmax(z, 1)
        return torch.log_softmax(z, 1) if self.kind == "log_softmax" else z
def build(num_classes=10, kind="softmax"): return Net(num_classes, kind)
"""


def _warnings(tmp_path: Path, kind: str) -> list[str]:
    spec = f"{_write(tmp_path, ENDS)}:build"
    log = Log()
    exp = experiment(spec, model={"kwargs": {"kind": kind}})
    build_model(exp, FakeData(), CPU, log)  # type: ignore[arg-type]
    return [line for line in log.lines if line.startswith("warning:")]


def test_a_model_returning_probabilities_is_warned_once_and_log_softmax_is_not(
    tmp_path: Path,
) -> None:
    said = _warnings(tmp_path, "softmax")
    probabilities = [line for line in said if "softmax" in line]
    assert len(probabilities) == 1, said  # once, though the dry forward runs in both modes
    assert "logits" in probabilities[0] and "log_softmax" in probabilities[0], said
    # log_softmax (cross-entropy is the same of it) and plain scores: nothing said
    assert _warnings(tmp_path, "log_softmax") == []
    assert _warnings(tmp_path, "logits") == []


# --- C3: a forward raising on the dry backward's call ------------------------------------------

NTH = """
import torch.nn as nn
class Net(nn.Module):
    def __init__(self, num_classes=10, n=0):
        super().__init__(); self.fc = nn.Linear(64, num_classes); self.n = n; self.calls = 0
    def forward(self, x):
        self.calls += 1
        if self.calls == self.n:
            raise RuntimeError(f"boom on call {self.calls}")
        return self.fc(x.flatten(1))
def build(num_classes=10, n=0): return Net(num_classes, n)
"""


def test_a_forward_raising_in_the_backward_check_is_the_models_own_error(tmp_path: Path) -> None:
    spec = f"{_write(tmp_path, NTH)}:build"
    # Call 3 is the dry backward's forward (after the eval and the training dry forwards): the
    # model's own RuntimeError goes on as it is, as on calls 1 and 2, for the CLI's line
    # "the model raised RuntimeError: ..." with its frame; before, "its backward fails: ..."
    for n in (2, 3):
        exp = experiment(spec, model={"kwargs": {"n": n}})
        with pytest.raises(RuntimeError, match=f"^boom on call {n}$"):
            build_model(exp, FakeData(), CPU)  # type: ignore[arg-type]


# --- C5: run.seed and a model built at import -------------------------------------------------

NET = "import torch.nn as nn\nNET = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))\n"
FACTORY = "def build(num_classes=10, in_channels=1): return NET\n"


@pytest.mark.parametrize("where", ["file", "neighbour"])
def test_run_seed_fixes_the_weights_of_a_model_built_at_import(tmp_path: Path, where: str) -> None:
    if where == "file":  # NET = ... at the top of the model file
        path = _write(tmp_path, NET + FACTORY)
    else:  # in a module beside it, which Python imports once a process (sys.modules)
        _write(tmp_path, NET, "nets.py")
        path = _write(tmp_path, "from nets import NET\n" + FACTORY)

    def weights(seed: int) -> torch.Tensor:
        torch.rand(7)  # whatever the process drew before (a sweep's previous point)
        exp = experiment(f"{path}:build", run={"seed": seed})
        model = build_model(exp, FakeData(), CPU)  # type: ignore[arg-type]
        weight = model[1].weight.detach().clone()
        with torch.no_grad():
            model[1].weight.add_(1.0)  # as the run trains it (a sweep's point in this process)
        return weight

    one = weights(1)
    # before: other weights on every build (the file's), or the first build's, trained (the
    # neighbour's), for every run.seed
    assert torch.equal(one, weights(1))
    assert not torch.equal(one, weights(2))


# --- C7: a factory that builds another network on each call -------------------------------------

WIDTH = """
import os, torch.nn as nn
def build(num_classes=10, in_channels=1):
    w = int(os.environ.get("FXI_WIDTH", "16"))  # as a width drawn from the pid or the clock
    return nn.Sequential(nn.Flatten(), nn.Linear(64, w), nn.ReLU(), nn.Linear(w, num_classes))
"""

RUN = """
[model]
name = "{name}:build"
[data]
name = "digits"
limit = 100
[train]
epochs = 1
batch_size = 32
[run]
threads = 1
"""


def test_export_of_a_factory_that_builds_another_network_says_so_not_restore_the_file(
    cli: Callable[..., CliResult], db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "exp.toml").write_text(RUN.format(name=_write(tmp_path, WIDTH)))
    done = cli("run", "exp.toml")
    assert done.code == 0, done.err
    (run,) = RunStore.open(db).list_runs()
    monkeypatch.setenv("FXI_WIDTH", "24")  # the same file, another network
    done = cli("export", str(run.id), "--out", str(tmp_path / "m.onnx"))
    assert done.code == 2, done.err
    said = _unwrapped(done.err)
    assert "restorethefile" not in said, done.err
    assert "differentnetworkoneachcall" in said, done.err
    assert "1.weightis[16,64]inthecheckpoint,[24,64]inthemodel" in said, done.err
