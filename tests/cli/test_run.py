"""dlperf.cli.run: `dlperf run`, `config show | keys` and `demo` at their stable contract:
--help ends with an example, --json is the result's document (training faked: a run's
own tests train for real), the flags reach the experiment, exit 1 on a run that failed or a
demo below target, and bad input as one line, exit 2."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from dlperf import demo as demo_module
from dlperf.cli import app
from dlperf.config import Experiment
from dlperf.experiment import run as run_module
from dlperf.records import RunResult, RunSummary
from tests.cli.test_app import one_line_error
from tests.conftest import REPO, CliResult

EXP = str(REPO / "examples" / "digits_smallcnn.toml")
SUMMARY = RunSummary(test_accuracy=0.93, best_val_accuracy=0.95, epochs=3, steps=30,
                     throughput=1234.5, device="cpu", threads=1)  # fmt: skip


@pytest.mark.parametrize(
    ("command", "example"),
    [
        (["run"], "Example: dlperf run examples/digits_smallcnn.toml"),
        (["config", "show"], "Example: dlperf config show examples/digits_smallcnn.toml"),
        (["config", "keys"], "Example: dlperf config keys"),
        (["demo"], "Example: dlperf demo"),
    ],
)
def test_help_ends_with_an_example(command: list[str], example: str) -> None:
    done = CliRunner().invoke(app, [*command, "--help"])
    assert done.exit_code == 0 and example in done.output


class Training:
    """run_experiment faked: each experiment given kept, every run ending as `result`."""

    def __init__(self) -> None:
        self.experiments: list[Experiment] = []
        self.result = RunResult(7, "finished", SUMMARY)

    def __call__(self, exp: Experiment, store: Any, reporter: Any) -> RunResult:
        self.experiments.append(exp)
        return self.result


@pytest.fixture
def trained(monkeypatch: pytest.MonkeyPatch) -> Training:
    training = Training()
    monkeypatch.setattr(run_module, "run_experiment", training)
    return training


def test_json_is_the_results_document(cli: Callable[..., CliResult], trained: Training) -> None:
    result = cli("run", EXP, "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc == RunResult(7, "finished", SUMMARY).to_dict()
    assert (doc["run_id"], doc["status"], doc["test_accuracy"]) == (7, "finished", 0.93)


def test_the_table_shows_the_summary(cli: Callable[..., CliResult], trained: Training) -> None:
    result = cli("run", EXP)
    assert result.code == 0, result.err
    rows = {line.split("│")[0].strip(): line.split("│")[-1].strip()
            for line in result.out.splitlines() if "│" in line}  # fmt: skip
    assert rows["run"] == "7" and rows["device"] == "cpu (1 threads)"
    assert rows["test accuracy"] == "0.93" and rows["throughput (samples/s)"] == "1234"


def test_flags_reach_the_experiment(cli: Callable[..., CliResult], trained: Training) -> None:
    result = cli("run", EXP, "--set", "train.lr=0.02", "--timing", "phases", "--profile", "--json")
    assert result.code == 0, result.err
    [exp] = trained.experiments
    assert exp.train.lr == 0.02 and exp.run.timing == "phases" and exp.run.profile.enabled


def test_a_failed_run_says_so_and_exits_1(cli: Callable[..., CliResult], trained: Training) -> None:
    trained.result = RunResult(8, "failed", error="loss became nan at step 3 (epoch 1)")
    result = cli("run", EXP)
    assert result.code == 1
    assert "run 8 failed: loss became nan at step 3 (epoch 1)" in result.err
    as_json = cli("run", EXP, "--json")
    assert as_json.code == 1
    assert json.loads(as_json.out) == {"run_id": 8, "status": "failed",
                                       "error": "loss became nan at step 3 (epoch 1)"}  # fmt: skip


def test_config_show_prints_the_resolved_toml(cli: Callable[..., CliResult]) -> None:
    result = cli("config", "show", EXP, "--set", "train.lr=0.5")
    assert result.code == 0, result.err
    shown = tomllib.loads(result.out)
    assert shown["train"]["lr"] == 0.5 and shown["model"]["name"] == "smallcnn"
    defaults = tomllib.loads(cli("config", "show").out)  # no file: the defaults
    assert defaults["train"]["lr"] == Experiment().train.lr


def test_config_keys_lists_every_key_with_its_help(cli: Callable[..., CliResult]) -> None:
    result = cli("config", "keys")
    assert result.code == 0, result.err
    rows = {line.split("│")[0].strip(): line.split("│")[1].strip()
            for line in result.out.splitlines() if "│" in line}  # fmt: skip
    assert rows["model.name"].startswith("Registry or torchvision model name")
    assert {"train.lr", "run.timing", "serve.port", "distill.top_k"} <= rows.keys()


@pytest.mark.parametrize("passed", [True, False])
def test_demo_json_and_its_pass_mark(
    cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch, passed: bool
) -> None:
    doc = {"study_id": 1, "target": 0.95, "passed": passed,
           "runs": [{"model": "smallcnn", "run_id": 1, "status": "finished",
                     "test_accuracy": 0.97 if passed else 0.9}]}  # fmt: skip
    monkeypatch.setattr(demo_module, "run_demo", lambda store, reporter: doc)
    result = cli("demo", "--json")
    assert json.loads(result.out) == doc
    if passed:
        assert result.code == 0, result.err
    else:
        assert result.code == 1
        assert "a demo model finished below 95% test accuracy" in result.err


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ([], "give an experiment file or --resume RUN_ID (not both)"),
        ([EXP, "--resume", "1"], "give an experiment file or --resume RUN_ID (not both)"),
        (["--resume", "1", "--set", "train.lr=1"], "--resume continues a run with its stored "
         "config; drop --set/--timing/--profile"),
        (["--resume", "1", "--timing", "phases"], "drop --set/--timing/--profile"),
        (["--resume", "1", "--profile"], "drop --set/--timing/--profile"),
        (["--resume", "99"], "no run 99: run store "),
        ([EXP, "--timing", "slow"], "run.timing: Input should be 'off', 'coarse' or 'phases'"),
        (["missing.toml"], "missing.toml: no such experiment file"),
        ([EXP, "--set", "train.lr"], "--set 'train.lr': expected KEY=VALUE"),
        ([EXP, "--resume", "x"], "Invalid value for '--resume'"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    cli: Callable[..., CliResult], args: list[str], text: str
) -> None:
    one_line_error(cli("run", *args), text)


def test_config_show_refuses_an_unknown_key_in_one_line(cli: Callable[..., CliResult]) -> None:
    one_line_error(cli("config", "show", EXP, "--set", "nope.x=1"), "unknown key 'nope'")
