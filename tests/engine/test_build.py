"""dlperf.engine.build with fake data (no data set is loaded): the model built seeded and
checked, the kwargs dlperf gives itself refused when they disagree with the data, a model
that changes torch's thread count or leaves its parameters on the meta device, the backbone
frozen for feature extraction, and a sweep's up-front check sharing one load of each data
set and naming its first refused point."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.config import Experiment
from dlperf.engine import build
from dlperf.engine.build import build_model, first_refused, start_weights
from dlperf.errors import UserError
from dlperf.models import create_model
from dlperf.models.transfer import head_name


class Split:
    def __init__(self, labels: list[int]) -> None:
        self.labels = torch.tensor(labels)

    def __len__(self) -> int:
        return len(self.labels)


class FakeData:
    """What the checks read of an ImageData: digits-like 1x8x8 images of 10 classes."""

    name = "fakedigits"
    shape = (1, 8, 8)
    num_classes = 10

    def __init__(self, n: int = 40) -> None:
        self.classes = [str(i) for i in range(10)]
        self.train = Split([i % 10 for i in range(n)])
        self.val = self.test = Split([0, 1])


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(message)


def experiment(name: str = "smallcnn", **sections: Any) -> Experiment:
    config: dict[str, Any] = {"model": {"name": name}, "data": {"name": "digits"}}
    config["train"] = {"batch_size": 4}
    config["run"] = {"seed": 3}
    for key, value in sections.items():
        config.setdefault(key, {}).update(value)
    return Experiment.model_validate(config)


@pytest.fixture
def threads() -> Iterator[None]:
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def test_the_model_is_seeded_sized_and_leaves_the_rng_where_the_seed_put_it() -> None:
    a = build_model(experiment(), FakeData(), torch.device("cpu"))  # type: ignore[arg-type]
    drawn = torch.rand(3)
    b = build_model(experiment(), FakeData(), torch.device("cpu"))  # type: ignore[arg-type]
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    torch.manual_seed(3)
    assert torch.equal(drawn, torch.rand(3))  # the dry checks drew nothing from the run's stream
    assert a(torch.zeros(2, 1, 8, 8)).shape == (2, 10) and not a.training


def test_kwargs_that_disagree_with_the_data_are_refused() -> None:
    exp = experiment(model={"kwargs": {"num_classes": 5}})
    with pytest.raises(UserError) as e:
        build_model(exp, FakeData(), torch.device("cpu"))  # type: ignore[arg-type]
    assert e.value.message == "model.kwargs.num_classes=5: fakedigits has 10 classes"
    assert e.value.hint is not None and e.value.hint.startswith("drop model.kwargs.num_classes")
    agreeing = experiment(model={"kwargs": {"num_classes": 10, "in_channels": 1}})
    build_model(agreeing, FakeData(), torch.device("cpu"))  # type: ignore[arg-type]


MODEL_FILE = """
import torch
from torch import nn

def sets_threads(num_classes=10, in_channels=1):
    torch.set_num_threads(1)
    return nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, num_classes))

def on_meta(num_classes=10, in_channels=1):
    return nn.Linear(64, num_classes, device="meta")
"""


def test_a_model_that_changes_the_thread_count_has_it_set_back(
    tmp_path: Path, threads: None
) -> None:
    (tmp_path / "m.py").write_text(MODEL_FILE)
    torch.set_num_threads(2)
    log = Log()
    build_model(experiment(f"{tmp_path}/m.py:sets_threads"), FakeData(), torch.device("cpu"), log)  # type: ignore[arg-type]
    assert torch.get_num_threads() == 2
    assert log.lines == [
        "warning: the model set torch's thread count to 1; set back to run.threads (2)"
    ]


def test_parameters_on_the_meta_device_are_refused(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(MODEL_FILE)
    exp = experiment(f"{tmp_path}/m.py:on_meta")
    with pytest.raises(UserError, match="has its parameters on the meta device"):
        build_model(exp, FakeData(), torch.device("cpu"))  # type: ignore[arg-type]


def test_feature_extraction_freezes_all_but_the_head() -> None:
    model = create_model("smallcnn", num_classes=10, in_channels=1)
    model(torch.zeros(2, 1, 8, 8))  # sizes its lazy layers, as build_model's dry forward does
    exp = experiment(model={"transfer": "feature-extract", "weights": "run:1"})
    notes = start_weights(model, exp.model, "run:1", None)
    assert notes == ["backbone frozen: only the head trains"]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"{head_name(model)}.weight", f"{head_name(model)}.bias"}


def test_first_refused_loads_each_data_set_once_and_names_the_first_refused_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loads: list[str] = []

    def load_run_data(
        exp: Experiment, start: object, reporter: object = None
    ) -> tuple[FakeData, list[str]]:
        loads.append(exp.data.name)
        return FakeData(n=40), []

    monkeypatch.setattr(build, "load_run_data", load_run_data)
    exps = [
        experiment(),
        experiment(train={"batch_size": 8}),
        experiment(train={"batch_size": 41}),  # more than the 40 training images
        experiment(data={"name": "mnist5k"}, train={"batch_size": 50}),
    ]
    found = first_refused(exps, runs=None)  # type: ignore[arg-type]
    assert loads == ["digits", "mnist5k"]
    assert found is not None
    index, error = found
    assert index == 2 and "train.batch_size 41 is larger than the 40 training images" in str(error)
    assert first_refused(exps[:2], runs=None) is None  # type: ignore[arg-type]
