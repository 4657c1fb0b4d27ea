"""Break-it round 64, X1 causes 1 and 2 (fixer F5): a stored run's model file, or a module
beside it (helper.py), edited since the run trained.

Before: where the edit made the model raise, `export N`, `infer bench` of its ONNX,
`distill --teacher N` and `run --resume N` printed only "error: the model raised KeyError:
..." with its frames: the fact that the file changed since run N trained (export's warning
after a harmless edit, --resume's refusal), which is the likeliest cause, was computed only
after the rebuilt model passed its checks, and lost. `distill --teacher N` scored with an
edited file or helper with no word at all (docs/run.md: --teacher treats a change as export
does). And `export m.py:leave64` (a factory leaving torch.set_default_dtype float64) printed
only the float64 refusal: the model file's notes joined the warnings after the checks.

Now a build or check of the stored run's model that fails says first "warning: module
helper.py beside model file F changed since run N was trained: built as the files are now";
distill warns of a changed teacher as export does, before it scores; export tells the model
file's notes before the refusal they explain.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

NET = """\
from torch import nn
import helper


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(in_channels * 64, num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1)) * helper.scale({"scale": 1.0})


def make(num_classes=10, in_channels=1):
    return Net(num_classes, in_channels)
"""
HELPER = 'def scale(d):\n    return d["scale"]\n'

EXP = """
[model]
name = "{net}:make"
[data]
name = "digits"
limit = 64
holdout = 0.5
[train]
epochs = {epochs}
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
out_dir = "{out}"
"""

RAISED = "error: the model raised KeyError: 'scael'"


def _train(cli: Cli, root: Path, epochs: int = 1) -> Path:
    """Run 1 of m/net.py (importing m/helper.py), trained on 32 digits; its model file."""
    (root / "m").mkdir()
    net = root / "m" / "net.py"
    net.write_text(NET)
    (root / "m" / "helper.py").write_text(HELPER)
    exp = root / "exp.toml"
    exp.write_text(EXP.format(net=net, epochs=epochs, out=root / "runs"))
    trained = cli("run", str(exp))
    assert trained.code == 0, trained.err
    return net


def _edit(path: Path, old: str, new: str) -> None:
    """An edit as a person makes it, its mtime moved on for Python to compile it afresh (a
    run this short ends within the second)."""
    path.write_text(path.read_text().replace(old, new))
    later = path.stat().st_mtime + 10
    os.utime(path, (later, later))


def _broken(net: Path) -> str:
    """helper.py now raises in forward; the warning said before the model's error."""
    _edit(net.parent / "helper.py", '["scale"]', '["scael"]')
    return (
        f"warning: module helper.py beside model file {net} changed since run 1 was trained: "
        "built as the files are now"
    )


def _told_before_the_error(result: CliResult, warning: str) -> None:
    assert result.code == 1, (result.out, result.err)
    lines = result.err.splitlines()
    assert warning in lines, result.err
    assert RAISED in lines, result.err
    assert lines.index(warning) < lines.index(RAISED), result.err
    assert "Traceback" not in result.err


def test_export_says_the_helper_changed_before_the_models_error(cli: Cli, tmp_path: Path) -> None:
    """Before: only "error: the model raised KeyError: 'scael'" and its frames."""
    net = _train(cli, tmp_path)
    warning = _broken(net)
    result = cli("export", "1", "--out", str(tmp_path / "e.onnx"))
    _told_before_the_error(result, warning)
    assert not (tmp_path / "e.onnx").exists()


def test_resume_says_the_helper_changed_before_the_models_error(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: only the model's error; the refusal a harmless edit gets ("changed since run 1
    was trained: resumed, ...") came only after the rebuilt model passed its checks."""
    from dlperf.engine import checkpoint

    save = checkpoint.save

    def stopped(slot: Any, state: dict[str, Any]) -> None:
        save(slot, state)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C once epoch 1's checkpoint is saved

    with monkeypatch.context() as patched:
        patched.setattr(checkpoint, "save", stopped)
        (tmp_path / "m").mkdir()
        net = tmp_path / "m" / "net.py"
        net.write_text(NET)
        (tmp_path / "m" / "helper.py").write_text(HELPER)
        exp = tmp_path / "exp.toml"
        exp.write_text(EXP.format(net=net, epochs=2, out=tmp_path / "runs"))
        first = cli("run", str(exp))
    assert first.code == 130 and "dlperf run --resume 1" in first.err, (first.code, first.err)
    warning = _broken(net)
    result = cli("run", "--resume", "1")
    _told_before_the_error(result, warning)
    assert store.get_run(1).status == "killed"  # resumable once the file is restored


def _distill(cli: Cli, root: Path, net: Path) -> CliResult:
    exp = root / "dist.toml"
    exp.write_text(EXP.format(net=net, epochs=1, out=root / "runs"))
    args = ["distill", str(exp), "--teacher", "1", "--unlabeled", "digits:holdout=0.5"]
    args += ["--top-k", "3", "--student", "smallcnn"]
    return cli(*args, "--pretrain-epochs", "1", "--finetune-epochs", "1")


def test_distill_warns_of_a_teacher_whose_file_changed(cli: Cli, tmp_path: Path) -> None:
    """Before: a teacher whose model file was edited (its scores negated, the parameters the
    same) scored the pool with no word, its stored test accuracy shown as if it had; one whose
    helper now raises said only the model's error."""
    net = _train(cli, tmp_path)
    warning = _broken(net)
    _told_before_the_error(_distill(cli, tmp_path, net), warning)
    _edit(net.parent / "helper.py", '["scael"]', '["scale"]')
    _edit(net, "return self.fc(", "return -self.fc(")
    result = _distill(cli, tmp_path, net)
    assert result.code == 0, result.err
    lines = result.err.splitlines()
    warning = (
        f"warning: model file {net} changed since run 1 was trained (its parameters still "
        "fit): scored as the file is now"
    )
    assert warning in lines, result.err
    assert lines.index(warning) < lines.index("teacher run 1 scoring 647 images"), result.err


LEAVE64 = """\
import torch
from torch import nn


def leave64(num_classes=10, in_channels=1):
    torch.set_default_dtype(torch.float64)
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))
"""


def test_export_tells_the_model_files_note_before_its_float64_refusal(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: the refusal alone; the note that the file set torch's default dtype, which
    explains it, joined the warnings only after the checks passed."""
    (tmp_path / "m.py").write_text(LEAVE64)
    result = cli("export", "m.py:leave64", "--input", "1,8,8", "--out", str(tmp_path / "x.onnx"))
    one_line(result, 2, "error: model 'm.py:leave64': its parameters are float64")
    warning = (
        "warning: model file m.py set torch's default dtype to torch.float64 in its factory; "
        "put back to torch.float32, in which dlperf builds and trains models"
    )
    assert result.err.splitlines()[:-1] == [warning], result.err
