"""Break-it round 35, the user's data (docs/faults.md, the thirty-fifth round).

C1: a data.root written with an environment variable (`$HOME/data/a.npz` in a TOML file, or
`--set 'data.root=$MYD/a.npz'` in single quotes, where no shell expands it) or as a file://
URL was read literally and called "a relative data.root ... give an absolute path", though
the user gave one; the URL was shown as `file:/...`, one slash lost. A data.root not there
that holds a variable or is a file:// URL is said to be one, naming the path meant.

C2: an experiment that set data.root but not data.name trained on the default, the bundled
digits, never reading the user's file, without a word; synthetic's shape, num_classes and size
set for another set were ignored as silently. Each such key is a warning now (the reader's
notes), guessing data.name for an .npz file or a folder with train/.

C4: --classes read each item as a name where one matched, else as an index: over classes named
by numbers (folders 1..10) `--classes 0,1` picked class "1" twice (describe) or once (samples),
never "10", without a word. A list read partly as names and partly as indices there is refused,
and so is a class picked twice.

C5: `detect run --out` saved every image of one stem (cam1/0001.jpg, cam2/0001.jpg,
cam2/0001.png) as one NAME.det.png, each overwriting the one before, "saved" said for each.
Such images are refused before any is read, naming them and the file they would share.

C3: a leading ~ in a path option or argument (`--csv=~/c.csv`, `--out=~/x`, a quoted '~/voc'),
where the shell leaves it, was read literally: reads failed for the wrong reason ("not a VOC
data set"), writes made a folder named ~ in the current directory and said "~/x". Every path
a command takes has its ~ expanded, as data.root, model.name and --db had.

C7: an empty data.root ("" in a TOML template, `--set data.root=`) was the current directory
(Path("") is "."): npz said ": not a readable .npz file ... a relative data.root", imagefolder
read the train/ and val/ of wherever the command ran. It is refused on load.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.data.describe import pick_classes
from dlperf.detect import ssd
from dlperf.errors import UserError
from tests.conftest import CliResult

# --- C1: data.root with $VAR or a file:// URL -------------------------------------------


def npz(folder: Path) -> Path:
    path = folder / "a.npz"
    np.savez(path, images=np.zeros((4, 3, 8, 8), np.uint8), labels=np.arange(4) % 2)
    return path


@pytest.mark.parametrize(
    ("name", "written"), [("npz", "$MYD/a.npz"), ("imagefolder", "${MYD}/imf")]
)
def test_c1_a_data_root_holding_an_environment_variable_is_said_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, written: str
) -> None:
    monkeypatch.setenv("MYD", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as caught:
        load_data(DataConfig(name=name, root=written, image_size=8))
    variable = written.split("/")[0]
    assert caught.value.message == (
        f"data.root {written} holds the environment variable {variable}, which dlperf does "
        "not expand"
    )
    meant = written.replace(variable, str(tmp_path))
    assert caught.value.hint == (
        f"write the path itself, {meant}: only a shell expands a variable, outside single quotes"
    )


def test_c1_an_unset_variable_is_said_to_be_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DLPERF_BK35_UNSET", raising=False)
    with pytest.raises(UserError) as caught:
        load_data(DataConfig(name="imagefolder", root="$DLPERF_BK35_UNSET/imf", image_size=8))
    assert caught.value.message == (
        "data.root $DLPERF_BK35_UNSET/imf holds the environment variable "
        "$DLPERF_BK35_UNSET, which dlperf does not expand"
    )
    assert caught.value.hint == "write the path itself ($DLPERF_BK35_UNSET is not set here)"


@pytest.mark.parametrize("name", ["npz", "imagefolder"])
def test_c1_a_file_url_is_said_to_be_one(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "my data"
    with pytest.raises(UserError) as caught:
        load_data(DataConfig(name=name, root=folder.as_uri(), image_size=8))
    assert caught.value.message == f"data.root {folder.as_uri()} is a file:// URL, not a path"
    assert caught.value.hint == f"give the path itself: {folder}"


def test_c1_a_file_named_with_a_dollar_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "$MYD").mkdir()
    npz(tmp_path / "$MYD")
    data = load_data(DataConfig(name="npz", root="$MYD/a.npz"))
    assert len(data.train) + len(data.test) == 4


# --- C2: data.root (and synthetic's keys) set for a set that does not read them ------------


@pytest.mark.parametrize(
    ("root", "fix"),
    [
        ("a.npz", 'set data.name = "npz" to read it'),
        ("imf", 'set data.name = "imagefolder" to read it'),
        ("nowhere", "set data.name to the set it holds"),
    ],
)
def test_c2_a_data_root_the_set_does_not_read_is_said_to_be_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: str, fix: str
) -> None:
    monkeypatch.chdir(tmp_path)
    npz(tmp_path)
    (tmp_path / "imf" / "train").mkdir(parents=True)
    data = load_data(DataConfig(root=root))
    assert data.name == "digits"
    assert data.notes == [
        f"data.root {root} is not read: data.name is digits, bundled with dlperf ({fix})"
    ]


def test_c2_synthetic_keys_set_for_another_set_are_said_to_be_unread() -> None:
    data = load_data(DataConfig(name="digits", num_classes=3, size=100))
    assert data.notes == [
        "data.num_classes, data.size are not read: they shape synthetic's random images, and "
        "data.name is digits"
    ]
    synthetic = load_data(DataConfig(name="synthetic", root="x.npz", shape=[1, 4, 4], size=8))
    assert synthetic.notes == [
        "data.root x.npz is not read: data.name is synthetic, random images "
        '(set data.name = "npz" to read it)'
    ]


def test_c2_keys_at_their_defaults_say_nothing() -> None:
    assert load_data(DataConfig(name="digits")).notes == []


# --- C5: detect run --out, two images of one stem ------------------------------------------


def test_c5_two_images_of_one_stem_are_refused_before_any_is_annotated(tmp_path: Path) -> None:
    images = [tmp_path / "cam1" / "0001.jpg", tmp_path / "cam2" / "0001.jpg"]
    images.append(tmp_path / "cam2" / "0001.png")
    out = tmp_path / "out"
    with pytest.raises(UserError) as caught:  # before the model is opened: none is needed
        ssd.run(tmp_path / "no.onnx", images, out_dir=out)
    assert caught.value.message == (
        f"--out: {images[0]}, {images[1]} and {images[2]} would each be saved as "
        f"{out / '0001.det.png'}, each overwriting the one before"
    )
    assert caught.value.hint == "give the images of one name in runs of their own, each its --out"
    assert not out.exists()


def test_c5_one_image_given_twice_is_one_name(tmp_path: Path) -> None:
    image = tmp_path / "a.png"
    with pytest.raises(UserError) as caught:
        ssd.run(tmp_path / "no.onnx", [image, tmp_path / "." / "a.png"], out_dir=tmp_path / "o")
    assert "would each be saved" not in caught.value.message  # the model's own refusal


# --- C7: an empty data.root ---------------------------------------------------------------


def test_c7_an_empty_data_root_is_refused(cli: Callable[..., CliResult]) -> None:
    """Before: npz said ": not a readable .npz file ... a relative data.root", and
    imagefolder read the train/ and val/ of wherever the command ran."""
    r = cli("data", "describe", "imagefolder", "--set", "data.root=")
    assert r.code == 2, r.err
    assert r.err == (
        "error: config with --set: data.root: is empty (give the folder or .npz file of the "
        "data set; \".\" is the current directory) (got '')\n"
    )
    with pytest.raises(ValueError, match="is empty"):  # blank in a TOML file
        DataConfig(root="  ")


# --- C4: --classes over classes named by numbers ------------------------------------------

NUMBERED = sorted(str(n) for n in range(1, 11))  # as folders sort: 1, 10, 2, ..., 9


def test_c4_a_list_read_partly_as_names_partly_as_indices_is_refused() -> None:
    """Before: '0' was no name, so index 0 (class '1'), and '1' the class '1': one class twice,
    never '10', without a word."""
    with pytest.raises(UserError) as caught:
        pick_classes("imagefolder", NUMBERED, ["0", "1"])
    assert caught.value.message == (
        "--classes: 0 would be read as an index (class 1) and 1 as a class name, where "
        "imagefolder's classes are named by numbers"
    )
    assert caught.value.hint == "give class names alone: 1, 10, 2, 3, 4, 5, 6, 7, 8, 9"


def test_c4_a_class_picked_twice_is_refused() -> None:
    with pytest.raises(UserError) as caught:
        pick_classes("imagefolder", ["cat", "dog"], ["cat", "0"])
    assert caught.value.message == "--classes: cat and 0 both pick the class cat"


def test_c4_names_alone_and_indices_alone_are_read_as_before() -> None:
    assert pick_classes("imagefolder", NUMBERED, ["1", "10"]) == [0, 1]
    assert pick_classes("imagefolder", ["cat", "dog"], ["1", "cat"]) == [1, 0]


# --- C3: a leading ~ in a path option --------------------------------------------------


def test_c3_a_leading_tilde_in_a_path_option_is_the_home_folder(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, elsewhere = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(elsewhere)
    rows = "".join(f"{i},{2.0 / i}\n" for i in range(1, 9))
    (home / "c.csv").write_text("step,loss\n" + rows)
    r = cli("converge", "fit", "--csv=~/c.csv", "--x", "step", "--y", "loss", "--json")
    assert r.code == 0, r.err
    r = cli("data", "samples", "digits", "--out=~/samp", "--per-class", "1")
    assert r.code == 0, r.err
    assert len(list((home / "samp").glob("*.png"))) == 10
    assert not (elsewhere / "~").exists()  # no folder named ~ where the command ran
