"""Break-it round 23, P2 causes C4, C7, C9 and C11: the names and numbers `data describe` and
`data samples` show of the user's own data.

C4: `data samples` made each file name from the whole class name: a legal class folder of 252
bytes ('猫' x 84) or an npz class of 300 characters made a name past the file system's 255
bytes, "cannot use .../test-00006-猫猫...part.png: File name too long", naming the hidden
temporary file, with the first samples already written. The class part is now cut (on a
character boundary, a hash keeping two names apart), and an error names the file itself.
C7: '~' in data.root was not expanded, though `data describe --help` and `data samples
--help` give data.root=~/data as the example (bash leaves it: data.root is not a word it
expands): "~/n.npz: not a readable .npz file". It is now expanded, as --db is, for every
command (run, distill, describe, samples) that reads data.root.
C9: classes "a" and "a " (a folder named with a trailing space, npz classes ["a", "a "]) showed
as two rows named `a` in describe's table and the samples' class column, and their samples as
test-...-a.png both. Names with white space at an edge are now shown quoted ('a '), and their
file names carry a hash of the name.
C11: `data describe` showed a set whose pixels are all one value with std 0.0010, the floor
training's normaliser puts under the std (dividing by 0 makes NaN), as if measured, and said
nothing. It now shows the measured 0 and warns that the channel holds one value; training
keeps the floor.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from dlperf import paths
from dlperf.config import DataConfig, load_experiment
from dlperf.data import load_data
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def npz(path: Path, classes: list[str] | None = None, channels: int = 1, value: int = -1) -> Path:
    """40 uint8 8x8 images, labels 0 and 1 in turn (and `classes` when given); every pixel
    `value` when it is 0..255, else random."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (40, channels, 8, 8), dtype=np.uint8)
    if value >= 0:
        images[:] = value
    arrays = {"images": images, "labels": np.arange(40) % 2}
    if classes is not None:
        arrays["classes"] = np.array(classes)
    np.savez(path, **arrays)
    return path


def folder(root: Path, classes: list[str]) -> Path:
    """root/train and root/val, 4 8x8 RGB PNGs per class in each."""
    rng = np.random.default_rng(1)
    for split in ("train", "val"):
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for i in range(4):
                pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


def cells(line: str) -> list[str]:
    """A table row's cells, without the padding rich adds (a cell's own edge space would be
    lost too: the names shown here have none, being quoted)."""
    return [cell.strip() for cell in line.split("\u2502")]


def samples(cli: Cli, root: str, out: str, *more: str, name: str = "npz") -> CliResult:
    return cli("data", "samples", name, "--set", f"data.root={root}", "--out", out, *more)


# --- C4: long class names in sample file names ------------------------------------------------


def test_samples_of_a_class_folder_named_in_252_bytes_are_written(cli: Cli, tmp_path: Path) -> None:
    """Before: "cannot use s/test-00006-猫...猫.part.png: File name too long", exit 2."""
    long = "猫" * 84  # 252 bytes of UTF-8, a legal folder name
    folder(tmp_path / "if", ["a", long])
    r = samples(cli, "if", "s", "--set", "data.image_size=8", "--json", name="imagefolder")
    assert r.code == 0, r.err
    files = json.loads(r.out)["files"]
    assert [f["class"] for f in files] == ["a", long]  # the name itself, whole
    for f in files:
        path = Path(f["path"])
        assert path.is_file() and len(os.fsencode(path.name)) <= 255
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == sorted(
        Path(f["path"]).name for f in files
    )
    cut = Path(files[1]["path"]).name
    assert cut.startswith(f"test-{files[1]['index']:05d}-猫猫") and cut.endswith(".png")


def test_npz_classes_of_300_characters_sharing_a_prefix_get_distinct_names(
    cli: Cli, tmp_path: Path
) -> None:
    names = ["x" * 300, "x" * 299 + "y"]
    npz(tmp_path / "n.npz", names)
    r = samples(cli, "n.npz", "s", "--per-class", "2", "--split", "train", "--json")
    assert r.code == 0, r.err
    files = json.loads(r.out)["files"]
    assert [f["class"] for f in files] == [names[0]] * 2 + [names[1]] * 2
    parts = {Path(f["path"]).name.split("-", 2)[2] for f in files}  # the class part
    assert len(parts) == 2  # one per class: the cut names stay apart
    assert all(len(os.fsencode(Path(f["path"]).name)) <= 255 for f in files)


def test_a_plain_class_name_is_kept_as_the_file_name_part(cli: Cli, tmp_path: Path) -> None:
    npz(tmp_path / "n.npz", ["cat", "猫"])
    r = samples(cli, "n.npz", "s", "--split", "train", "--json")
    assert r.code == 0, r.err
    names = [Path(f["path"]).name for f in json.loads(r.out)["files"]]
    assert [n.split("-", 2)[2] for n in names] == ["cat.png", "猫.png"]


def test_a_sample_that_cannot_be_written_is_named_not_its_temporary_file(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the line named s/test-....part.png, a file the user never sees."""
    npz(tmp_path / "n.npz")
    first = Path(json.loads(samples(cli, "n.npz", "s0", "--json").out)["files"][0]["path"]).name
    named = paths.part_name

    def blocked(path: Path) -> Path:  # a directory where the temporary file goes: the save fails
        part = named(path)
        part.mkdir(parents=True)
        return part

    monkeypatch.setattr(paths, "part_name", blocked)  # each writer's own name (round 40)
    r = samples(cli, "n.npz", "s")
    one_line(r, 2, f"error: cannot use s/{first}: ")
    assert ".part" not in r.err


# --- C7: '~' in data.root ---------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME set to a directory holding n.npz (2 classes of 20 random 8x8 grey images)."""
    home = tmp_path / "home"
    home.mkdir()
    npz(home / "n.npz")
    monkeypatch.setenv("HOME", str(home))
    return home


def test_a_tilde_in_data_root_is_the_home_directory(home: Path) -> None:
    assert DataConfig(name="npz", root="~/n.npz").root == str(home / "n.npz")
    exp = load_experiment(None, ['data.name="npz"', "data.root=~/n.npz"])
    assert exp.data.root == str(home / "n.npz")
    assert DataConfig(name="npz", root="data/~x").root == "data/~x"  # only a leading ~


@pytest.mark.parametrize("command", ["describe", "samples"])
def test_data_commands_read_a_root_under_the_home_directory(
    command: str, cli: Cli, home: Path
) -> None:
    """Before: "~/n.npz: not a readable .npz file (no such file)", exit 2."""
    r = cli("data", command, "npz", "--set", "data.root=~/n.npz", "--out", "o", "--json")
    assert r.code == 0, r.err


def test_run_reads_a_root_under_the_home_directory(cli: Cli, home: Path, tmp_path: Path) -> None:
    (tmp_path / "e.toml").write_text(
        '[model]\nname = "smallcnn"\n[data]\nname = "npz"\nroot = "~/n.npz"\n'
        "[train]\nepochs = 1\nbatch_size = 16\n[run]\nthreads = 1\nwarmup_steps = 0\n"
    )
    r = cli("run", "e.toml")
    assert r.code == 0, r.err


def test_distills_pool_reads_a_root_under_the_home_directory(home: Path) -> None:
    from dlperf.distill import pool

    npz(home / "pool.npz")
    exp = load_experiment(None, ['data.name="digits"'])
    cfg, _ = pool.parse("npz:root=~/pool.npz", exp)
    assert cfg.root == str(home / "pool.npz")


# --- C9: names told apart by their edge spaces ------------------------------------------------


def test_describe_shows_classes_differing_in_an_edge_space_apart(cli: Cli, tmp_path: Path) -> None:
    """Before: two rows, both `a`."""
    npz(tmp_path / "n.npz", ["a", "a "])
    r = cli("data", "describe", "npz", "--set", "data.root=n.npz", "--out", "d")
    assert r.code == 0, r.err
    table = r.out.split("training images per class")[1].splitlines()
    rows = [cells(line)[0] for line in table if "\u2502" in line]
    assert rows == ["a", "'a '"], r.out
    doc = cli("data", "describe", "npz", "--set", "data.root=n.npz", "--out", "d", "--json")
    assert json.loads(doc.out)["classes"] == ["a", "a "]  # the names themselves


def test_samples_show_classes_differing_in_an_edge_space_apart(cli: Cli, tmp_path: Path) -> None:
    """Before: the class column said `a` twice, and the files were test-...-a.png both."""
    npz(tmp_path / "n.npz", ["a", "a "])
    r = samples(cli, "n.npz", "s", "--split", "train")
    assert r.code == 0, r.err
    rows = [cells(line) for line in r.out.splitlines() if line.startswith("s/")]
    assert [row[1] for row in rows] == ["a", "'a '"], r.out
    parts = [Path(row[0]).name.split("-", 2)[2] for row in rows]
    assert parts[0] == "a.png" and parts[1] != parts[0]


# --- C11: a channel of one value --------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 128])
def test_describe_shows_a_constant_channels_std_as_0_and_warns(
    value: int, cli: Cli, tmp_path: Path
) -> None:
    """Before: std 0.0010 (the normaliser's floor), and no warning."""
    npz(tmp_path / "n.npz", value=value)
    r = cli("data", "describe", "npz", "--set", "data.root=n.npz", "--out", "d", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["std"] == [0.0]
    assert doc["mean"] == [pytest.approx(value / 255)]
    assert len(doc["warnings"]) == 1 and "channel 0" in doc["warnings"][0], doc
    assert f"warning: {doc['warnings'][0]}" in r.err
    human = cli("data", "describe", "npz", "--set", "data.root=n.npz", "--out", "d")
    shown = [cells(line) for line in human.out.splitlines() if line.startswith("std per")]
    assert shown == [["std per channel", "0.0000"]], human.out


def test_only_the_constant_channel_is_warned_of(cli: Cli, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, (40, 2, 8, 8), dtype=np.uint8)
    images[:, 1] = 7
    np.savez(tmp_path / "n.npz", images=images, labels=np.arange(40) % 2)
    r = cli("data", "describe", "npz", "--set", "data.root=n.npz", "--out", "d", "--json")
    doc = json.loads(r.out)
    assert doc["std"][0] > 0.2 and doc["std"][1] == 0.0
    assert len(doc["warnings"]) == 1 and "channel 1" in doc["warnings"][0]


def test_training_keeps_the_normalisers_floor(tmp_path: Path) -> None:
    npz(tmp_path / "n.npz", value=0)
    data = load_data(DataConfig(name="npz", root=str(tmp_path / "n.npz")))
    assert data.std == (pytest.approx(1e-3),)  # training divides by it: never 0


def test_the_figures_label_classes_differing_in_an_edge_space_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.axes import Axes

    from dlperf.report.data import plot_counts, plot_samples

    ticks: list[str] = []
    titles: list[str] = []
    set_xticks, set_title = Axes.set_xticks, Axes.set_title

    def xticks(self: Axes, positions: Any, labels: Any = None, **kw: Any) -> Any:
        ticks.extend(labels or [])
        return set_xticks(self, positions, labels, **kw)

    def title(self: Axes, label: str, *args: Any, **kw: Any) -> Any:
        titles.append(label)
        return set_title(self, label, *args, **kw)

    monkeypatch.setattr(Axes, "set_xticks", xticks)
    monkeypatch.setattr(Axes, "set_title", title)
    plot_counts(tmp_path / "c.png", "x", ["a", "a "], [2, 2])
    assert ticks == ["a", "'a '"]  # before: "a" and "a ", drawn alike
    grey = torch.zeros(1, 8, 8, dtype=torch.uint8)
    plot_samples(tmp_path / "s.png", "x", ["a", "a "], [grey[None], grey[None]])
    assert "'a '" in titles and "a" in titles
