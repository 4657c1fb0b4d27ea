"""dlperf.cli.detect: `dlperf detect`'s subcommands: help, make-shapes, and the checks made
before any detector is built."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult


@pytest.mark.parametrize("command", ["export", "run", "make-shapes", "finetune", "eval"])
def test_help_ends_with_an_example(command: str) -> None:
    done = CliRunner().invoke(app, ["detect", command, "--help"])
    assert done.exit_code == 0 and "Example: dlperf detect" in done.output


def test_make_shapes_json_counts_the_images_and_objects_written(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    result = cli("detect", "make-shapes", "sh", "--images", "4", "--size", "64", "--json")
    assert result.code == 0, result.err
    done = json.loads(result.out)
    assert done["images"] == 4 and done["size"] == 64
    assert done["train"] + done["val"] == 4
    assert len(list((tmp_path / "sh" / "JPEGImages").iterdir())) == 4
    assert len(list((tmp_path / "sh" / "Annotations").iterdir())) == 4
    val = (tmp_path / "sh" / "ImageSets" / "Main" / "val.txt").read_text().split()
    assert len(val) == done["val"]


def test_make_shapes_line_names_the_split(cli: Callable[..., CliResult]) -> None:
    result = cli("detect", "make-shapes", "sh", "--images", "4", "--size", "64", "--seed", "1")
    assert result.code == 0, result.err
    line = result.out.strip()
    assert line.startswith("wrote 4 images (") and " to sh: " in line
    assert line.endswith(" val") and " train, " in line


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (
            ["export", "--out", "d.onnx", "--num-classes", "1"],
            "--num-classes counts the background",
        ),
        (["export", "--out", "d.onnx", "--model", "nope"], "unknown detector 'nope'"),
        (["finetune", "shapes", "--model", "nope"], "unknown detector 'nope'"),
        (["eval", "shapes", "--ap", "nope"], "detect.ap_method"),
        (["make-shapes", "sh", "--size", "32"], "image size 32 is too small"),
        (["export"], "Missing option '--out'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    cli: Callable[..., CliResult], args: list[str], text: str
) -> None:
    one_line_error(cli("detect", *args), text)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["eval", "notvoc"], "detect eval tests trained weights"),  # refused before the set
        (["eval", "notvoc", "--pretrained"], "notvoc"),
        (["finetune", "notvoc", "--out", "w.pt"], "notvoc"),
    ],
)
def test_a_refused_detect_command_makes_no_store(
    cli: Callable[..., CliResult], tmp_path: Path, args: list[str], says: str
) -> None:
    (tmp_path / "notvoc").mkdir()
    one_line_error(cli("detect", *args), says)
    # the store is opened as the run is made: a refusal before it made an empty dlperf.db
    assert not (tmp_path / "dlperf.db").exists()
