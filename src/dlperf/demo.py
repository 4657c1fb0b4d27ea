"""`dlperf demo`: a small but complete lab on bundled data, on a laptop CPU.

Trains the small CNN and CIFAR ResNet-20 on scikit-learn's digits to 95% accuracy,
with per-phase timing, and keeps both runs in the store.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from dlperf.config import load_experiment
from dlperf.experiment.run import run_experiment
from dlperf.progress import Reporter
from dlperf.store import RunStore

PRESETS = ("demo_smallcnn.toml", "demo_resnet20.toml")
TARGET = 0.95


def run_demo(store: RunStore, reporter: Reporter, out_dir: str | None = None) -> dict[str, Any]:
    study = store.create_study("demo", "demo")
    runs = []
    for preset in PRESETS:
        with resources.as_file(resources.files("dlperf.presets") / preset) as path:
            exp = load_experiment(path)
        if out_dir is not None:
            exp.run.out_dir = out_dir
        reporter.log(f"training {exp.model.name} on {exp.data.name}")
        result = run_experiment(exp, store, reporter, study_id=study)
        runs.append({"model": exp.model.name, **result.to_dict()})
    passed = all(r["status"] == "finished" and r["test_accuracy"] >= TARGET for r in runs)
    return {"study_id": study, "target": TARGET, "passed": passed, "runs": runs}
