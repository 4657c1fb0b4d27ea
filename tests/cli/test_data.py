"""dlperf.cli.data: `dlperf data describe | samples` on the bundled digits, and their checks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from dlperf.cli.data import _classes, _data_sets
from dlperf.errors import UserError
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult


@pytest.mark.parametrize("command", ["describe", "samples"])
def test_help_ends_with_an_example(command: str) -> None:
    done = CliRunner().invoke(app, ["data", command, "--help"])
    assert done.exit_code == 0 and f"Example: dlperf data {command} digits" in done.output


@pytest.mark.parametrize(
    ("value", "parsed"),
    [(None, None), ("3", 3), (" 2 ", 2), ("cat,dog", ["cat", "dog"]), ("7,", ["7"]),
     ("3,7", ["3", "7"])],
)  # fmt: skip
def test_classes_is_a_count_or_a_comma_list(value: str | None, parsed: object) -> None:
    assert _classes(value) == parsed


def test_data_sets_name_the_data_set_and_refuse_other_sections() -> None:
    assert _data_sets("digits", ["data.limit=5"], ("data.",)) == [
        'data.name="digits"',
        "data.limit=5",
    ]
    with pytest.raises(UserError, match=r"only \[data\] and \[augment\] keys apply here"):
        _data_sets("digits", ["train.lr=1"], ("data.", "augment."))


def test_samples_writes_one_png_per_class_and_lists_them(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    result = cli("data", "samples", "digits", "--out", "s", "--classes", "2", "--json")
    assert result.code == 0, result.err
    done = json.loads(result.out)
    assert done["dataset"] == "digits" and done["split"] == "test"
    assert [f["class"] for f in done["files"]] == ["0", "1"]
    for f in done["files"]:
        assert (tmp_path / f["path"]).is_file() and f["path"].endswith(f"-{f['class']}.png")


def test_describe_json_counts_classes_and_saves_both_figures(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    result = cli(
        "data", "describe", "digits", "--classes", "2", "--per-class", "1", "--out", "d", "--json"
    )
    assert result.code == 0, result.err
    done = json.loads(result.out)
    assert done["name"] == "digits" and len(done["classes"]) == 10
    assert sum(done["counts"].values()) == done["splits"]["train"]
    assert len(done["mean"]) == len(done["std"]) == done["image_shape"][0]
    assert set(done["plots"]) == {"counts", "samples"}
    for path in done["plots"].values():
        assert (tmp_path / path).is_file() and Path(path).parent == Path("d")


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["describe", "digits", "--per-class", "0"], "--per-class must be at least 1, got 0"),
        (["describe", "digits", "--set", "train.lr=1"], "only [data] and [augment] keys apply"),
        (["samples", "digits", "--out", "s", "--set", "augment.flip=true"], "only [data] keys"),
        (["describe", "nope"], "unknown dataset 'nope'"),
        (["samples", "digits"], "Missing option '--out'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    cli: Callable[..., CliResult], args: list[str], text: str
) -> None:
    one_line_error(cli("data", *args), text)


def test_describe_of_many_classes_prints_the_most_and_fewest_and_json_keeps_all(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """100,000 classes printed as 100,000 rows took rich 42 s of a 47 s `data describe`
    (break-it round 10's test, 45-70 s): past 200 classes the text shows the 100 with the most
    training images and the 100 with the fewest, and says how many more --json lists."""
    import numpy as np

    labels = np.arange(300) % 250  # 250 classes: 0, 1 or 2 training images each
    np.savez(tmp_path / "many.npz", images=np.zeros((300, 1, 4, 4), np.uint8), labels=labels)
    # One sample in the grid: the table and the counts are of every class whatever the grid
    # shows, and a grid of the default 100 classes took matplotlib most of the test's 10-27 s
    # (its default of many classes: tests/faults/test_break_it_10_readers.py).
    args = ["data", "describe", "npz", "--set", "data.root=many.npz", "--out", "d"]
    args += ["--classes", "1", "--per-class", "1"]
    done = json.loads(cli(*args, "--json").out)
    assert len(done["counts"]) == 250
    result = cli(*args)
    assert result.code == 0, result.err
    table = result.out.split("training images per class", 1)[1]
    rows = [line.replace("│", " ").split() for line in table.splitlines()]
    shown = [(r[0], int(r[1])) for r in rows if len(r) == 2 and r[1].isdigit()]
    by_count = sorted(done["counts"].items(), key=lambda kv: -kv[1])
    assert [n for _, n in shown] == [n for _, n in by_count[:100] + by_count[-100:]]
    assert all(done["counts"][name] == n for name, n in shown)
    assert "50 more classes (all in --json)" in table


def test_describe_refused_for_its_data_leaves_no_output_directory(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    result = cli("data", "describe", "npz", "--set", "data.root=missing.npz", "--out", "o/d")
    one_line_error(result, "missing.npz: not a readable .npz file")
    assert not (tmp_path / "o").exists()  # it made o/d before reading, and left them empty
    result = cli("data", "describe", "npz", "--set", "data.root=missing.npz")
    assert result.code == 2 and not (tmp_path / "dlperf_runs").exists()
