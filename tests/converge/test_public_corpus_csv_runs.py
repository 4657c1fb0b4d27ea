"""make_public_curves.csv_columns on logs that hold several runs, or no epoch column.

Several trainings logged into one CSV (a `model` column) and a training rerun and appended
to the same file must not merge into one curve with epochs counted twice.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "make_public_curves.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_public_curves", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_run_column_splits_runs_and_a_rerun_becomes_a_run_of_its_own(script: ModuleType) -> None:
    text = "model,epoch,val_acc\na,1,50\na,2,60\nb,1,40\nb,2,45\na,1,50\n"
    spec = {"columns": {"epoch": "epoch", "val_acc1": "val_acc"}, "run_column": "model"}
    assert script.csv_columns(text, spec) == {
        "a": {"val_acc1": ([1, 2], [50.0, 60.0])},
        "b": {"val_acc1": ([1, 2], [40.0, 45.0])},
        "a#2": {"val_acc1": ([1], [50.0])},
    }


def test_without_an_epoch_column_the_row_number_is_the_epoch(script: ModuleType) -> None:
    text = "train_loss,val_acc\n9.5,37.96\n8.1,46.39\n7.7,51.85\n"
    spec = {"columns": {"val_acc1": "val_acc"}}
    assert script.csv_columns(text, spec) == {"": {"val_acc1": ([1, 2, 3], [37.96, 46.39, 51.85])}}
