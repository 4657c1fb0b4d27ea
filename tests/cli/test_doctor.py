"""dlperf.cli.doctor: `dlperf doctor` over runs stored by hand, in-process."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.store import RunStore
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult


def _run(store: RunStore, name: str, **summary: float) -> int:
    run_id = store.create_run(name, "train", {"train": {"lr": 0.5}}, system={"device": "cpu"})
    store.finish_run(run_id, summary=dict(summary))
    return run_id


def test_help_ends_with_an_example() -> None:
    done = CliRunner().invoke(app, ["doctor", "--help"])
    assert done.exit_code == 0 and "Example: dlperf doctor --last 5" in done.output


def test_a_clean_run_says_so_and_exits_0(cli: Callable[..., CliResult], store: RunStore) -> None:
    run_id = _run(store, "clean", test_accuracy=0.97)
    result = cli("doctor")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        f"run {run_id} clean (train, finished): no findings",
        "1 run(s) examined: 0 errors, 0 warnings, 0 info",
    ]


def test_a_diverged_run_is_an_error_finding_with_its_fix_and_exit_1(
    cli: Callable[..., CliResult], store: RunStore
) -> None:
    clean = _run(store, "clean")
    bad = _run(store, "bad")
    store.log_metrics(bad, [("train/loss", 0, 2.3), ("train/loss", 1, math.inf)])
    result = cli("doctor", str(clean), str(bad), "--json")
    assert result.code == 1
    assert result.err.strip() == "check failed: 1 finding(s) of severity error"
    document = json.loads(result.out)
    assert document["runs"] == [clean, bad]
    [finding] = document["findings"]
    assert finding["run_id"] == bad and finding["severity"] == "error"
    assert finding["rule"] == "diverged" and "train/loss is inf at step 1" in finding["evidence"]
    assert "lower train.lr (now 0.5)" in finding["fix"]


def test_the_table_groups_findings_under_their_run(
    cli: Callable[..., CliResult], store: RunStore
) -> None:
    bad = _run(store, "bad")
    store.log_metrics(bad, [("train/loss", 3, math.nan)])
    lines = cli("doctor", str(bad)).out.splitlines()
    assert lines[0] == f"run {bad} bad (train, finished)"
    assert lines[1].split()[:2] == ["error", "diverged:"]
    assert lines[2].strip().startswith("fix: try a lower train.lr")
    assert lines[-1] == "1 run(s) examined: 1 error, 0 warnings, 0 info"


def test_bad_input_is_one_line_and_exit_2(cli: Callable[..., CliResult], store: RunStore) -> None:
    one_line_error(cli("doctor"), "the run store holds no runs")
    _run(store, "one")
    one_line_error(cli("doctor", "9"), "no run 9 in the store")
    one_line_error(cli("doctor", "--last", "0"), "--last must be at least 1, got 0")
    one_line_error(cli("doctor", "--study", "4"), "no study 4 in the store")
    one_line_error(cli("doctor", "x"), "Invalid value for 'RUN_ID'")
