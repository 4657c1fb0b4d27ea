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
from collections.abc import Callable

import dlperf
from dlperf.store import RunStore
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
    header = next(line for line in _lines(shown.out) if "val" in line and "acc" in line)
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
