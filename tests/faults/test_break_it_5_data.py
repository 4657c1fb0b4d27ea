"""What the fifth break-it round found in users' configs and data (issue 41): a --set key
in TOML's quotes split at its dots where a TOML file keeps it whole (F7), an npz's class
names stored as bytes shown as "b'a'" and a names array of shape (1, N) read as one class
(F8), and an image folder of GIFs refused by training while `infer` reads GIFs (F9). Each
through the real entry point, each seen failing before its fix."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import CliResult


def _shown(cli: Callable[..., CliResult], *args: str) -> dict[str, Any]:
    result = cli("config", "show", *args)
    assert result.code == 0, result.err
    return tomllib.loads(result.out)


def test_a_quoted_set_key_is_one_key_as_in_a_toml_file(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "kw.toml").write_text('[model.kwargs]\n"a.b" = 1\n')
    from_file = _shown(cli, "kw.toml")["model"]["kwargs"]
    assert from_file == {"a.b": 1}
    # before: {'"a': {'b"': 1}}, silently handed to the model's factory
    assert _shown(cli, "--set", 'model.kwargs."a.b"=1')["model"]["kwargs"] == from_file
    assert _shown(cli, "--set", "model.kwargs.'x.y'.z=true")["model"]["kwargs"] == {
        "x.y": {"z": True}
    }
    # what a bare key did before stays as it was: split at dots, any other character kept
    assert _shown(cli, "--set", "model.kwargs.a/b=2")["model"]["kwargs"] == {"a/b": 2}
    assert _shown(cli, "--set", " train.lr =0.5")["train"]["lr"] == 0.5


def test_a_set_key_with_an_unclosed_quote_is_one_line(cli: Callable[..., CliResult]) -> None:
    result = cli("config", "show", "--set", 'model.kwargs."a.b=1')
    assert result.code == 2, result.err
    assert result.err.startswith("error: --set 'model.kwargs.\"a.b=1': not a TOML key")
    assert result.err.count("\n") == 1


def test_an_unknown_quoted_set_key_still_names_the_closest(
    cli: Callable[..., CliResult],
) -> None:
    result = cli("config", "show", "--set", '"train".lrr=1')
    assert result.code == 2, result.err
    assert result.err == (
        "error: config with --set: unknown key 'train.lrr' (did you mean 'train.lr'?)\n"
    )


def _npz(path: Path, classes: Any) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (60, 1, 8, 8), dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(60) % 3, classes=classes)


def test_npz_class_names_in_bytes_are_decoded(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    _npz(tmp_path / "b.npz", np.array([b"a", "b\u00e9".encode(), b"c\xff"]))
    sets = ("--set", "data.name=npz", "--set", 'data.root="b.npz"')
    result = cli("data", "describe", "npz", *sets, "--json")
    assert result.code == 0, result.err
    # before: ["b'a'", "b'b\\xc3\\xa9'", "b'c\\xff'"]; bytes that are not UTF-8 shown with
    # U+FFFD, as an image folder's class names are (round 4)
    assert json.loads(result.out)["classes"] == ["a", "b\u00e9", "c\ufffd"]


@pytest.mark.parametrize("shape", [(1, 3), (3, 1), ()])
def test_npz_class_names_not_in_one_row_are_refused(
    cli: Callable[..., CliResult], tmp_path: Path, shape: tuple[int, ...]
) -> None:
    names = np.array(["a", "b", "c"] if shape else "abc").reshape(shape)
    _npz(tmp_path / "n.npz", names)
    sets = ("--set", "data.name=npz", "--set", 'data.root="n.npz"')
    result = cli("data", "describe", "npz", *sets, "--json")
    # before: (1, 3) read as one class ("label 2 is outside 0..0 (1 classes)"); () a TypeError
    assert result.code == 2, result.err
    assert result.err == (
        f"error: n.npz: 'classes' must be a 1-D array of names, got shape {shape} "
        "(e.g. classes=numpy.array(['cat', 'dog', 'bird']))\n"
    )


def test_an_image_folder_of_gifs_trains_as_infer_reads_them(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    from PIL import Image

    for split in ("train", "val"):
        for c, name in enumerate(["a", "b"]):
            folder = tmp_path / "if" / split / name
            folder.mkdir(parents=True)
            for i in range(6):
                Image.new("RGB", (8, 8), (120 * c, 20 * i, 0)).save(folder / f"{i}.gif")
    tiny_exp(epochs=1)
    sets = ["--set", 'data.name="imagefolder"', "--set", 'data.root="if"']
    sets += ["--set", "data.image_size=8", "--set", "train.batch_size=4"]
    result = cli("run", "tiny.toml", "--set", "run.threads=1", *sets, "--json")
    # before: "Found no valid file for the classes a, b." (torchvision's), exit 2
    assert result.code == 0, result.err
    runs = json.loads(cli("runs", "list", "--json").out)
    assert [r["status"] for r in runs] == ["finished"]


def test_an_image_folder_without_images_names_what_is_read(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    for split in ("train", "val"):
        for name in ("a", "b"):
            (tmp_path / "if" / split / name).mkdir(parents=True)
            (tmp_path / "if" / split / name / "x.txt").write_text("not an image")
    sets = ("--set", 'data.root="if"', "--set", "data.image_size=8")
    result = cli("data", "describe", "imagefolder", *sets, "--json")
    assert result.code == 2, result.err
    assert result.err.count("\n") == 1
    assert "Found no valid file for the classes a, b" in result.err
    assert ".gif" in result.err and ".png" in result.err
