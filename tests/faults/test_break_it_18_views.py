"""Break-it round 18, part K: one run, many views. A tester read one run's figures in every
view (`runs show`, its --json, `runs plot`, the report) and found them disagreeing:

- F1: `runs show` called a tracked run's steps epochs (a "per epoch" table of epoch 100, 200,
  300) and --json dropped the steps, where `runs plot --x epoch` says the run records steps.
- F2: `runs show` left out a detect or scale run's own results (mAP, speedup, efficiency...),
  and printed a config value of None as "None" where every other view prints "-".
- F3: the report's "train time (s)" column held "52 ms" and "1.7 s"; its index said
  "6 warning" where doctor says "6 warnings".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dlperf
from dlperf.doctor import Finding
from dlperf.report.site import build_report, pages
from dlperf.store import RunStore
from dlperf.store.query import summary_rows
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# An experiment's config: the four sections every `dlperf run` stores.
EXPERIMENT = {"model": {"name": "smallcnn"}, "data": {"name": "digits"}, "train": {}, "run": {}}


def _lines(out: str) -> list[list[str]]:
    """Each printed line's words, the table's rules left out."""
    return [[w for w in line.split() if w not in "│┃"] for line in out.splitlines()]


# --- F1: a tracked run records steps ------------------------------------------------------------


def test_runs_show_gives_a_tracked_runs_steps_as_steps_and_json_keeps_them(
    db: str, cli: Cli
) -> None:
    with dlperf.track("t", store=db) as r:
        for s in (100, 200, 300):
            r.log(s, **{"val/acc1": s / 1000})
    shown = cli("runs", "show", "1")
    assert shown.code == 0, shown.err
    assert "per step" in shown.out and "per epoch" not in shown.out
    # headed by the key as logged (round 23: a tracked run's table has every key it logged)
    header = next(line for line in _lines(shown.out) if "val/acc1" in line)
    assert header[0] == "step"
    assert ["100", "0.1"] in _lines(shown.out) and ["300", "0.3"] in _lines(shown.out)
    document = json.loads(cli("runs", "show", "1", "--json").out)
    assert document["epochs"] == {"val/acc1": [0.1, 0.2, 0.3]}  # as before
    assert document["steps"] == {"val/acc1": [100, 200, 300]}


def test_runs_show_still_gives_a_training_runs_epochs(store: RunStore, cli: Cli) -> None:
    run = store.create_run("trained", "run", EXPERIMENT)
    store.log_metrics(run, [("val/acc1", 1, 0.5), ("val/acc1", 2, 0.7)])
    store.finish_run(run, "finished", summary={"test_accuracy": 0.7, "epochs": 2})
    shown = cli("runs", "show", str(run))
    assert "per epoch" in shown.out and "per step" not in shown.out
    assert next(line for line in _lines(shown.out) if "val" in line)[0] == "epoch"
    document = json.loads(cli("runs", "show", str(run), "--json").out)
    assert document["epochs"] == {"val/acc1": [0.5, 0.7]} and "steps" not in document


# --- F2: every kind's own results ---------------------------------------------------------------

DETECT = {
    "ap_before": {"circle": 0.125, "square": 0.25},
    "ap_after": {"circle": 0.5, "square": 0.75},
    "map_before": 0.1875,
    "map_after": 0.625,
    "ap_method": "11point",
    "steps": 3,
    "train_s": 12.5,
    "images_per_s": 45.5,
    "final_loss": 1.25,
    "weights": "/tmp/k.pt",
}
SCALE = {
    "workers": 2,
    "throughput": 1562.0,
    "speedup": 1.75,
    "efficiency": 0.875,
    "epoch_time_s": 0.052,
    "cost_per_epoch": 0.0042,
    "step_time_s": 0.0125,
    "comm_exposed_s": 0.0025,
    "cpu_wait_share": 0.1,
    "reliability_note": "busy host",
    "device": "cpu",
    "phases": {"data": 0.001},
}


def test_summary_rows_of_another_kind_show_its_own_keys_with_units() -> None:
    rows = dict(summary_rows(SCALE, own=True))
    assert list(rows)[:3] == ["throughput", "cpu_wait_share", "reliability_note"]  # runs' order
    assert rows["speedup"] == 1.75 and rows["efficiency"] == "87.5%"
    assert rows["epoch_time_s"] == "52 ms" and rows["step_time_s"] == "12.5 ms"
    assert rows["comm_exposed_s"] == "2.5 ms" and rows["cost_per_epoch"] == 0.0042
    assert "device" not in rows and "phases.data" not in rows  # shown in their own places
    detect = dict(summary_rows(DETECT, own=True))
    assert detect["map_after"] == 0.625 and detect["ap_after.square"] == 0.75
    assert detect["train_s"] == "12.5 s" and detect["images_per_s"] == "45.5 images/s"


def test_runs_show_prints_a_detect_runs_results_and_none_as_a_dash(
    store: RunStore, cli: Cli
) -> None:
    config = {"data": "/tmp/kshapes", "size": 96, "weights": None}
    run = store.create_run("detect-finetune", "detect", config)
    store.finish_run(run, "finished", summary=DETECT)
    out = cli("runs", "show", str(run)).out
    lines = _lines(out)
    for key in ("map_before", "map_after", "ap_before.circle", "final_loss"):
        assert key in out
    assert ["train_s", "12.5", "s"] in lines and ["images_per_s", "45.5", "images/s"] in lines
    assert ["weights", "-"] in lines and "None" not in out


def test_runs_show_prints_a_scale_points_results(store: RunStore, cli: Cli) -> None:
    run = store.create_run("scale-2", "scale", {"workers": 2})
    store.finish_run(run, "finished", summary=SCALE)
    out = cli("runs", "show", str(run)).out
    for key in ("speedup", "efficiency", "epoch_time_s", "cost_per_epoch", "step_time_s",
                "comm_exposed_s"):  # fmt: skip
        assert key in out, key
    assert ["efficiency", "87.5%"] in _lines(out)


# --- F3: the report's columns and counts --------------------------------------------------------


def test_the_reports_train_time_column_names_no_unit_its_cells_scale(
    store: RunStore, tmp_path: Path
) -> None:
    for seconds in (0.052, 1.7):
        run = store.create_run("r", "run", EXPERIMENT)
        store.finish_run(run, "finished", summary={"train_time_s": seconds, "throughput": 1562.0})
    build_report(store, tmp_path / "site", jobs=1)  # the index, not the drawing pool, is the point
    index = (tmp_path / "site" / "index.html").read_text()
    assert "<th>train time</th>" in index and "train time (s)" not in index
    assert "52 ms" in index and "1.7 s" in index
    assert "<th>throughput (samples/s)</th>" in index  # rates: the unit in the header
    assert re.search(r">1,562<", index)


def _finding(severity: str) -> Finding:
    return Finding(1, "diverged", severity, "loss is nan", "lower train.lr")


def test_the_reports_counts_say_warnings_as_doctor_does() -> None:
    found: list[Any] = [_finding("warning")] * 6 + [_finding("error"), _finding("info")] * 2
    assert pages.counts(found) == (
        '<span class="error">2 errors</span>, <span class="warning">6 warnings</span>, '
        '<span class="info">2 info</span>'
    )
    assert pages.counts([_finding("warning")]) == '<span class="warning">1 warning</span>'
