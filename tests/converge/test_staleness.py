"""dlperf.converge.staleness on schedules worked out by hand."""

from __future__ import annotations

import copy
import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.converge import staleness
from dlperf.engine.build import build_model
from dlperf.errors import UserError
from tests.conftest import CliResult

COURSE = Path(__file__).resolve().parents[2] / "docs" / "course.md"


def rows(learners: dict[str, list[float]], push: float = 0.0, pull: float = 0.0) -> list[tuple]:
    return [
        (g.learner, g.index, g.time, g.read_version, g.applied_version, g.staleness)
        for g in staleness.simulate(learners, push, pull)
    ]


def test_fast_and_slow_learner() -> None:
    # L2 reads version 0 at time 0 and finishes at 2.5, after L1's updates 1 and 2.
    assert rows({"L1": [1, 2, 3, 4], "L2": [2.5, 5]}) == [
        ("L1", 1, 1, 0, 0, 0),
        ("L1", 2, 2, 1, 1, 0),
        ("L2", 1, 2.5, 0, 2, 2),
        ("L1", 3, 3, 2, 3, 1),
        ("L1", 4, 4, 4, 4, 0),  # read after its own third update, nobody else in between
        ("L2", 2, 5, 3, 5, 2),
    ]


def test_the_course_example_pushes_when_the_page_says(cli: Callable[..., CliResult]) -> None:
    # docs/course.md states the problem (two learners, the instants their gradients reach the
    # server, a push latency of 0.1) and gives the command: the command must print those
    # instants, not the problem's with the latency added twice.
    section = COURSE.read_text(encoding="utf-8").split("## Gradient staleness")[1]
    said = re.search(r"at t = ([\d., ]+) and one at ([\d., ]+) \(", section)
    assert said is not None
    stated = [[float(t) for t in group.split(", ")] for group in said.groups()]
    assert stated == [[1.1, 2.2, 3.3, 4.4], [2.6, 5.2]]
    line = next(ln for ln in section.splitlines() if ln.startswith("dlperf staleness"))
    args = shlex.split(line.split(" #=> ")[0])[1:]
    r = cli(*args, "--json")
    assert r.code == 0, r.err
    times: dict[str, list[float]] = {}
    for g in json.loads(r.out)["gradients"]:
        times.setdefault(g["learner"], []).append(round(g["time"], 9))
    assert list(times.values()) == stated


def test_simultaneous_completions_follow_learner_order() -> None:
    assert rows({"A": [1, 2], "B": [1, 2]}) == [
        ("A", 1, 1, 0, 0, 0),
        ("B", 1, 1, 0, 1, 1),
        ("A", 2, 2, 1, 2, 1),
        ("B", 2, 2, 2, 3, 1),
    ]
    # The same schedule with the learners given the other way round.
    assert [r[0] for r in rows({"B": [1, 2], "A": [1, 2]})] == ["B", "A", "B", "A"]


def test_rates_that_meet_tie_exactly() -> None:
    # 3 × (1/3) and 1 × 1 both finish at time 1: the tie goes to the learner given first.
    times = staleness.from_speeds({"fast": 3.0, "slow": 1.0}, horizon=1.0)
    assert rows(times) == [
        ("fast", 1, pytest.approx(1 / 3), 0, 0, 0),
        ("fast", 2, pytest.approx(2 / 3), 1, 1, 0),
        ("fast", 3, pytest.approx(1.0), 2, 2, 0),
        ("slow", 1, 1.0, 0, 3, 3),
    ]


def test_push_and_pull_latencies_stretch_the_schedule() -> None:
    # L1 computes for 1 then 1, L2 for 1.5; a push takes 0.25, a pull 0.5.
    # L1#1 arrives 1.25; its weights (v1) are back at 1.75; L1#2 arrives 1.75 + 1 + 0.25.
    assert rows({"L1": [1, 2], "L2": [1.5]}, push=0.25, pull=0.5) == [
        ("L1", 1, 1.25, 0, 0, 0),
        ("L2", 1, 1.75, 0, 1, 1),
        ("L1", 2, 3.0, 1, 2, 1),
    ]


def test_latencies_that_make_a_tie() -> None:
    # A computes 1 and 1, B 2.5; push and pull take 0.25. A#2 arrives 1.25 + 0.25 + 1 + 0.25
    # = 2.75, when B#1 does (2.5 + 0.25): the learner given first is applied first.
    assert rows({"A": [1, 2], "B": [2.5]}, push=0.25, pull=0.25) == [
        ("A", 1, 1.25, 0, 0, 0),
        ("A", 2, 2.75, 1, 1, 0),
        ("B", 1, 2.75, 0, 2, 2),
    ]
    assert rows({"B": [2.5], "A": [1, 2]}, push=0.25, pull=0.25) == [
        ("A", 1, 1.25, 0, 0, 0),
        ("B", 1, 2.75, 0, 1, 1),
        ("A", 2, 2.75, 1, 2, 1),
    ]


def test_json_shape() -> None:
    doc = staleness.to_json(staleness.simulate({"L1": [1, 2], "L2": [1.5]}))
    assert set(doc) == {"gradients", "summary"}
    assert set(doc["gradients"][0]) == {
        "learner",
        "index",
        "time",
        "read_version",
        "applied_version",
        "staleness",
    }
    assert doc["summary"]["gradients"] == 3
    assert doc["summary"]["histogram"] == {"0": 1, "1": 2}  # L1#1; L2#1 and L1#2
    assert doc["summary"]["max_staleness"] == 1


@pytest.mark.parametrize(
    ("learners", "message"),
    [
        ({"L1": [2, 1]}, "increasing"),
        ({"L1": [0, 1]}, "positive"),
        ({"L1": []}, "no completion times"),
        ({}, "at least one"),
    ],
)
def test_bad_learners(learners: dict[str, list[float]], message: str) -> None:
    with pytest.raises(UserError, match=message):
        staleness.simulate(learners)


def test_bad_latency_and_speeds() -> None:
    with pytest.raises(UserError, match="push-latency"):
        staleness.simulate({"L1": [1]}, push_latency=-1)
    with pytest.raises(UserError, match="no gradient"):
        staleness.from_speeds({"L1": 0.1}, horizon=5)


def test_one_learner_async_sgd_equals_sync_sgd(tiny_exp: Callable[..., Path]) -> None:
    from dlperf.config import load_experiment
    from dlperf.data import load_data
    from dlperf.engine import async_sgd
    from dlperf.progress import NullReporter

    exp = load_experiment(tiny_exp(epochs=1), ["data.limit=160"])
    data = load_data(exp.data)
    cpu = torch.device("cpu")
    updates = len(data.train) // exp.train.batch_size
    reads = async_sgd.read_versions({"L1": 1.0}, updates)
    assert reads == list(range(updates))  # one learner always reads the newest weights

    models = {}
    for mode, schedule in (("sync", None), ("async", reads), ("stale", [0] * updates)):
        models[mode] = build_model(exp, data, cpu)
        async_sgd.train(exp, data, models[mode], cpu, schedule, NullReporter())
    sync, emulated, stale = (models[m].state_dict() for m in ("sync", "async", "stale"))
    assert all(torch.equal(sync[k], emulated[k]) for k in sync)
    # Every gradient computed on the initial weights trains differently.
    assert not all(torch.equal(sync[k], stale[k]) for k in sync)


def test_async_sgd_trains_at_run_precision(tiny_exp: Callable[..., Path]) -> None:
    from dlperf.config import load_experiment
    from dlperf.data import load_data
    from dlperf.engine import async_sgd
    from dlperf.progress import NullReporter

    cpu = torch.device("cpu")
    states = {}
    for precision in ("fp32", "bf16"):
        exp = load_experiment(
            tiny_exp(epochs=1), ["data.limit=160", f"run.precision={precision!r}"]
        )
        data = load_data(exp.data)
        reads = async_sgd.read_versions({"L1": 1.0, "L2": 0.5}, len(data.train) // 32)
        model = build_model(exp, data, cpu)
        async_sgd.train(exp, data, model, cpu, reads, NullReporter())
        states[precision] = model.state_dict()
    fp32, bf16 = states["fp32"], states["bf16"]
    assert all(torch.isfinite(v.float()).all() for v in bf16.values())
    assert not all(torch.equal(fp32[k], bf16[k]) for k in fp32)  # autocast reached the forward


def test_stale_forward_gives_the_gradient_at_the_stale_weights() -> None:
    from torch import nn

    from dlperf.engine.async_sgd import StaleForward

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    model(torch.randn(16, 4))  # running statistics away from their initial values
    old = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    model(torch.randn(16, 4))
    live = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(16, 4), torch.randint(3, (16,))

    forward = StaleForward(model)
    forward.read(old)
    nn.functional.cross_entropy(forward(x), y).backward()
    # A learner holding the old weights and statistics, differentiated by plain autograd.
    learner = copy.deepcopy(model)
    learner.load_state_dict(old)
    learner.zero_grad()
    nn.functional.cross_entropy(learner(x), y).backward()

    for (name, p), q in zip(model.named_parameters(), learner.parameters(), strict=True):
        assert not torch.equal(p, old[name]) and torch.equal(p, live[name])  # not stepped
        assert p.grad is not None and torch.equal(p.grad, q.grad)
    for (name, b), c in zip(model.named_buffers(), learner.buffers(), strict=True):
        assert torch.equal(b, c), name  # the statistics went from the old version's on
    # Reading the live weights again is a plain forward pass through the model.
    forward.read(None)
    assert torch.equal(forward(x), model(x))


def test_equal_learners_settle_at_staleness_n_minus_1() -> None:
    from dlperf.engine import async_sgd

    reads = async_sgd.read_versions({"L1": 1.0, "L2": 1.0, "L3": 1.0}, 9)
    assert [i - r for i, r in enumerate(reads)] == [0, 1, 2, 2, 2, 2, 2, 2, 2]


def test_the_staleness_figure_has_whole_epochs_and_staleness_ticks() -> None:
    from dlperf.report.staleness import draw_staleness

    curves = {"sync": [0.5, 0.7, 0.8], "async": [0.4, 0.6, 0.75]}
    fig = draw_staleness(curves, {"0": 3, "1": 9, "2": 4})
    for ax in fig.axes:
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(t == int(t) for t in ticks), (ax.get_xlabel(), ticks)
