"""Issue 41, ninth break-it round, exports and reading back: a trace whose times are not
finite, negative or overflowing; a series `track` takes whose span overflows a figure's
axis; an MLflow export of names MLflow refuses; a TensorBoard run directory taken by a file;
and `track`'s rows held in memory without a time bound; each seen failing before its fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dlperf
from dlperf.store import RunStore
from tests.conftest import CliResult


def _one_line(result: CliResult) -> None:
    assert result.code == 2, (result.code, result.err)
    assert "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err


# --- traces ---------------------------------------------------------------------------------


def _x(name: str, cat: str, ts: Any, dur: Any) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _trace(step_ts: Any = 0, step_dur: Any = 100, op_dur: Any = 30) -> list[dict[str, Any]]:
    return [
        _x("ProfilerStep#3", "user_annotation", step_ts, step_dur),
        _x("dlperf::forward", "user_annotation", step_ts, 40),
        _x("aten::mm", "cpu_op", 0, op_dur),
    ]


def _traced_run(store: RunStore, tmp_path: Path, events: list[dict[str, Any]], raw: str) -> int:
    """A tracked run whose trace artifact is a file holding `events` (json.dumps writes NaN
    and Infinity as their literals, which Python's json reads back)."""
    with dlperf.track("traced", store=dlperf.Store(store)) as run:
        run.log(1, loss=1.0)
    path = tmp_path / f"{raw}.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    store.add_artifact(run.id, "trace", path)
    return run.id


BAD_TRACES = {
    "huge-ts": (_trace(step_ts=1e300), "ProfilerStep#3"),
    "negative-dur": (_trace(op_dur=-5), "aten::mm"),
    "nan-dur": (_trace(op_dur=float("nan")), "aten::mm"),
    "nan-text-dur": (_trace(op_dur="nan"), "aten::mm"),
    "infinite-ts": (_trace(step_ts=float("inf")), "ProfilerStep#3"),
    "overflowing-span": (_trace(step_dur=1.7e308, step_ts=1.7e308), "ProfilerStep#3"),
}


@pytest.mark.parametrize("case", list(BAD_TRACES))
def test_a_trace_of_times_that_are_no_times_is_one_line_and_costs_only_its_section(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path, case: str
) -> None:
    events, bad = BAD_TRACES[case]
    run_id = _traced_run(store, tmp_path, events, case)
    shown = cli("runs", "trace", str(run_id))
    _one_line(shown)
    assert f"{case}.pt.trace.json" in shown.err and bad in shown.err, shown.err
    assert shown.out == ""
    site = tmp_path / "site"
    report = cli("report", str(run_id), "--out", str(site))
    assert report.code == 0, report.err
    page = (site / f"run-{run_id}.html").read_text()
    assert "<h2>Profiler trace</h2>" in page and "cannot read the trace" in page
    section = page.split("<h2>Profiler trace</h2>")[1]
    assert "ms per step" not in section and "nan%" not in section


def test_steps_that_last_no_time_are_one_line(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    run_id = _traced_run(store, tmp_path, _trace(step_dur=0), "zero")
    shown = cli("runs", "trace", str(run_id))
    _one_line(shown)
    assert "last no time" in shown.err


# --- figures --------------------------------------------------------------------------------


def test_a_series_whose_span_overflows_is_drawn_by_runs_plot_and_report(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    with dlperf.track("m", store=dlperf.Store(store)) as run:
        run.log(1, loss=1e308)
        run.log(2, loss=-1e308)
        run.log(3, loss=1.0)
    plotted = cli("runs", "plot", str(run.id), "--out", str(tmp_path / "p.png"), "--json")
    assert plotted.code == 0, plotted.err
    assert (tmp_path / "p.png").stat().st_size > 0
    done = json.loads(plotted.out)
    assert done["runs"][0]["points"] == {"train/loss": 1}
    assert done["warnings"] == [
        f"run {run.id}: 2 train/loss points beyond ±1e+307 left out: a figure's axis cannot "
        "span them"
    ]
    report = cli("report", str(run.id), "--out", str(tmp_path / "site"))
    assert report.code == 0, report.err
    page = (tmp_path / "site" / f"run-{run.id}.html").read_text()
    assert "2 points beyond ±1e+307 left out" in page


# --- MLflow ---------------------------------------------------------------------------------


def _three_runs(store: RunStore, bad_metric: str = "loss", bad_param: str = "lr") -> list[int]:
    """'good', 'bad' and 'later', the middle one with the given metric and config keys."""
    ids = []
    for name, key, param in (("good", "loss", "lr"), ("bad", bad_metric, bad_param),
                             ("later", "loss", "lr")):  # fmt: skip
        with dlperf.track(name, config={param: 0.1}, store=dlperf.Store(store)) as run:
            run.log(1, **{key: 0.5})
        ids.append(run.id)
    return ids


@pytest.mark.parametrize(
    ("metric", "param", "said"),
    [
        ("acc@top1", "lr", "metric 'train/acc@top1'"),
        ("loss", "lr@warm", "param 'lr@warm'"),
        ("val//acc", "lr", "metric 'val//acc'"),
    ],
)
def test_names_mlflow_refuses_are_refused_up_front_and_nothing_is_written(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path, metric: str, param: str,
    said: str
) -> None:  # fmt: skip
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")
    ids = _three_runs(store, metric, param)
    target = tmp_path / "ml.db"
    r = cli("runs", "export", *map(str, ids), "--to", "mlflow", "--uri", f"sqlite:///{target}")
    _one_line(r)
    assert f"run {ids[1]} ('bad'): {said}" in r.err, r.err
    assert "nothing was exported" in r.err and "leave run" in r.err, r.err
    assert not target.exists()  # not even the experiment


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_a_run_that_fails_mid_export_ends_failed_in_mlflow(
    cli: Callable[..., CliResult], store: RunStore, mlflow_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    ids = _three_runs(store)

    def refuse(self: Any, run_id: str, *args: Any, **kwargs: Any) -> None:
        if self.get_run(run_id).info.run_name == "bad":
            raise MlflowException("the artifact store is full")

    monkeypatch.setattr(MlflowClient, "log_dict", refuse)
    uri = mlflow_uri  # a copy of a made store (conftest): the failed export is the point
    r = cli("runs", "export", *map(str, ids), "--to", "mlflow", "--uri", uri)
    _one_line(r)
    assert "the artifact store is full" in r.err, r.err
    told = f"(exporting run {ids[1]}, left FAILED in MLflow; runs exported before it: {ids[0]})"
    assert told in r.err, r.err
    client = MlflowClient(tracking_uri=uri)
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    got = {m.info.run_name: m.info.status for m in client.search_runs([experiment.experiment_id])}
    assert got == {"good": "FINISHED", "bad": "FAILED"}


# --- TensorBoard ----------------------------------------------------------------------------


def test_a_run_directory_taken_by_a_file_is_one_line_with_the_fix(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    ids = _three_runs(store)
    out = tmp_path / "tb"
    first = cli(
        "runs", "export", *map(str, ids), "--to", "tensorboard", "--out", str(out), "--json"
    )
    assert first.code == 0, first.err
    dirs = {int(k): Path(v["dir"]) for k, v in json.loads(first.out)["runs"].items()}
    taken, untouched = dirs[ids[1]], dirs[ids[0]]
    before = [f.name for f in untouched.iterdir()]
    for event_file in taken.iterdir():
        event_file.unlink()
    taken.rmdir()
    taken.touch()
    again = cli("runs", "export", *map(str, ids), "--to", "tensorboard", "--out", str(out))
    _one_line(again)
    assert f"{taken} is a file" in again.err, again.err
    assert "move it" in again.err and "another --out" in again.err, again.err
    # Checked before any run is written: the first run's event file is the first export's.
    assert [f.name for f in untouched.iterdir()] == before


# --- track's rows held in memory ------------------------------------------------------------

# Logs 10 rows 0.3 s apart, noting the monotonic clock just before and just after each
# log() call, then writes them to the marker (renamed into place: read whole or not at all)
# and blocks until it is killed.
_LOGGING_CHILD = """
import json, os, sys, time
import dlperf
db, marker = sys.argv[1], sys.argv[2]
times = []
with dlperf.track("slow-loop", store=db) as run:
    for step in range(1, 11):
        before = time.monotonic()
        run.log(step, loss=1.0 / step)
        times.append((step, before, time.monotonic()))
        time.sleep(0.3)
    with open(marker + ".tmp", "w") as f:
        json.dump(times, f)
    os.rename(marker + ".tmp", marker)
    while True:
        time.sleep(60)
"""


@pytest.mark.faults  # over 10 s under load: make test-faults
def test_a_sigkilled_track_loop_keeps_the_rows_logged_a_second_before(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from dlperf.api import FLUSH_SECONDS

    db, marker = tmp_path / "t.db", tmp_path / "logged.json"
    child = subprocess.Popen([sys.executable, "-c", _LOGGING_CHILD, str(db), str(marker)])
    try:
        deadline = time.monotonic() + 120  # generous: a loaded machine, torch's import
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), f"the child wrote no marker (exit {child.poll()})"
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
    times = json.loads(marker.read_text())
    last_call = times[-1][1]
    # A row whose log() returned at least FLUSH_SECONDS before the last log() began was
    # written by then: the last call, or one before it, found the rows that old.
    due = [step for step, _, after in times if after <= last_call - FLUSH_SECONDS]
    assert due, times  # 10 rows 0.3 s apart: several
    stored = dlperf.Store(str(db))
    (run,) = stored.runs()
    assert run.status == "lost"
    kept = "train/loss" in stored.metric_keys(run.id)
    steps = [step for step, _ in stored.metrics(run.id, "loss")] if kept else []
    assert steps[: len(due)] == due, (steps, times)
