"""A sweep keeps what exporting its points needs: with run.checkpoint = false (the shipped
sweeps' setting) the final weights of its winner, the other points' deleted, and an export of
one of those says in its one line where the weights are; with run.checkpoint = true every
point's checkpoint. Real sweeps of two tiny points, exported to real ONNX files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.deploy.export import from_run
from dlperf.store import RunStore
from tests.conftest import CliResult

# 64 training images in batches of 32: 2 steps an epoch; lr 1e-6 barely learns, so the other
# point wins, whichever order they run in.
BASE = """
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
checkpoint = {checkpoint}
out_dir = "{out}"
"""
SWEEP = 'base = "base.toml"\n[grid]\n"train.lr" = [1e-6, 0.1]\n'


def run_sweep(
    cli: Callable[..., CliResult], root: Path, checkpoint: bool, *args: str
) -> dict[str, Any]:
    flag = "true" if checkpoint else "false"
    (root / "base.toml").write_text(BASE.format(checkpoint=flag, out=root / "dlperf_runs"))
    (root / "lr.toml").write_text(SWEEP)
    result = cli("sweep", str(root / "lr.toml"), "--json", *args)
    assert result.code == 0, result.err
    summary: dict[str, Any] = json.loads(result.out)
    assert summary["winner"] is not None
    return summary


def checkpoint_of(store: RunStore, run_id: int) -> Path | None:
    """The run's recorded checkpoint file, None when it has none."""
    paths = [Path(a["path"]) for a in store.artifacts(run_id) if a["kind"] == "checkpoint"]
    return paths[-1] if paths else None


def checkpoints(store: RunStore, run_ids: list[int]) -> dict[int, bool]:
    """Whether each run's recorded checkpoint file is there."""
    return {i: (path := checkpoint_of(store, i)) is not None and path.is_file() for i in run_ids}


# Two jobs: the points' worker processes save the weights (through the same `run_point`),
# and the winner is exported for real: their start-up and torch.onnx make it a slow test.
@pytest.mark.parametrize("jobs", ["1", pytest.param("2", marks=pytest.mark.faults)])
def test_a_sweep_without_checkpoints_keeps_its_winners_weights_for_export(
    jobs: str, cli: Callable[..., CliResult], tmp_path: Path, store: RunStore
) -> None:
    summary = run_sweep(cli, tmp_path, False, "--jobs", jobs)
    winner = summary["winner"]
    others = [p["run_id"] for p in summary["points"] if p["run_id"] != winner]
    assert checkpoints(store, [winner, *others]) == {winner: True, **dict.fromkeys(others, False)}

    # What `dlperf export` reads of a run: its trained weights, checked as the run's own.
    source = from_run(store, winner)
    trained = torch.load(checkpoint_of(store, winner), weights_only=True)["model"]
    for name, tensor in source.model.state_dict().items():
        assert torch.equal(tensor, trained[name]), name
    if jobs == "2":  # the slow test exports it for real too (torch.onnx, parity in ORT)
        exported = cli("export", str(winner), "--out", str(tmp_path / "winner.onnx"))
        assert exported.code == 0, exported.err
        assert (tmp_path / "winner.onnx").is_file()

    # A point whose weights the sweep did not keep: one line saying which run it kept.
    refused = cli("export", str(others[0]), "--out", str(tmp_path / "other.onnx"))
    assert refused.code == 2 and refused.out == ""
    assert refused.err.count("\n") == 1 and refused.err.startswith("error: ")
    assert f"run {others[0]} has no checkpoint file to export" in refused.err
    assert f"`dlperf export {winner}`" in refused.err and "run.checkpoint = true" in refused.err


def test_a_rerun_keeps_the_winner_and_a_sweep_with_checkpoints_keeps_every_point(
    cli: Callable[..., CliResult], tmp_path: Path, store: RunStore
) -> None:
    first = run_sweep(cli, tmp_path, False)
    again = run_sweep(cli, tmp_path, False)  # every point skipped: the winner's weights stay
    assert again["winner"] == first["winner"] and all(p["skipped"] for p in again["points"])
    assert checkpoints(store, [first["winner"]]) == {first["winner"]: True}

    # Weights gone since (removed by hand, or a sweep of a dlperf that kept none): the way
    # to get them back.
    for artifact in store.artifacts(first["winner"]):
        Path(artifact["path"]).unlink()
    refused = cli("export", str(first["winner"]), "--out", str(tmp_path / "gone.onnx"))
    assert refused.code == 2 and refused.err.count("\n") == 1
    assert "has no point's weights; sweep again with --new" in refused.err

    kept = run_sweep(cli, tmp_path, True)  # another config: a study of its own
    ids = [p["run_id"] for p in kept["points"]]
    assert kept["study_id"] != first["study_id"]
    assert checkpoints(store, ids) == dict.fromkeys(ids, True)
