"""dlperf.cli.runs_trace: `dlperf runs trace`'s checks and outputs, on a trace written here."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.store import RunStore
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult


def test_help_ends_with_an_example() -> None:
    done = CliRunner().invoke(app, ["runs", "trace", "--help"])
    assert done.exit_code == 0 and "Example: dlperf run" in done.output
    assert "dlperf runs trace 1" in " ".join(done.output.split())


def _traced(store: RunStore, root: Path) -> int:
    """A finished run with a tiny Chrome trace: two steps, one op each."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100,
         "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 60, "pid": 1,
         "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 100, "dur": 100,
         "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 110, "dur": 20, "pid": 1,
         "tid": 1},
    ]  # fmt: skip
    path = root / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    run_id = store.create_run("traced", "train", {})
    store.add_artifact(run_id, "trace", path)
    store.finish_run(run_id, summary={})
    return run_id


def test_json_lists_the_top_operators_by_self_time(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    run_id = _traced(store, tmp_path)
    result = cli("runs", "trace", str(run_id), "--json", "--top", "1")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["run_id"] == run_id and len(document["traces"]) == 1
    assert "aten::mm" in json.dumps(document) and "aten::add" not in json.dumps(document)


def test_bad_input_is_one_line_and_exit_2(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    bare = store.create_run("bare", "train", {})
    one_line_error(cli("runs", "trace", str(bare)), f"run {bare} has no trace")
    traced = _traced(store, tmp_path)
    one_line_error(cli("runs", "trace", str(traced), "--top", "0"), "--top must be at least 1")
    one_line_error(
        cli("runs", "trace", str(traced), "--rank", "1"), f"--rank must be 0..0 for run {traced}"
    )
    one_line_error(cli("runs", "trace", "77"), "no run 77 in the store")
