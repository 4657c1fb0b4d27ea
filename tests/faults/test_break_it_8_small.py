"""Issue 41, eighth break-it round, half B: `serve bench` against a server whose 200 answer is
not a prediction, doctor on a NaN test accuracy, `report --out ''`, and a report rewritten
into the same directory over an earlier one; each seen failing before its fix."""

from __future__ import annotations

import http.server
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

import dlperf
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult, TrainedRun
from tests.faults.test_break_it_7_signals import on_loopback


class _OtherJson(http.server.BaseHTTPRequestHandler):
    """Answers every POST 200 with JSON, but not a prediction (B02's server)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"outputs": [1, 2, 3], "status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Nothing: the request log would go to the stderr the test reads."""


@pytest.fixture
def other_json() -> Iterator[str]:
    """A stock `http.server` on loopback answering 200 with JSON of another shape."""
    yield from on_loopback(_OtherJson)


def test_bench_against_a_200_that_is_no_prediction_is_one_line(
    cli: Callable[..., CliResult], other_json: str
) -> None:
    r = cli(
        "serve",
        "bench",
        other_json,
        "--concurrency",
        "1",
        "--duration",
        "0.5",
        "--max-requests",
        "1",
    )
    # before: "348.7 req/s, 0 errors", exit 0: every 200 counted as a served prediction
    one_line_error(r, f"{other_json}/predict answered 200: ")
    assert "does not look like a dlperf server" in r.err
    assert '"outputs": [1, 2, 3]' in r.err and r.out == ""


def _set_summary(db: Path, run_id: int, **values: object) -> None:
    """Change the stored summary of `run_id` as a hand edit would (Python's JSON writes NaN)."""
    with closing(sqlite3.connect(db)) as conn, conn:
        (summary,) = conn.execute("SELECT summary FROM runs WHERE id = ?", (run_id,)).fetchone()
        changed = {**json.loads(summary), **values}
        conn.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps(changed), run_id))


@pytest.mark.parametrize("value", [float("nan"), -float("inf")])
def test_doctor_does_not_call_a_test_accuracy_that_is_not_a_number_near_chance(
    value: float, cli: Callable[..., CliResult], trained_digits: TrainedRun, tmp_path: Path
) -> None:
    _, run_id, _ = trained_digits.copy_to(tmp_path)
    _set_summary(tmp_path / "dlperf.db", run_id, test_accuracy=value)
    r = cli("doctor", str(run_id), "--json")
    # before: "test accuracy nan is within 0.050 of chance", an error, exit 1
    rules = [f["rule"] for f in json.loads(r.out)["findings"]]
    assert "chance-accuracy" not in rules, r.out
    assert "test accuracy nan" not in r.out and "test accuracy -inf" not in r.out


def test_report_refuses_an_empty_out(
    cli: Callable[..., CliResult], trained_digits: TrainedRun, tmp_path: Path
) -> None:
    trained_digits.copy_to(tmp_path)  # the cli fixture runs in tmp_path
    r = cli("report", "--last", "1", "--out", "")
    # before: "1 run(s), 0 study(ies): 2 pages in .", exit 0: the site went into the cwd
    one_line_error(r, "report writes its site into a directory, not ''")
    assert not (tmp_path / "index.html").exists()
    assert not list(tmp_path.glob("run-*.html"))


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_a_report_rewritten_into_its_directory_removes_the_pages_it_no_longer_has(
    cli: Callable[..., CliResult], db: str
) -> None:
    kept, gone = (dlperf.track(name, store=db) for name in ("kept", "gone"))
    with kept as run:
        kept_id = run.id
    with gone as run:
        gone_id = run.id
    site = Path("site")
    assert cli("report", "--last", "2", "--out", str(site)).code == 0
    assert (site / f"run-{gone_id}.html").is_file()
    # The user's own files in the directory, even one named like a page, are not the report's.
    (site / "notes.html").write_text("mine")
    (site / "run-notes.html").write_text("mine")
    (site / "run-9.html").mkdir()
    assert cli("runs", "delete", str(gone_id), "--yes").code == 0

    r = cli("report", "--last", "5", "--out", str(site))
    # before: run-<gone>.html stayed beside the new index, which no longer linked to it
    assert r.code == 0, r.err
    assert r.out.splitlines()[0] == (
        "1 run(s), 0 study(ies): 2 pages in site; removed 1 page of an earlier report"
    )
    assert sorted(p.name for p in site.iterdir()) == sorted(
        ["index.html", f"run-{kept_id}.html", "notes.html", "run-notes.html", "run-9.html"]
    )
    again = cli("report", "--last", "5", "--out", str(site))
    assert again.out.splitlines()[0] == "1 run(s), 0 study(ies): 2 pages in site"
