"""dlperf.engine.checkpoint: a checkpoint is stamped with its owner and loaded only by it;
every other file is one line of bad input; RNG states round-trip; a state the safe loader
refuses is caught at save; weights that no longer fit the model name what differs; and the
run's last checkpoint is found through a fake store."""

from __future__ import annotations

import os
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from dlperf.engine.checkpoint import (
    EPOCH_ENDED,
    Owner,
    Slot,
    check_loadable,
    fit_weights,
    load,
    rng_state,
    run_checkpoint,
    save,
    set_rng_state,
)
from dlperf.errors import UserError

CPU = torch.device("cpu")
OWNER = Owner("store-a", 3, "hash3")


def state() -> dict[str, Any]:
    return {"model": nn.Linear(2, 1).state_dict(), "epoch": 2}


def test_a_saved_checkpoint_loads_back_for_its_owner(tmp_path: Path) -> None:
    saved: list[Path] = []
    path = tmp_path / "deep" / "ckpt.pt"
    save(Slot(path, OWNER, on_saved=saved.append), state())
    assert saved == [path]  # told once it is on disk
    loaded = load(path, OWNER)
    assert loaded["epoch"] == 2 and set(loaded["model"]) == {"weight", "bias"}
    assert not [p for p in path.parent.iterdir() if p != path]  # no temporary file left


def test_another_runs_checkpoint_is_refused_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    save(Slot(path, OWNER), state())
    with pytest.raises(UserError) as e:
        load(path, Owner("store-a", 4, "hash3"))
    assert str(e.value) == (
        f"{path} is the checkpoint of run 3 in store store-a (config hash3), "
        "not of run 4 in store store-a (config hash3)"
    )


def test_a_bare_state_dict_names_no_run(tmp_path: Path) -> None:
    path = tmp_path / "bare.pt"
    torch.save(nn.Linear(2, 1).state_dict(), path)
    with pytest.raises(UserError, match="is not a dlperf run checkpoint: it names no run"):
        load(path, OWNER)


def test_garbage_and_truncated_files_are_one_line(tmp_path: Path) -> None:
    garbage = tmp_path / "g.pt"
    garbage.write_bytes(b"not a zip at all")
    with pytest.raises(UserError, match="truncated or not written by dlperf"):
        load(garbage, OWNER)
    whole = tmp_path / "w.pt"
    save(Slot(whole, OWNER), state())
    cut = tmp_path / "cut.pt"
    cut.write_bytes(whole.read_bytes()[:100])
    with pytest.raises(UserError, match="truncated or not written by dlperf"):
        load(cut, OWNER)


class NumpyState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(1, 1)

    def get_extra_state(self) -> Any:
        return np.zeros(2)

    def set_extra_state(self, state: Any) -> None:
        pass


def test_a_state_the_safe_loader_refuses_is_caught_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    with pytest.raises(UserError, match=r"state '_extra_state' holds .* \(numpy.ndarray\)"):
        save(Slot(path, OWNER), {"model": NumpyState().state_dict()})
    assert not path.exists()
    check_loadable({"w": torch.zeros(1), "n": 3, "d": {"a": [1.0]}})  # plain values pass
    check_loadable(None)  # not a mapping: nothing to check


def test_rng_states_round_trip() -> None:
    saved = rng_state(CPU)
    drawn = (torch.rand(3), np.random.rand(3), random.random())
    torch.rand(5), np.random.rand(5), random.random()  # the streams move on
    set_rng_state(saved, CPU)
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(drawn[0], again[0])
    assert np.array_equal(drawn[1], again[1]) and drawn[2] == again[2]
    assert isinstance(saved["numpy"][1], torch.Tensor) and "cuda" not in saved


def test_weights_that_no_longer_fit_name_what_differs() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    weights = nn.Sequential(nn.Linear(2, 4)).state_dict() | {"extra": torch.zeros(1)}
    with pytest.raises(UserError) as e:
        fit_weights(model, weights, 5, "smallcnn")
    assert e.value.message == (
        "run 5's checkpoint does not fit model 'smallcnn' as it is now: "
        "0.weight is [4, 2] in the checkpoint, [3, 2] in the model; "
        "0.bias is [4] in the checkpoint, [3] in the model; "
        "1.weight is not in the checkpoint; and 2 more"
    )
    assert e.value.hint == "use the dlperf the run was trained with, or train it again"


def test_fitting_weights_load_them() -> None:
    model, other = nn.Linear(2, 1), nn.Linear(2, 1)
    fit_weights(model, other.state_dict(), 1, "m")
    assert torch.equal(model.weight, other.weight)


class FakeRuns:
    """The store reads run_checkpoint makes."""

    id = "store-a"

    def __init__(self, paths: list[Path], checkpoint: bool, epoch_ended: bool) -> None:
        self.paths, self.checkpoint, self.epoch_ended = paths, checkpoint, epoch_ended

    def artifacts(self, run_id: int) -> list[dict[str, Any]]:
        return [{"kind": "log", "path": "x"}] + [
            {"kind": "checkpoint", "path": str(p)} for p in self.paths
        ]

    def get_run(self, run_id: int) -> Any:
        return SimpleNamespace(config={"run": {"checkpoint": self.checkpoint}})

    def last_step(self, run_id: int, key: str) -> int | None:
        assert key == EPOCH_ENDED
        return 1 if self.epoch_ended else None


def find(runs: FakeRuns) -> Path:
    return run_checkpoint(runs, 9, "to resume", "train it again")  # type: ignore[arg-type]


def test_the_last_recorded_checkpoint_is_the_runs(tmp_path: Path) -> None:
    old, new = tmp_path / "1.pt", tmp_path / "2.pt"
    old.write_bytes(b"x")
    new.write_bytes(b"x")
    assert find(FakeRuns([old, new], True, True)) == new


def test_a_run_without_a_checkpoint_says_so_and_why(tmp_path: Path) -> None:
    with pytest.raises(UserError) as e:
        find(FakeRuns([], True, False))
    assert str(e.value) == "run 9 has no checkpoint to resume (train it again)"
    with pytest.raises(UserError, match="its first epoch ended but its checkpoint was not"):
        find(FakeRuns([], True, True))


def test_a_recorded_checkpoint_gone_or_not_a_file(tmp_path: Path) -> None:
    gone = tmp_path / "gone.pt"
    with pytest.raises(UserError, match=f"run 9's checkpoint {gone} is missing"):
        find(FakeRuns([gone], True, True))
    with pytest.raises(UserError, match="run 9 has no checkpoint to resume"):
        find(FakeRuns([gone], False, False))  # never written: no epoch saved one
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="is not a regular file"):
        find(FakeRuns([fifo], True, True))  # never opened: that would wait for a writer
