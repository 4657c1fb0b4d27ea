"""Break-it round 30 (P1), the user's models: causes F1, F3 and F5.

C1 (F1). `run --resume` of a run whose model file, or a module beside it that its import
loaded, changed since it trained (the same parameters: another network) resumed silently,
training one run from two networks under the old file's sha256. Now refused in one line.
C2 (F3). A model file's bytes (and its neighbours') were no part of a sweep point's or a
distill stage's identity: both reused runs trained from the old code. Now the file's sha256 is
part of the config hash, and a run whose recorded model file or neighbours differ now is no
point of a sweep and no stage to reuse.
C3 (F5). A leading `~` in model.name's file and model.weights was not expanded: "model file
<cwd>/~/net.py not found" for a file that is there. Now it is the home directory, as in
data.root. (analyze's MODEL argument reaches the model registry unresolved: not here.)
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.config import Experiment
from dlperf.store import RunStore
from tests.conftest import CliResult, write_distill_exp
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# A network whose activation is edited (ReLU to Tanh: the same parameters, another network),
# in the file itself or in a module beside it that the file imports.
NET = """
from torch import nn
{act}
def make(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Conv2d(in_channels, 4, 3, padding=1), ACT(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4, num_classes))
"""
OWN = "ACT = nn.ReLU"
HELPER = "from torch import nn\nACT = nn.ReLU\n"

EXP = """
[model]
name = "{net}:make"
[data]
name = "digits"
limit = 64
[train]
epochs = {epochs}
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
out_dir = "{out}"
"""


def _network(root: Path, edited: str) -> tuple[Path, Path]:
    """net.py (its ACT its own, or imported from helper.py when `edited` is "neighbour"),
    and the file whose edit changes the network."""
    net = root / "net.py"
    if edited == "neighbour":
        (root / "helper.py").write_text(HELPER)
        net.write_text(NET.format(act="from helper import ACT"))
        return net, root / "helper.py"
    net.write_text(NET.format(act=OWN))
    return net, net


def _edit(path: Path) -> None:
    """ReLU to Tanh, as a person edits it: the same size, so its mtime is moved on for Python
    to compile it afresh (a run this short ends within the second)."""
    path.write_text(path.read_text().replace("nn.ReLU", "nn.Tanh"))
    later = path.stat().st_mtime + 10
    os.utime(path, (later, later))


def _experiment(root: Path, net: Path, epochs: int = 1) -> Path:
    path = root / "exp.toml"
    path.write_text(EXP.format(net=net, epochs=epochs, out=root / "runs"))
    return path


def _changed(net: Path, edited: str) -> str:
    return f"model file {net}" if edited == "file" else f"module helper.py beside model file {net}"


# --- C1 (F1): a resume with an edited model file or neighbour ------------------------------


@pytest.mark.parametrize("edited", ["file", "neighbour"])
def test_c1_a_resume_of_a_run_whose_model_file_changed_is_refused(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edited: str
) -> None:
    """Before: resumed from epoch 2 with Tanh where epoch 1 trained with ReLU, nothing said,
    the run finished under the old file's sha256."""
    net, changed = _network(tmp_path, edited)
    from dlperf.engine import checkpoint

    save = checkpoint.save

    def stopped(slot: Any, state: dict[str, Any]) -> None:
        save(slot, state)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C once epoch 1's checkpoint is saved

    with monkeypatch.context() as patched:
        patched.setattr(checkpoint, "save", stopped)
        first = cli("run", str(_experiment(tmp_path, net, epochs=2)))
    assert first.code == 130 and "dlperf run --resume 1" in first.err, (first.code, first.err)
    _edit(changed)
    refused = cli("run", "--resume", "1")
    one_line(
        refused,
        2,
        f"error: {_changed(net, edited)} changed since run 1 was trained: resumed, its last "
        "epochs would train another network than its first",
        "(restore the file the run was trained with, or start a new run)",
    )
    assert store.get_run(1).status == "killed"  # resumable once the file is restored


# --- C2 (F3): sweep points and distill stages of an edited model file ----------------------


@pytest.mark.parametrize("edited", ["file", "neighbour"])
def test_c2_a_sweep_point_of_an_edited_model_file_trains_again(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edited: str
) -> None:
    """Before: "1 points, 1 finished before, 0 to run", the run of the old code reused."""
    net, changed = _network(tmp_path, edited)
    _experiment(tmp_path, net)
    (tmp_path / "sw.toml").write_text(
        'base = "exp.toml"\nname = "m"\n[grid]\n"train.lr" = [0.05]\n'
        '[set]\n"run.checkpoint" = false\n'
    )
    monkeypatch.chdir(tmp_path)
    first = cli("sweep", "sw.toml", "--jobs", "1")
    assert first.code == 0, first.err
    _edit(changed)
    again = cli("sweep", "sw.toml", "--jobs", "1")
    assert again.code == 0, again.err
    why = "its model file" if edited == "file" else "module helper.py beside its model file"
    said = " ".join(again.err.split())  # as the console wraps it
    assert (
        f"sweep 'm': its points differ from those of study 1 ({why} changed since they "
        "trained): starting a new study (--resume ID joins one anyway) "
        "sweep 'm', study 2: 1 points, 0 finished before, 1 to run "
    ) in said, again.err
    assert [run.study_id for run in store.list_runs()] == [2, 1]


@pytest.mark.parametrize("edited", ["file", "neighbour"])
def test_c2_a_distill_stage_of_an_edited_model_file_trains_again(
    cli: Cli, store: RunStore, tmp_path: Path, edited: str
) -> None:
    """Before: "teacher: run 1 finished before, reused" (and so every stage after it). The
    file's bytes are in the config hash; a neighbour, which no config hash can hold (only the
    file's import finds it), is checked by `changed_source`."""
    net, changed = _network(tmp_path, edited)
    exp = write_distill_exp(tmp_path).read_text().replace("smallcnn", f"{net}:make")
    (tmp_path / "dist.toml").write_text(exp)
    args = ["distill", str(tmp_path / "dist.toml"), "--unlabeled", "digits:holdout=0.5"]
    args += ["--top-k", "3", "--pretrain-epochs", "1", "--finetune-epochs", "1"]
    first = cli(*args)
    assert first.code == 0, first.err
    trained = len(store.list_runs())
    _edit(changed)
    again = cli(*args)
    assert again.code == 0, again.err
    assert "reused" not in again.err, again.err
    assert "teacher: training dist-teacher" in again.err, again.err
    assert len(store.list_runs()) == 2 * trained


# --- C3 (F5): a leading ~ -----------------------------------------------------------------


def test_c3_a_leading_tilde_is_the_home_directory(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "model file <cwd>/~/net.py not found", "model.weights ~/w.pt: no such file"."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    net, _ = _network(home, "file")
    torch.manual_seed(0)
    from dlperf.models.registry import load_factory

    torch.save(load_factory(f"{net}:make")().state_dict(), home / "w.pt")
    exp = Experiment.model_validate({"model": {"name": "~/net.py:make", "weights": "~/w.pt"}})
    assert (exp.model.name, exp.model.weights) == (f"{net}:make", str(home / "w.pt"))
    trained = cli(
        "run", str(_experiment(tmp_path, net)),
        "--set", "model.name=~/net.py:make", "--set", "model.weights=~/w.pt",
    )  # fmt: skip
    assert trained.code == 0, trained.err
