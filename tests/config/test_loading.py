"""dlperf.config.loading: defaults < file < --set < flags, the unknown-key hints, --set
parsing, typed flags, one-line validation errors, TOML round trips and `describe`."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from dlperf.config.experiment import Experiment, Job
from dlperf.config.loading import (
    Commands,
    apply_override,
    assign,
    build_experiment,
    describe,
    load_experiment,
    load_file,
    load_job,
    parse_value,
    read_toml,
    shortcuts,
    to_toml,
)
from dlperf.config.scale import ScaleJob
from dlperf.errors import UserError


def one_line(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(UserError) as e:
        call(*args, **kwargs)
    text = str(e.value)
    assert "\n" not in text
    return text


@pytest.fixture
def exp_file(tmp_path: Path) -> Path:
    path = tmp_path / "mnist_small.toml"
    path.write_text('[model]\nname = "smallcnn"\n[train]\nlr = 0.2\nepochs = 3\n')
    return path


def test_parse_value_reads_toml_values_and_keeps_anything_else_as_text() -> None:
    assert parse_value("3") == 3
    assert parse_value("0.5") == 0.5
    assert parse_value("true") is True
    assert parse_value("[1, 2]") == [1, 2]
    assert parse_value('"quoted"') == "quoted"
    assert parse_value("resnet18") == "resnet18"
    assert parse_value("1,2") == "1,2"  # not TOML: text


def test_parse_value_refuses_nesting_and_digit_bombs_in_one_line() -> None:
    assert "--set value '[[[[[[[[[[[[[[[[[[[['..." in one_line(parse_value, "[" * 5000)
    assert "Python does not convert" in one_line(parse_value, "9" * 10_000)


def test_apply_override_nests_and_merges_tables() -> None:
    raw: dict[str, Any] = {"model": {"kwargs": {"a": 1}}}
    apply_override(raw, "train.lr = 0.01")
    apply_override(raw, "model.kwargs={b = 2}")
    apply_override(raw, 'model.kwargs."x.y"=3')  # a quoted part is one key, dots and all
    assert raw == {"model": {"kwargs": {"a": 1, "b": 2, "x.y": 3}}, "train": {"lr": 0.01}}


def test_apply_override_refusals() -> None:
    assert one_line(apply_override, {}, "train.lr") == (
        "--set 'train.lr': expected KEY=VALUE (e.g. --set train.lr=0.01)"
    )
    assert one_line(apply_override, {}, "train..lr=1").startswith("--set 'train..lr=1': empty key")
    raw: dict[str, Any] = {"train": {"lr": 0.1}}
    assert one_line(apply_override, raw, "train.lr.x=1") == (
        "--set: 'train.lr.x': 'lr' is a value, not a section"
    )
    assert one_line(assign, {}, "a..b", 1, "sweep axis") == (
        "sweep axis: empty part in key 'a..b' (e.g. \"train.lr\")"
    )


def test_unknown_keys_name_the_file_the_key_and_the_closest_key(exp_file: Path) -> None:
    assert one_line(load_experiment, exp_file, ["train.lrr=0.1"]) == (
        f"{exp_file} with --set: unknown key 'train.lrr' (did you mean 'train.lr'?)"
    )
    text = one_line(load_experiment, None, ["zzz.q=1"])
    assert text.startswith("config with --set: unknown key 'zzz' (valid keys: model, data, ")


def test_precedence_defaults_file_set_flags(exp_file: Path) -> None:
    exp = load_experiment(exp_file)
    assert (exp.train.lr, exp.train.epochs, exp.train.batch_size) == (0.2, 3, 64)
    exp = load_experiment(exp_file, ["train.lr=0.01"])
    assert exp.train.lr == 0.01
    job = load_job(Job, exp_file, ["train.epochs=5"], train={"epochs": "7", "lr": None})
    assert (job.experiment.train.epochs, job.experiment.train.lr) == (7, 0.2)


def test_the_run_name_is_the_files_stem_and_says_a_changed_model(exp_file: Path) -> None:
    assert load_experiment(exp_file).run.name == "mnist_small"
    other = load_experiment(exp_file, ["model.name=resnet20"])
    assert other.run.name == "mnist_small model.name=resnet20"
    assert load_experiment(None).run.name is None


def test_validation_errors_are_one_line_in_dlperfs_words(exp_file: Path) -> None:
    assert one_line(load_experiment, exp_file, ["train.lr=0"]) == (
        f"{exp_file} with --set: train.lr: must be greater than 0 (got 0)"
    )
    assert one_line(load_experiment, None, ["train.lr=1e13"]) == (
        "config with --set: train.lr: must be at most 1e+12 (got 10000000000000.0)"
    )
    assert one_line(load_experiment, None, ["data.val_fraction=1.0"]) == (
        "config with --set: data.val_fraction: must be less than 1 (got 1.0)"
    )
    # a flag's error names the flag, as `names` spells it
    names = {"train.batch_size": "--batch"}
    assert one_line(load_job, Job, None, [], names, train={"batch_size": "0"}) == (
        "--batch: train.batch_size: must be at least 1 (got 0)"
    )


def test_shortcuts_type_each_flag_as_its_key_takes_it() -> None:
    assert shortcuts("train", {"lr": "0.5", "epochs": None}) == {"train.lr": 0.5}
    assert shortcuts("scale", {"workers": "1, 2,4"}) == {"scale.workers": [1, 2, 4]}
    assert shortcuts("scale", {"mode": "weak"}) == {"scale.mode": "weak"}  # one or a list
    assert shortcuts("model", {"name": "123"}) == {"model.name": "123"}  # text stays text
    assert load_job(ScaleJob, None, [], scale={"global_batch": "64"}).scale.global_batch == 64


def test_read_toml_refusals(tmp_path: Path) -> None:
    assert one_line(read_toml, tmp_path) == (
        f"{tmp_path} is a directory, not an experiment file (give a TOML file in it)"
    )
    assert one_line(read_toml, tmp_path / "none.toml") == (
        f"{tmp_path / 'none.toml'}: no such experiment file (give the path of a TOML file)"
    )
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\n")
    assert one_line(read_toml, bad).startswith(f"{bad}: malformed TOML: ")
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'[run]\nname = "caf\xe9"\n')
    # UnicodeDecodeError is a ValueError: it was once told as the long-digits guard's line
    assert one_line(read_toml, latin) == f"{latin}: not a text file"
    digits = tmp_path / "digits.toml"
    digits.write_text("[train]\nepochs = " + "9" * 5000 + "\n")
    assert "which Python does not convert" in one_line(read_toml, digits)
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf[train]\nlr = 0.3\n")
    assert read_toml(bom) == {"train": {"lr": 0.3}}


def test_to_toml_round_trips_and_drops_unset_keys(exp_file: Path) -> None:
    exp, commands = load_file(exp_file, ["scale.workers=[1,4]"])
    text = to_toml(exp, commands)
    back = tomllib.loads(text)
    assert "weights" not in back["model"]  # None: left out
    assert build_experiment(back) == exp
    assert Commands.model_validate({k: back[k] for k in Commands.model_fields}) == commands
    assert Experiment.model_validate(tomllib.loads(to_toml(exp))) == exp


def test_describe_lists_every_leaf_key_with_its_help() -> None:
    rows = dict(describe())
    assert rows["train.lr"] == "Peak learning rate."
    assert rows["train.schedule.kind"] == "Learning-rate schedule over epochs."
    assert "train.schedule" not in rows and "train" not in rows  # tables are opened
    assert "scale.workers" in rows and "predict.flops" in rows
    assert all("\n" not in text for text in rows.values())
