"""Break-it round 32, an image folder's progress beyond `run` and `data` (fixer R).

F1 (reviewer 4). load_data took a reporter (C5), but only `run`, `data describe` and `data
    samples` passed one: `scale` and `distill` (as_run), a sweep's checks before its first
    point (first_refused), `export N` and `bench` of a run (from_run) and distill's pool read
    a 10^5-file image folder in silence for minutes. Each passes the command's reporter now.
"""

from __future__ import annotations

from pathlib import Path

from dlperf.config import Experiment
from dlperf.deploy.export import from_run
from dlperf.engine.build import as_run, first_refused
from dlperf.experiment.run import run_experiment
from dlperf.store import RunStore
from tests.faults.test_break_it_32_decode import Recorded, folder


def experiment(root: Path, **run: object) -> Experiment:
    return Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "imagefolder", "root": str(root), "image_size": 8},
            "train": {"epochs": 1, "batch_size": 2},
            "run": {"device": "cpu", **run},
        }
    )


def decoded(heard: Recorded) -> list[object]:
    return [e[1] for e in heard.events if e[0] == "task" and str(e[1]).startswith("decoding")]


def test_scale_and_distill_hear_their_data_load(tmp_path: Path, store: RunStore) -> None:
    """Before: as_run (scale's Study, distill's plan) loaded the data with no reporter."""
    root = folder(tmp_path / "f", train=2, val=1)
    heard = Recorded()
    as_run(experiment(root), store, heard)
    assert decoded(heard) == [
        f"decoding 4 images of {root}/train",
        f"decoding 2 images of {root}/val",
    ]


def test_a_sweeps_checks_hear_their_data_load(tmp_path: Path, store: RunStore) -> None:
    """Before: first_refused, a sweep's checks before its first point, loaded in silence."""
    root = folder(tmp_path / "f", train=2, val=1)
    heard = Recorded()
    exps = [experiment(root), experiment(root, name="again")]  # one load for both
    assert first_refused(exps, store, heard) is None
    assert decoded(heard) == [
        f"decoding 4 images of {root}/train",
        f"decoding 2 images of {root}/val",
    ]


def test_export_of_a_run_hears_its_data_load(tmp_path: Path, store: RunStore) -> None:
    """Before: from_run (`export N`, `bench` of a run) loaded the run's data in silence."""
    root = folder(tmp_path / "f", train=2, val=1)
    ran = run_experiment(experiment(root, checkpoint=True), store, Recorded())
    assert ran.status == "finished"
    heard = Recorded()
    from_run(store, ran.run_id, heard)
    assert f"decoding 4 images of {root}/train" in decoded(heard)
