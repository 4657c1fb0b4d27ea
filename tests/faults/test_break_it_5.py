"""The fifth break-it round (issue 41): each defect reproduced first through the real entry
point, in a process of its own where the defect lives in how the process ends."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.distill import teacher
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_5_training import BATCH_NORM, DROP_ONE, model_file

Cli = Callable[..., CliResult]


@pytest.mark.parametrize("args", [["models"], ["devices"]])
def test_a_closed_pipe_ends_a_command_quietly(args: list[str], tmp_path: Path) -> None:
    """`dlperf models | head -c1`: the reader gone before anything is written, so that every
    write meets the closed pipe (rich then exits 1, as Python's own tools do)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlperf", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    # before: "error: console.py:2042 called sys.exit(1) (code that cannot go on ...)"
    assert (proc.wait(timeout=300), err) == (1, "")


def test_a_wrong_output_batch_fails_both_staleness_runs_in_one_line(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, store: RunStore
) -> None:
    """The async-SGD trainer meets a model whose output loses a row only in batches larger
    than the up-front checks (of 2 and 3) as `dlperf run` does (a traceback before)."""
    result = cli(
        "staleness", "--train", str(tiny_exp(epochs=1)), "--learners", "2",
        "--set", "data.limit=128", "--set", model_file(tmp_path, DROP_ONE),
    )  # fmt: skip
    assert result.code == 1, result.err
    said = "model Net returned shape [31, 10] for a batch of 32 images"
    assert [line for line in result.err.splitlines() if "Traceback" in line] == []
    assert {(r.status, said in (r.error or "")) for r in store.list_runs()} == {("failed", True)}


def test_a_teacher_whose_run_gave_num_classes_in_kwargs_scores(
    cli: Cli, tiny_exp: Callable[..., Path], store: RunStore
) -> None:
    """A run's own model.kwargs.num_classes, agreeing with its data, is taken: as a distill
    teacher the same run is built again without giving num_classes twice (a TypeError)."""
    trained = cli("run", str(tiny_exp(epochs=1)), "--set", "data.limit=64",
                  "--set", "model.kwargs.num_classes=10")  # fmt: skip
    assert trained.code == 0, trained.err
    images = torch.zeros(4, 1, 8, 8, dtype=torch.uint8)
    scores = teacher.score(teacher.stored(store, 1), store, images, torch.device("cpu"), 4)
    assert scores is not None


def test_a_sweep_point_of_batch_norm_at_batch_size_1_refuses_the_sweep_up_front(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, store: RunStore
) -> None:
    """The batch-of-one check lives where models are built, so a sweep's up-front check sees
    it too: the sweep stores nothing (its point was stored failed after point 1 trained)."""
    tiny_exp(epochs=1)
    spec = model_file(tmp_path, BATCH_NORM).partition("=")[2]
    (tmp_path / "bs.toml").write_text(
        f'base = "tiny.toml"\n[set]\n"data.limit" = 40\n"model.name" = "{spec}"\n'
        '[grid]\n"train.batch_size" = [2, 1]\n'
    )
    result = cli("sweep", "bs.toml")
    assert result.code == 2, result.err
    assert result.err.startswith("error: bs.toml point 2 (train.batch_size=1): model ")
    assert "cannot train at train.batch_size 1" in result.err
    assert store.list_runs() == []


def test_analyze_refuses_a_model_name_other_than_its_argument(cli: Cli) -> None:
    """As predict and export do (round 6): it counted smallcnn, exit 0, for model.name=resnet20."""
    result = cli("analyze", "smallcnn", "--set", "model.name=resnet20")
    assert result.code == 2, result.err
    assert result.err == (
        "error: model.name='resnet20' disagrees with the model argument 'smallcnn' (leave it out)\n"
    )
    same = cli(
        "analyze", "smallcnn", "--set", "model.name=smallcnn", "--set", "model.kwargs.num_classes=7"
    )
    assert same.code == 0, same.err
