"""dlperf.cli.staleness: the simulated parameter server's table and JSON against a hand
calculation, and every misuse of its options as one line and exit 2 (--train's checks come
before anything trains)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.cli.staleness import _learners
from dlperf.errors import UserError
from tests.cli.test_app import one_line_error
from tests.conftest import REPO, CliResult

EXP = str(REPO / "examples" / "digits_smallcnn.toml")


def test_help_ends_with_an_example() -> None:
    done = CliRunner().invoke(app, ["staleness", "--help"])
    assert done.exit_code == 0 and "Example: dlperf staleness --learner L1=1,2,3,4" in done.output


def test_learners_keep_the_order_given_and_strip_names() -> None:
    assert _learners([" L2 =2.5", "L1=1,2,3"]) == {"L2": [2.5], "L1": [1.0, 2.0, 3.0]}
    assert list(_learners(["b=1", "a=1"])) == ["b", "a"]
    with pytest.raises(UserError, match="learner L1 is given twice"):
        _learners(["L1=1", " L1=2"])


def test_json_against_a_hand_simulation(cli: Callable[..., CliResult]) -> None:
    # L1 pushes at 1 and 2, L2 at 1.5. L1's first lands on version 0 (staleness 0); L2 read
    # version 0 and lands on 1 (1); L1's second read 1 after its push and lands on 2 (1).
    result = cli("staleness", "--learner", "L1=1,2", "--learner", "L2=1.5", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    rows = [(g["learner"], g["index"], g["time"], g["read_version"], g["applied_version"],
             g["staleness"]) for g in doc["gradients"]]  # fmt: skip
    assert rows == [("L1", 1, 1.0, 0, 0, 0), ("L2", 1, 1.5, 0, 1, 1), ("L1", 2, 2.0, 1, 2, 1)]
    summary = doc["summary"]
    assert summary["gradients"] == 3 and summary["max_staleness"] == 1
    assert summary["mean_staleness"] == pytest.approx(2 / 3)
    assert summary["histogram"] == {"0": 1, "1": 2}


def test_the_table_stretches_times_by_the_latencies(cli: Callable[..., CliResult]) -> None:
    # A push takes 0.1: L1 lands at 1.1, computes again from 1.1 and lands at 2.2.
    result = cli("staleness", "--learner", "L1=1,2", "--learner", "L2=1.5",
                 "--push-latency", "0.1")  # fmt: skip
    assert result.code == 0, result.err
    rows = [[c.strip() for c in line.split("│")] for line in result.out.splitlines()
            if line.startswith("L")]  # fmt: skip
    assert rows == [["L1", "1", "1.1", "0", "0", "0"], ["L2", "1", "1.6", "0", "1", "1"],
                    ["L1", "2", "2.2", "1", "2", "1"]]  # fmt: skip
    assert result.out.strip().splitlines()[-1] == (
        "3 gradients, staleness mean 0.667, max 1; histogram 0: 1, 1: 2"
    )


def test_speeds_simulate_rates_up_to_the_horizon(cli: Callable[..., CliResult]) -> None:
    # L1 finishes one gradient a unit of time (at 1 and 2), L2 one every 2 (at 2): within 2
    result = cli("staleness", "--speeds", "L1=1,L2=0.5", "--horizon", "2", "--json")
    assert result.code == 0, result.err
    gradients = json.loads(result.out)["gradients"]
    assert [(g["learner"], g["time"], g["staleness"]) for g in gradients] == [
        ("L1", 1.0, 0),
        ("L1", 2.0, 0),
        ("L2", 2.0, 2),
    ]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ([], "give --learner NAME=times ... or --speeds NAME=rate,... (not both)"),
        (["--learner", "L1=1", "--speeds", "L1=1"], "(not both)"),
        (["--speeds", "L1=1"], "--speeds needs --horizon"),
        (["--learner", "L1"], "--learner takes NAME=times, got 'L1' (e.g. --learner L1=1,2,3)"),
        (["--learner", "=1"], "--learner takes NAME=times, got '=1'"),
        (["--learner", "L1=1", "--learner", "L1=2"], "learner L1 is given twice"),
        (["--learner", "L1=a"], "--learner 'L1=a': times must be numbers"),
        (["--learners", "2"], "--learners goes with --train EXP.toml"),
        (["--learner", "L1=1", "--set", "train.lr=1"], "--set goes with --train EXP.toml"),
        (["--train", EXP], "--train needs --learners N or --speeds NAME=rate,... (one of them)"),
        (["--train", EXP, "--learners", "2", "--speeds", "L1=1"], "(one of them)"),
        (["--train", EXP, "--learners", "0"], "--learners must be ≥ 1, got 0"),
        (["--train", EXP, "--speeds", "L1=-1"], "learner speeds must be positive, got L1=-1"),
        (["--train", "missing.toml", "--learners", "2"], "missing.toml: no such experiment"),
        (["--horizon", "x"], "Invalid value for '--horizon'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    cli: Callable[..., CliResult], args: list[str], text: str
) -> None:
    one_line_error(cli("staleness", *args), text)
