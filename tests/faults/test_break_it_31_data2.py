"""Break-it round 31, the user's own data, after review (fixer G2).

R1 F6. A VOC root given to `detect finetune` / `eval` that is a loop of symbolic links, or a
    link to nothing, was "not a VOC data set (no Annotations/ and ImageSets/Main/)": a loop is
    now said to be one, naming the links, as data.root's is, and a link to nothing names its
    target.
R1 F7. `data samples digits --per-class 500` warned "10 classes asked ... ; try --split train"
    where no class was asked and train holds too few as well: "asked" is said only of
    --classes, and a split is offered only where it holds --per-class of each class; else the
    line says the most a split gives of each.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.faults.test_break_it_21_detect import shapes
from tests.faults.test_break_it_31_data import lopsided
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


# --- F6: a VOC root that is a loop of links, or a link to nothing -----------------------------


def voc_args(command: str, root: str) -> tuple[str, ...]:
    if command == "finetune":
        return ("detect", "finetune", root, "--epochs", "1", "--threads", "1")
    return ("detect", "eval", root, "--pretrained", "--threads", "1")


@pytest.mark.parametrize("command", ["finetune", "eval"])
def test_a_voc_root_that_is_a_loop_of_links_is_said_to_be_one(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """Before: "loops/la is not a VOC data set (no Annotations/ and ImageSets/Main/)", of a
    link that is there, and a VOC set once pointed right."""
    folder = tmp_path / "loops"
    folder.mkdir()
    (folder / "lb").symlink_to("la")
    (folder / "la").symlink_to("lb")
    (folder / "dang").symlink_to("nothing")
    monkeypatch.chdir(tmp_path)
    r = cli(*voc_args(command, "loops/la"))
    one_line(r, 2, "loops/la is a loop of symbolic links (loops/la -> lb -> la)",
             "point one of the links at the VOC data set")  # fmt: skip
    assert "not a VOC data set" not in r.err
    r = cli(*voc_args(command, "loops/dang"))
    one_line(r, 2, "loops/dang is a link to nothing, which is not there",
             "mount or restore nothing, or give the VOC data set's folder")  # fmt: skip


def test_a_voc_folder_that_is_a_loop_of_links_is_said_to_be_one(cli: Cli, tmp_path: Path) -> None:
    """Annotations/ a loop, in a root that is there: the same cause one folder down."""
    root = shapes(tmp_path)
    notes = root / "Annotations"
    notes.rename(root / "kept")
    notes.symlink_to("Annotations")
    r = cli(*voc_args("eval", str(root)))
    one_line(r, 2, f"{notes} is a loop of symbolic links ({notes} -> Annotations)")


# --- F7: data samples --per-class more than any split holds --------------------------------------


def test_samples_offer_a_split_only_where_it_holds_enough(cli: Cli, tmp_path: Path) -> None:
    """Before: "10 classes asked have fewer than 500 test images: 0 has 38 (121 in train, 19
    in val), ...; try --split train", where no class was asked and train gives 121."""
    out = tmp_path / "out"
    r = cli("data", "samples", "digits", "--per-class", "500", "--out", str(out), "--json")
    assert r.code == 0, r.err
    said = json.loads(r.out)["warnings"]
    assert len(said) == 1 and said[0].startswith("10 classes have fewer than 500 test images: ")
    assert said[0].endswith(
        "; no split holds 500 of each class: train holds at least 117 of each"
    ), said
    assert "asked" not in said[0] and "try --split" not in said[0]
    # a split that holds enough of each is offered, and classes asked are said to be asked
    r = cli("data", "samples", "digits", "--per-class", "100", "--classes", "0,1",
            "--out", str(out), "--json")  # fmt: skip
    assert r.code == 0, r.err
    assert json.loads(r.out)["warnings"] == [
        "2 classes asked have fewer than 100 test images: 0 has 38 (121 in train, 19 in val), "
        "1 has 31 (138 in train, 13 in val); try --split train"
    ]
    # a class the whole set holds fewer than --per-class of: no split is offered
    root = ("--set", f"data.root={lopsided(tmp_path)}")
    r = cli("data", "samples", "npz", *root, "--split", "val", "--per-class", "3",
            "--out", str(out), "--json")  # fmt: skip
    assert r.code == 0, r.err
    assert json.loads(r.out)["warnings"] == [
        "1 class has fewer than 3 val images: dog has 0 (1 in test); no split holds 3 of each "
        "class: test holds at least 1 of each"
    ]
