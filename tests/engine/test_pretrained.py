"""Starting weights (dlperf.engine.pretrained) resolved against a fake of the run store's
reads: the engine needs only what dlperf.engine.stored names, no store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.config import DataConfig, ModelConfig
from dlperf.engine import checkpoint, pretrained
from dlperf.engine.stored import StoredRuns
from dlperf.errors import UserError
from dlperf.records import RunSummary


@dataclass(frozen=True)
class FakeRun:
    id: int
    name: str = "base"
    kind: str = "run"
    status: str = "finished"
    config: dict[str, Any] = field(default_factory=dict)
    config_hash: str | None = "h"
    trained: RunSummary = field(default_factory=RunSummary)


@dataclass
class FakeRuns:
    """Runs newest first, as the store lists them, and their artifacts."""

    runs: list[FakeRun]
    files: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    id: str = "fake-store"

    def get_run(self, run_id: int) -> FakeRun:
        return next(r for r in self.runs if r.id == run_id)

    def list_runs(self, kind: str | None = None) -> Sequence[FakeRun]:
        return self.runs

    def artifacts(self, run_id: int) -> list[dict[str, Any]]:
        return self.files.get(run_id, [])


def resolve(weights: str, runs: StoredRuns) -> pretrained.Pretrained:
    found = pretrained.resolve(ModelConfig(name="smallcnn", weights=weights), runs)
    assert found is not None
    return found


def test_no_weights_resolve_to_none() -> None:
    assert pretrained.resolve(ModelConfig(name="smallcnn"), FakeRuns([])) is None


def test_run_last_name_is_the_newest_finished_run_of_that_name() -> None:
    runs = FakeRuns([FakeRun(5, status="failed"), FakeRun(4, name="other"), FakeRun(3)])
    assert resolve("run:last:base", runs).source == "run 3"
    with pytest.raises(UserError, match="no finished run named 'gone'"):
        resolve("run:last:gone", runs)
    with pytest.raises(UserError, match="expected run:ID or run:last:NAME"):
        resolve("run:three", runs)


def test_a_run_gives_the_images_its_config_or_its_training_saw() -> None:
    seen = RunSummary(data={"shape": [3, 24, 24], "mean": [0.5] * 3, "std": [0.2] * 3})
    runs = FakeRuns([FakeRun(2, config={"data": {"image_size": 32}}, trained=seen)])
    start = resolve("run:2", runs)
    assert (start.image_size, start.mean, start.std) == (32, (0.5,) * 3, (0.2,) * 3)


def test_a_run_s_weights_come_from_its_own_checkpoint(tmp_path: Path) -> None:
    weights = {"w": torch.arange(4.0)}
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(
        checkpoint.Slot(path, checkpoint.Owner("fake-store", 2, "h")), {"model": weights}
    )
    runs = FakeRuns([FakeRun(2)], {2: [{"kind": "checkpoint", "path": str(path)}]})
    assert torch.equal(resolve("run:2", runs).fetch()["w"], weights["w"])
    stranger = FakeRuns([FakeRun(2, config_hash="other")], runs.files)
    with pytest.raises(UserError, match="is the checkpoint of run 2 in store fake-store"):
        resolve("run:2", stranger).fetch()
    with pytest.raises(UserError, match="run 2 has no checkpoint to start from"):
        resolve("run:2", FakeRuns([FakeRun(2)])).fetch()


def test_a_file_holds_a_state_dict_bare_or_under_a_key(tmp_path: Path) -> None:
    runs = FakeRuns([])
    wrapped = tmp_path / "wrapped.pt"
    torch.save({"state_dict": {"w": torch.ones(2)}}, wrapped)
    assert torch.equal(resolve(str(wrapped), runs).fetch()["w"], torch.ones(2))
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a state-dict file"):
        resolve(str(garbage), runs).fetch()
    with pytest.raises(UserError, match="no such file"):
        resolve(str(tmp_path / "missing.pt"), runs)
    with pytest.raises(UserError, match="is a directory"):
        resolve(str(tmp_path), runs)


def test_the_weights_resolution_applies_only_where_the_config_leaves_it() -> None:
    start = pretrained.Pretrained("w", dict, image_size=224)
    assert pretrained.data_config(DataConfig(), start).image_size == 224
    assert pretrained.data_config(DataConfig(image_size=32), start).image_size == 32
    assert pretrained.data_config(DataConfig(), None).image_size is None
