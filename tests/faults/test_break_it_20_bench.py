"""Break-it round 20, part RE: `infer bench MODEL.onnx` rebuilding the PyTorch contender from
the metadata's run id in the current store (the id is of the store it was exported from).

- a: this store's run of that id is not a training run (a distill selection): it said "run 1
  of this store is model 'None'"; it now says what the run is, and races the registry model.
- b: this store's run of that id is the same model trained on other data (another input
  shape, or another number of classes): exit 2, "the PyTorch model takes (1, 8, 8), ... takes
  (3, 8, 8)"; it now warns and races the registry model at the ONNX file's input.
- c: the run's model file was edited since it trained: the edited network was raced without a
  word; it now warns as export does.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from tests.conftest import CliResult, TrainedRun

Cli = Callable[..., CliResult]

RACING = "racing registry model 'smallcnn' with random weights"


# --- a: the store's run of that id is not a training run ---------------------------------------


def test_bench_races_the_registry_model_when_the_runs_id_is_a_distill_selection(
    cli: Cli, tmp_path: Path, trained_digits: TrainedRun
) -> None:
    """Before: "warning: run 1 of this store is model 'None', not the 'smallcnn' ...", which
    says nothing of what the run is."""
    _, run_id, _ = trained_digits.copy_to(tmp_path)
    r = cli("export", str(run_id), "--out", "m1.onnx")
    assert r.code == 0, r.err
    with closing(sqlite3.connect(tmp_path / "dlperf.db")) as conn, conn:
        # this store's run of that id is distill's selection, as in a store distill made
        selection = json.dumps({"teacher": 7, "top_k": 3})
        update = "UPDATE runs SET kind = 'select', config = ? WHERE id = ?"
        conn.execute(update, (selection, run_id))
    r = cli("infer", "bench", "m1.onnx", "--batch", "1", "--repeats", "1", "--json")
    assert r.code == 0, r.err
    said = " ".join(r.err.split())  # the console may wrap a long line
    assert (
        f"warning: run {run_id} is a select run (distill's selection): it has no model to "
        f"race; {RACING}"
    ) in said
    assert "'None'" not in said
    assert {row["contender"] for row in json.loads(r.out)["rows"]} >= {"torch eager"}
