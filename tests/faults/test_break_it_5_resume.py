"""Break-it round 5 (issue 41, F2): a run's weights that no longer fit its model's code.

A model file edited after the run (a layer's width changed) made `dlperf export 1` end in
load_state_dict's traceback (exit 1), and `dlperf run --resume 1` in the same traceback with
the lost run stored as failed. Both now say in one line which parameters differ (exit 2),
and a refused resume leaves the run lost, resumable once the file is restored.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.distill import teacher
from dlperf.engine import checkpoint
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import TINY, CliResult
from tests.deploy.test_export_unfinished import stopped_run
from tests.faults.test_break_it_5_files import directory, fifo, link_to_dev_zero, remove
from tests.faults.test_store_faults import one_line

MODEL = """
from torch import nn


def Net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(in_channels, {width}, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear({width}, num_classes),
    )
"""


@pytest.mark.faults  # a real run killed in epoch 2, then resumed to its end: minutes here
def test_a_model_file_changed_since_the_run_is_one_line_and_the_run_stays_resumable(
    cli: Callable[..., CliResult], db: str, tmp_path: Path
) -> None:
    """A real run SIGKILLed in epoch 2 (its epoch-1 checkpoint written). Its model file
    changed: resume and export say which parameters differ in one line, the run stays lost.
    Then (test_break_it_5_files.py's round, on the same killed run: one run for both) its
    checkpoint removed or replaced: resume and export name the file and what is wrong with
    it, never "it stopped before its first epoch ended", and never open it (a FIFO would
    block: in this thread, which pytest-timeout's signal frees, failing the test). Both put
    back, with a stale `checkpoint.part.pt` beside it (a kill mid-save), the run resumes to
    the end and the next save leaves no partial file."""
    file = tmp_path / "net.py"
    file.write_text(MODEL.format(width=8))
    name = f"{file}:Net"
    stopped_run(tmp_path, signal.SIGKILL, name)  # read as lost, with its epoch-1 checkpoint
    store = RunStore.open(db)
    assert store.get_run(1).status == "lost"
    [path] = [Path(a["path"]) for a in store.artifacts(1) if a["kind"] == "checkpoint"]
    saved = path.read_bytes()

    file.write_text(MODEL.format(width=4))
    said = (
        f"error: run 1's checkpoint does not fit model file {name} as it is now: "
        "0.weight is [8, 1, 3, 3] in the checkpoint, [4, 1, 3, 3] in the model; "
        "0.bias is [8] in the checkpoint, [4] in the model; "
        "4.weight is [10, 8] in the checkpoint, [10, 4] in the model"
    )
    hint = "(restore the file the run was trained with, or train it again)"
    out = tmp_path / "m.onnx"
    # The refusals and the resume in this process: the run's own is gone (SIGKILLed)
    one_line(cli("run", "--resume", "1"), 2, said, hint)
    assert (store.get_run(1).status, store.get_run(1).error) == ("lost", None)
    one_line(cli("export", "1", "--out", str(out)), 2, said, hint)
    assert not out.exists()
    # Each command imports the model file afresh: the process that refused it resumes the run
    # once the file is restored.
    file.write_text(MODEL.format(width=8))

    again = "(put the run's checkpoint back, or train the run again)"
    for make, what in [
        (None, "is missing"),
        (fifo, "is not a regular file"),
        (directory, "is not a regular file"),
        (link_to_dev_zero, "is not a regular file"),
    ]:
        remove(path)
        if make is not None:
            make(path)
        said = f"error: run 1's checkpoint {path} {what} {again}"
        one_line(cli("run", "--resume", "1"), 2, said)
        one_line(cli("export", "1", "--out", str(out)), 2, said)
    assert store.get_run(1).status == "lost"
    assert not out.exists()

    remove(path)
    path.write_bytes(saved)
    part = path.with_name("checkpoint.part.pt")
    part.write_bytes(saved[: len(saved) // 2])
    resumed = cli("run", "--resume", "1")
    assert resumed.code == 0, resumed.err
    assert store.get_run(1).status == "finished"
    assert not part.exists()


@pytest.mark.faults  # a real run: half a minute here
def test_a_teacher_whose_model_file_changed_is_one_line(
    db: str, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """`dlperf distill`'s teacher (distill.teacher = a stored run) loads its weights the same
    way: load_state_dict's traceback before."""
    file = tmp_path / "net.py"
    file.write_text(MODEL.format(width=8))
    exp = tmp_path / "tiny.toml"
    text = TINY.format(epochs=1).replace('name = "smallcnn"', f'name = "{file}:Net"')
    exp.write_text(text.replace('name = "digits"', 'name = "digits"\nlimit = 96'))
    # The teacher trained in this process: a process start was most of this test's time.
    trained = cli("run", str(exp), "--set", f"run.out_dir={tmp_path / 'runs'}")
    assert trained.code == 0, trained.err
    file.write_text(MODEL.format(width=4))
    # Edited after the import, as a person edits it: the same size, so its mtime must differ
    # for Python to compile it afresh (a run this short can end within the second).
    later = file.stat().st_mtime + 10
    os.utime(file, (later, later))
    store = RunStore.open(db)
    images = torch.zeros(4, 1, 8, 8, dtype=torch.uint8)
    with pytest.raises(UserError, match=r"^run 1's checkpoint does not fit model file .*: 0\."):
        teacher.score(teacher.stored(store, 1), store, images, torch.device("cpu"), 4)


def test_weights_that_do_not_fit_name_the_first_differences() -> None:
    """Shapes first, then what one side lacks; past three, a count; a registry model's
    code changed with dlperf, not with a file of the user's."""
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 4))
    weights = {"0.weight": torch.zeros(5, 2), "0.bias": torch.zeros(5), "2.weight": torch.zeros(1)}
    with pytest.raises(UserError) as caught:
        checkpoint.fit_weights(model, weights, 7, "smallcnn")
    assert str(caught.value) == (
        "run 7's checkpoint does not fit model 'smallcnn' as it is now: 0.weight is [5, 2] in "
        "the checkpoint, [3, 2] in the model; 0.bias is [5] in the checkpoint, [3] in the "
        "model; 1.weight is not in the checkpoint; and 2 more (use the dlperf the run was "
        "trained with, or train it again)"
    )
    fitting = {key: value + 1 for key, value in model.state_dict().items()}
    checkpoint.fit_weights(model, fitting, 7, "smallcnn")
    assert all(torch.equal(model.state_dict()[k], v) for k, v in fitting.items())
    # A lazy layer (a distill teacher's, built without a forward pass) is sized by the load.
    lazy = nn.Sequential(nn.LazyLinear(3))
    checkpoint.fit_weights(lazy, {"0.weight": torch.ones(3, 2), "0.bias": torch.ones(3)}, 7, "x")
    assert lazy[0].weight.shape == (3, 2)
