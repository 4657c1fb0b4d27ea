"""dlperf.cli.report: `dlperf report` over a store of runs made by hand, and its checks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.cli.report import _removed
from dlperf.store import RunStore
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult


def test_help_ends_with_an_example() -> None:
    done = CliRunner().invoke(app, ["report", "--help"])
    assert done.exit_code == 0 and "Example: dlperf report --last 10 --out report" in done.output


def _runs(store: RunStore, n: int) -> list[int]:
    ids = []
    for i in range(n):
        run_id = store.create_run(f"r{i}", "train", {"model": {"name": "smallcnn"}})
        store.finish_run(run_id, summary={"test_accuracy": 0.5})
        ids.append(run_id)
    return ids


def test_json_names_the_pages_written(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    first, second = _runs(store, 2)
    result = cli("report", "--last", "1", "--out", "site", "--json")
    assert result.code == 0, result.err
    done = json.loads(result.out)
    assert done["runs"] == [second] and done["studies"] == []
    assert done["pages"] == ["index.html", f"run-{second}.html"]
    assert all((tmp_path / "site" / page).is_file() for page in done["pages"])
    assert not (tmp_path / "site" / f"run-{first}.html").exists()


def test_the_line_counts_and_a_second_report_says_what_it_removed(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    # One run a report: more would draw their pages in worker processes.
    first, second = _runs(store, 2)
    result = cli("report", str(first), "--out", "site")
    assert result.code == 0, result.err
    assert result.out.strip() == "1 run(s), 0 study(ies): 2 pages in site"
    assert result.err.strip().splitlines()[-1] == "saved site/index.html"
    again = cli("report", str(second), "--out", "site")
    assert again.out.strip() == (
        "1 run(s), 0 study(ies): 2 pages in site; removed 1 page of an earlier report"
    )
    assert not (tmp_path / "site" / f"run-{first}.html").exists()


def test_removed_counts_pages_in_the_singular_and_plural() -> None:
    assert _removed([]) == ""
    assert _removed(["run-1.html"]) == "; removed 1 page of an earlier report"
    assert _removed(["a", "b"]) == "; removed 2 pages of an earlier report"


def test_bad_input_is_one_line_and_exit_2(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    _runs(store, 1)
    (tmp_path / "file").write_text("x")
    one_line_error(cli("report", "--out", "file"), "--out file is a file, not a directory")
    one_line_error(cli("report", "--out", " "), "report writes its site into a directory")
    one_line_error(cli("report", "--out", "s", "--last", "0"), "--last must be at least 1, got 0")
    one_line_error(cli("report", "5", "--out", "s"), "no run 5")
    one_line_error(cli("report"), "Missing option '--out'")
