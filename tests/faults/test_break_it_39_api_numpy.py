"""Break-it round 39, fixer F3: NumPy numbers in a config dict given to the API.

T1 C4. `dlperf.run(dict)` refused a NumPy number with a line that contradicts itself
("train.epochs: Input should be a valid integer (got np.int64(1))"), while the rest of the API
takes them (`analyze(batch=np.int64(2))`, `log(step=np.int64(2))`, `runs(limit=...)`): a
notebook building configs from a NumPy grid hit it at once. A NumPy number in `[model.kwargs]`
was a PydanticSerializationError traceback, and `dlperf.track(config=...)` refused one ("give
the Python value it holds: .item() gives 32"). A NumPy scalar or 0-d array of a bool, an int or
a float, anywhere in the dict, is now taken as the Python value it holds (a float32's as NumPy
prints it: np.float32(0.05) is 0.05), so a value the Python one would be refused for gets the
same line (1.5 for an int); the run's config is stored as JSON numbers. A `[model.kwargs]`
value JSON cannot store (an object) is one line naming its key, not a traceback; an array
of more values than one, refused by `run` and `track` alike, has the fix `.tolist()`.
Found beside it: a dict holding itself made `run` loop for ever (`parsing.depth` followed the
cycle); it is refused as too deep, as `track` refused it.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dlperf
from dlperf import UserError
from dlperf.config import build_experiment


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # whatever a run writes under run.out_dir


def _experiment(train: dict[str, Any], **sections: Any) -> dict[str, Any]:
    """A tiny digits experiment: 128 images, one epoch, one thread, no checkpoint."""
    return {
        "model": {"name": "smallcnn"},
        "data": {"name": "digits", "limit": 128},
        "train": {"epochs": 1, "batch_size": 32, **train},
        "run": {"threads": 1, "warmup_steps": 1, "checkpoint": False},
        **sections,
    }


def _stored_config(db: Path, run_id: int) -> dict[str, Any]:
    """The run's config as the store holds it: its JSON text, read without dlperf."""
    with closing(sqlite3.connect(db)) as con:
        (text,) = con.execute("SELECT config FROM runs WHERE id = ?", (run_id,)).fetchone()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _refused(experiment: dict[str, Any], db: Path) -> str:
    with pytest.raises(UserError) as e:
        dlperf.run(experiment, store=db)
    return str(e.value)


def test_run_takes_numpy_numbers_as_the_python_values_they_hold(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    experiment = _experiment(
        {"epochs": np.int64(1), "lr": np.float32(0.05), "batch_size": np.array(32)},
        model={"name": "smallcnn", "kwargs": {"in_channels": np.int32(1)}},
    )
    experiment["run"] |= {"threads": np.uint8(1), "checkpoint": np.bool_(False)}
    result = dlperf.run(experiment, store=db)
    config = _stored_config(db, result.run_id)
    train, run = config["train"], config["run"]
    assert (train["epochs"], train["lr"], train["batch_size"]) == (1, 0.05, 32)
    assert type(train["epochs"]) is int and type(train["lr"]) is float
    assert config["model"]["kwargs"] == {"in_channels": 1}
    assert (run["threads"], run["checkpoint"]) == (1, False)
    assert type(run["threads"]) is int and type(run["checkpoint"]) is bool
    # the config these numbers typed in a TOML file make: one config, one hash
    plain = _experiment({"lr": 0.05}, model={"name": "smallcnn", "kwargs": {"in_channels": 1}})
    stored = dlperf.Store(str(db)).run(result.run_id)
    assert stored.config_hash == build_experiment(plain).config_hash()


@pytest.mark.parametrize(
    ("numpy_value", "python_value"),
    [(np.float64(1.5), 1.5), (np.float32(1.5), 1.5), (np.array(2.5), 2.5),
     (np.bool_(True), True), (np.float64(1.0), 1.0)],
)  # fmt: skip
def test_a_numpy_value_an_int_is_refused_for_gets_the_python_value_s_line(
    tmp_path: Path, numpy_value: Any, python_value: Any
) -> None:
    db = tmp_path / "s.db"
    said = _refused(_experiment({"epochs": numpy_value}), db)
    assert said == _refused(_experiment({"epochs": python_value}), db)
    assert said == f"experiment: train.epochs: Input should be a valid integer (got {python_value})"
    assert not db.exists() or not dlperf.Store(str(db)).runs()


def test_a_numpy_infinity_is_refused_as_python_s(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    said = _refused(_experiment({"lr": np.float32("inf")}), db)
    assert said == _refused(_experiment({"lr": float("inf")}), db)


def test_an_object_in_model_kwargs_is_one_line_naming_its_key(tmp_path: Path) -> None:
    experiment = _experiment({}, model={"name": "smallcnn", "kwargs": {"act": {"f": object()}}})
    said = _refused(experiment, tmp_path / "s.db")
    assert said.startswith("experiment: model.kwargs: act.f is of type object: not a JSON value")
    assert "\n" not in said


def test_track_stores_numpy_numbers_as_json_numbers(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    config = {
        "lr": np.float32(0.1),
        "batch": np.int64(32),
        "shuffle": np.bool_(False),
        "grid": [np.float64(0.5), {"depth": np.array(3)}],
    }
    with dlperf.track("numpy", config=config, store=str(db)) as run:
        run.log(1, loss=0.5)
    stored = _stored_config(db, run.id)
    assert stored == {"lr": 0.1, "batch": 32, "shuffle": False, "grid": [0.5, {"depth": 3}]}
    assert type(stored["batch"]) is int and type(stored["shuffle"]) is bool
    assert dlperf.Store(str(db)).run(run.id).config == stored
    assert config["batch"].__class__ is np.int64  # the caller's dict is left as it was


def test_an_array_of_values_is_refused_with_the_list_it_holds_as_the_fix(tmp_path: Path) -> None:
    experiment = _experiment({}, data={"name": "synthetic", "shape": np.array([3, 8, 8])})
    with pytest.raises(UserError) as e:
        dlperf.run(experiment, store=tmp_path / "s.db")
    assert e.value.message == (
        "experiment: data.shape: Input should be a valid list "
        "(got a numpy.ndarray holding [3, 8, 8])"
    )
    assert e.value.hint == "give it as a list: .tolist()"
    with (
        pytest.raises(UserError) as e,
        dlperf.track("m", config={"shape": np.array([3, 8])}, store=str(tmp_path / "s.db")),
    ):
        pass
    assert e.value.message == "config['shape'] is not JSON-serialisable (numpy.ndarray)"
    assert e.value.hint == "give it as a list: .tolist()"


def test_a_dict_that_holds_itself_is_refused_as_too_deep(tmp_path: Path) -> None:
    """Found beside C4: `run` looped for ever measuring such a dict's depth."""
    looped: dict[str, Any] = {}
    looped["kwargs"] = looped
    said = _refused({"model": looped}, tmp_path / "s.db")
    assert (
        said == "experiment: nested too deeply (dlperf reads at most 32 levels of tables and lists)"
    )
    with (
        pytest.raises(UserError) as e,
        dlperf.track("m", config={"a": looped}, store=str(tmp_path / "s.db")),
    ):
        pass
    assert e.value.message.startswith("config is nested too deeply")
