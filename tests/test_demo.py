"""dlperf.demo: run_demo's contract (its presets, one study holding both runs, the pass
mark of 95% test accuracy) on fake training, so that nothing trains here (`make demo` and
tests/scenarios train for real)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from dlperf import demo
from dlperf.config import Experiment, load_experiment
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from tests.conftest import Logged


class Result:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def to_dict(self) -> dict[str, Any]:
        return self.doc


class Training:
    """run_experiment faked: each call's experiment and study kept, each run ending as
    `outcomes` says (status, test accuracy), in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Experiment, int]] = []
        self.outcomes: list[tuple[str, float]] = [("finished", 0.97), ("finished", 0.96)]

    def __call__(
        self, exp: Experiment, store: RunStore, reporter: object, *, study_id: int
    ) -> Result:
        self.calls.append((exp, study_id))
        status, acc = self.outcomes[len(self.calls) - 1]
        return Result({"run_id": 10 + len(self.calls), "status": status, "test_accuracy": acc})


@pytest.fixture
def trained(monkeypatch: pytest.MonkeyPatch) -> Training:
    training = Training()
    monkeypatch.setattr(demo, "run_experiment", training)
    return training


def test_the_presets_are_the_small_cnn_and_resnet20_on_digits() -> None:
    names = []
    for preset in demo.PRESETS:
        with resources.as_file(resources.files("dlperf.presets") / preset) as path:
            exp = load_experiment(path)
        names.append((exp.model.name, exp.data.name))
    assert names == [("smallcnn", "digits"), ("resnet20", "digits")]


def test_both_runs_are_one_demo_study_in_order(store: RunStore, trained: Training) -> None:
    reporter = Logged()
    result = demo.run_demo(store, reporter)
    assert [exp.model.name for exp, _ in trained.calls] == ["smallcnn", "resnet20"]
    study = result["study_id"]
    assert {s for _, s in trained.calls} == {study}
    assert store.get_study(study)["kind"] == "demo"
    assert result["target"] == 0.95 and result["passed"] is True
    assert result["runs"] == [
        {"model": "smallcnn", "run_id": 11, "status": "finished", "test_accuracy": 0.97},
        {"model": "resnet20", "run_id": 12, "status": "finished", "test_accuracy": 0.96},
    ]
    assert reporter.lines == ["training smallcnn on digits", "training resnet20 on digits"]


def test_out_dir_is_given_to_every_run(store: RunStore, trained: Training, tmp_path: Path) -> None:
    demo.run_demo(store, NullReporter(), out_dir=str(tmp_path / "out"))
    assert [exp.run.out_dir for exp, _ in trained.calls] == [str(tmp_path / "out")] * 2


@pytest.mark.parametrize(
    ("outcomes", "passed"),
    [
        ((("finished", 0.95), ("finished", 0.95)), True),  # the target itself passes
        ((("finished", 0.99), ("finished", 0.9499)), False),  # one below it fails
        ((("failed", 0.99), ("finished", 0.99)), False),  # a diverged run fails
    ],
)
def test_passed_needs_both_runs_finished_at_the_target(
    store: RunStore,
    trained: Training,
    outcomes: tuple[tuple[str, float], ...],
    passed: bool,
) -> None:
    trained.outcomes = list(outcomes)
    assert demo.run_demo(store, NullReporter())["passed"] is passed
