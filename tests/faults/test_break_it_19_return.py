"""Break-it round 19, part L3: a returning user's smaller surprises.

- C: a model file edited after its run trained (ReLU -> Tanh, the parameters' shapes kept)
  exported as a network other than the one trained, silently; the run now records its model
  file's sha256 (in `system`, the config hash unchanged) and export warns when it differs.
- E: `infer bench MODEL.onnx` timed whatever run of the current store had the metadata's run
  id, another model included; a run of another model is now warned about and not raced.
- F: `detect finetune --out shapes.pt` recorded the artifact as typed (relative): it is now
  recorded absolute, as every other artifact is.
- H: `distill` again with its own pseudo-label cache truncated told the user to write it
  with numpy.savez; it now warns and selects again.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import numpy as np

from dlperf.deploy import meta as meta_io
from dlperf.detect import voc
from dlperf.experiment.run import model_file_changed
from dlperf.store import RunStore
from tests.conftest import CliResult, TrainedRun, write_distill_exp

Cli = Callable[..., CliResult]

BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
checkpoint = true
"""

NET = """
from torch import nn

def net(num_classes=10, in_channels=1):
    return nn.Sequential(
        nn.Conv2d(in_channels, 4, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, num_classes),
    )
"""


# --- C: a model file edited after its run trained -----------------------------------------------


def _train_file_model(cli: Cli, tmp_path: Path) -> tuple[int, Path]:
    (tmp_path / "base.toml").write_text(BASE)
    model = tmp_path / "mymodel.py"
    model.write_text(NET)
    r = cli("run", "base.toml", "--set", "model.name=mymodel.py:net", "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)["run_id"], model


def test_export_warns_when_the_model_file_changed_since_the_run_trained(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before: exit 0, parity yes, nothing said: the ONNX held Tanh where the run had ReLU.
    Then the same run as one stored without the digest (before this round): no warning."""
    run_id, model = _train_file_model(cli, tmp_path)
    record = store.get_run(run_id)
    assert record.system is not None
    assert record.system["model_file_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert "sha256" not in json.dumps(record.config)  # the config, and its hash, as before
    # Unchanged, nothing to say: asked of what export asks (its "warnings" come from it), not
    # through a first ONNX export; the two exports below are export's own.
    assert model_file_changed(record) is None

    model.write_text(NET.replace("nn.ReLU()", "nn.Tanh()"))
    r = cli("export", str(run_id), "--out", "x.onnx", "--json")
    assert r.code == 0, r.err
    said = (
        f"model file {model} changed since run {run_id} was trained (its parameters still "
        "fit): exported as the file is now"
    )
    assert f"warning: {said} " in " ".join(r.err.split())  # the console may wrap a long line
    doc = json.loads(r.out)
    assert doc["warnings"] == [said] and doc["parity"]

    # a run stored without a digest exports without a warning (its file changed as above)
    with closing(sqlite3.connect(tmp_path / "dlperf.db")) as conn, conn:
        (system,) = conn.execute("SELECT system FROM runs WHERE id = ?", (run_id,)).fetchone()
        older = {k: v for k, v in json.loads(system).items() if k != "model_file_sha256"}
        conn.execute("UPDATE runs SET system = ? WHERE id = ?", (json.dumps(older), run_id))
    r = cli("export", str(run_id), "--out", "y.onnx", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["warnings"] == [] and "changed" not in r.err


# --- E: infer bench against a store whose run of that id is another model ---------------------


def test_bench_does_not_race_another_models_run_of_the_same_id(
    cli: Cli, tmp_path: Path, trained_digits: TrainedRun
) -> None:
    """The ONNX names run 1 of model 'resnet20' (another store's); this store's run 1 is a
    smallcnn. Before: exit 0, its 'torch eager' rows timed the smallcnn. The registry's
    resnet20 it falls back to shares no parameter name with the file (a smallcnn's export), so
    since round 38 it is not raced either: only ONNX Runtime is timed, with a warning."""
    _, run_id, _ = trained_digits.copy_to(tmp_path)
    r = cli("export", str(run_id), "--out", "m1.onnx")
    assert r.code == 0, r.err
    meta = meta_io.load(tmp_path / "m1.onnx")
    meta.model = "resnet20"
    meta_io.save(tmp_path / "m1.onnx", meta)
    r = cli("infer", "bench", "m1.onnx", "--batch", "1", "--repeats", "1", "--json")
    assert r.code == 0, r.err
    assert (
        f"warning: run {run_id} of this store is model 'smallcnn', not the 'resnet20' "
        "m1.onnx was exported from; racing registry model 'resnet20' with random weights"
    ) in " ".join(r.err.split())  # the console may wrap a long line
    assert "cannot tell that 'resnet20' built with no model.kwargs is the network of" in " ".join(
        r.err.split()
    )
    assert {row["contender"] for row in json.loads(r.out)["rows"]} == {"onnxruntime"}


# --- F: detect finetune --out relative ----------------------------------------------------------


def test_detect_finetune_records_its_weights_absolute(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    """Before: the artifact and summary said 'shapes.pt', found from another directory."""
    voc.make_shapes(tmp_path / "shapes", images=6, size=96)
    r = cli(
        "detect", "finetune", "shapes", "--epochs", "1", "--batch", "2", "--threads", "1",
        "--size", "96", "--out", "shapes.pt", "--json",
    )  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    where = str(tmp_path / "shapes.pt")
    assert doc["weights"] == where
    record = store.get_run(doc["run_id"])
    assert record.summary["weights"] == where
    assert [a["path"] for a in store.artifacts(doc["run_id"])] == [where]


# --- H: distill with its own pseudo-label file truncated ----------------------------------------


def test_distill_selects_again_when_its_pseudo_label_file_is_unreadable(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: 'not a readable .npz file ... (write it again with numpy.savez(...))', exit 2."""
    path = write_distill_exp(tmp_path)
    args = ("distill", str(path), "--unlabeled", "digits:holdout=0.5", "--top-k", "3", "--json")
    first = cli(*args)
    assert first.code == 0, first.err
    (pseudo,) = (tmp_path / "dlperf_runs").rglob("pseudo-*.npz")
    whole = pseudo.read_bytes()
    pseudo.write_bytes(whole[:50])
    again = cli(*args)
    assert again.code == 0, again.err
    said = " ".join(again.err.split())  # the console wraps a long line
    assert (
        f"warning: select K=3: {pseudo}: not a readable .npz file (File is not a zip file); "
        "selecting again teacher run 1 scoring"
    ) in said
    assert "numpy.savez" not in again.err and "select K=3: run 2 finished before" not in again.err
    assert pseudo.read_bytes() == whole  # the same selection, written whole again
    with np.load(pseudo) as f:
        assert len(f["labels"]) == json.loads(again.out)["students"][0]["selected"]
