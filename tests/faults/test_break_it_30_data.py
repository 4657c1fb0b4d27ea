"""Break-it round 30, the user's data sets (fixer D1).

C1. A class folder named with a trailing space ('cat ') could not be chosen: --classes
    stripped 'cat ' to 'cat', and the line told the user to give 'cat ', what they gave.
C2. A class folder that is a link to another (train/c -> a) was named the wrong way round:
    "train/a leads into the folder of class c", and removing train/a removes the class.
C3. An .npz holding two members named images.npy was read, one of them, without a word.
C4. An MNIST raw idx file beside a newer .gz of other contents was overwritten by the .gz's
    (data lost, nothing said): only a file dlperf unpacked from the .gz is unpacked over.
C5. MNIST idx files named in upper case were "none of its 4 files ... (point data.root at
    it, ...)", of a data.root that pointed at them.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CliResult
from tests.faults.test_break_it_21_data import (
    TEST_IMAGES,
    TEST_LABELS,
    TRAIN_IMAGES,
    TRAIN_LABELS,
    describe,
    idx_bytes,
    write_mnist,
)
from tests.faults.test_break_it_29_data import image_folder
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def describe_folder(cli: Cli, root: Path, *args: str) -> CliResult:
    sets = ("--set", f"data.root={root}", "--set", "data.image_size=8", "--per-class", "1")
    out = ("--out", str(root.parent / "out"))
    return cli("data", "describe", "imagefolder", *sets, *out, "--json", *args)


# --- C1: a class name with white space at its edge ----------------------------------------------


@pytest.mark.parametrize(
    ("chosen", "shown"),
    [("cat ,", ["cat "]), (" cat,", [" cat"]), ("dog. ,cat ", ["dog.", "cat "]), ("dog", None)],
)
def test_a_class_name_with_spaces_is_chosen_as_typed(
    cli: Cli, tmp_path: Path, chosen: str, shown: list[str] | None
) -> None:
    """Before: "--classes: imagefolder has no class 'cat' (give names or indices 0..1: 'cat ',
    dog.)" for --classes 'cat ,'. A name is matched as typed, else without its spaces where
    that names one class; 'cat' names two here, and the line gives their indices."""
    root = image_folder(tmp_path / "if", (" cat", "cat ", "dog."))
    r = describe_folder(cli, root, "--classes", chosen)
    if shown is not None:
        assert r.code == 0, r.err
        assert json.loads(r.out)["sample_classes"] == shown
        return
    one_line(
        r,
        2,
        "error: --classes: imagefolder has no class 'dog' (give names or indices 0..2: ' cat', "
        "'cat ', dog.)",
    )
    one_line(
        describe_folder(cli, root, "--classes", "cat,"),
        2,
        "error: --classes: 'cat' names 2 classes of imagefolder with spaces at their edges, "
        "' cat' and 'cat ' (give the one meant by its index: 0 for ' cat', 1 for 'cat ')",
    )


# --- C2: a class folder that is a link to another class -----------------------------------------


@pytest.mark.parametrize("link", ["c", "0"])
def test_a_class_folder_linked_to_another_is_named_as_the_link(
    cli: Cli, tmp_path: Path, link: str
) -> None:
    """Before, for a link sorting after its target: "train/a leads into the folder of class c
    (train/c)", and removing train/a, as told, removed the class's images."""
    root = image_folder(tmp_path / "if")
    for split in ("train", "val"):
        (root / split / link).symlink_to("a")
    train = root / "train"
    one_line(
        describe_folder(cli, root),
        2,
        f"error: {train / link} leads into the folder of class a ({train / 'a'}): its images "
        f"would be read as class {link} as well",
    )


# --- C3: an .npz with two members of one name ---------------------------------------------------


def test_an_npz_with_two_members_of_one_name_is_refused(cli: Cli, tmp_path: Path) -> None:
    """Before: exit 0, the second (all-zero) images.npy read, the first passed over."""
    images = np.random.default_rng(30).integers(0, 256, (40, 3, 8, 8), np.uint8)
    path = tmp_path / "dup.npz"
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as archive:
        warnings.simplefilter("ignore", UserWarning)  # zipfile's "Duplicate name"
        for name, array in (("images", images), ("images", 0 * images), ("labels", None)):
            held = io.BytesIO()
            np.save(held, np.arange(40) % 4 if array is None else array)
            archive.writestr(f"{name}.npy", held.getvalue())
    one_line(
        cli("data", "describe", "npz", "--set", f"data.root={path}", "--out", str(tmp_path / "o")),
        2,
        f"error: {path} holds 2 members named images.npy, of which numpy reads one (write it "
        "again with numpy.savez(path, images=..., labels=...))",
    )


# --- C4 and C5: MNIST idx files -----------------------------------------------------------------


def test_a_raw_idx_file_kept_aside_is_said_by_samples_and_by_a_runs_data(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: the four raw files (60 and 20 images) were replaced by the .gz files' (30 and
    10 blank ones), written a moment later, without a word. Now (the review's rule, in
    test_break_it_30_data2) the raw file is kept aside as NAME.kept and the .gz read, and
    every reader says so: `data samples` as a warning line, a run's data (build.load_run_data)
    among its warnings, not as Python's "path:0: SetWarning" (the reader's notes travel with
    the data)."""
    from dlperf.config.experiment import Experiment
    from dlperf.engine.build import load_run_data

    raw = write_mnist(tmp_path / "m")
    held = (raw / TRAIN_IMAGES).read_bytes()
    gz = raw / f"{TRAIN_IMAGES}.gz"
    gz.write_bytes(gzip.compress(idx_bytes(np.zeros((60, 28, 28)))))
    stamp = (raw / TRAIN_IMAGES).stat().st_mtime + 2  # written after the raw file
    os.utime(gz, (stamp, stamp))
    said = (
        f"warning: {gz} is newer than {raw / TRAIN_IMAGES}, of other contents, and is read: the "
        f"former {TRAIN_IMAGES}, which this dlperf did not unpack (an older one's unpack, or "
        f"your file), is kept as {raw / TRAIN_IMAGES}.kept"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no Python warning on the way
        r = cli("data", "samples", "mnist", "--set", f"data.root={tmp_path / 'm'}",
                "--out", str(tmp_path / "s"))  # fmt: skip
    assert r.code == 0, r.err
    assert said in r.err.replace(" \n", " ").splitlines(), r.err  # rich wraps at 160
    assert (raw / f"{TRAIN_IMAGES}.kept").read_bytes() == held
    # Unpacked and marked now: a run's data says nothing more of it ...
    exp = Experiment.model_validate({"data": {"name": "mnist", "root": str(tmp_path / "m")}})
    assert not any("is kept as" in w for w in load_run_data(exp, None)[1])
    # ... while a second user file beside a newer .gz is said among a run's warnings.
    (raw / TRAIN_IMAGES).write_bytes(held)
    os.utime(gz, (stamp + 10, stamp + 10))
    notes = [w for w in load_run_data(exp, None)[1] if "is kept as" in w]
    assert notes == [said.removeprefix("warning: ") + "2"], notes


def test_idx_files_named_in_upper_case_are_said_to_be_there(cli: Cli, tmp_path: Path) -> None:
    """Before: "... (none of its 4 files in .../MNIST/raw) (point data.root at it, or set
    data.download = true)"."""
    raw = write_mnist(tmp_path / "m")
    (raw / TRAIN_IMAGES).rename(raw / TRAIN_IMAGES.upper())
    (raw / TRAIN_LABELS).write_bytes(gzip.compress((raw / TRAIN_LABELS).read_bytes()))
    (raw / TRAIN_LABELS).rename(raw / f"{TRAIN_LABELS.upper()}.GZ")
    for name in (TEST_IMAGES, TEST_LABELS):
        (raw / name).rename(raw / name.upper())
    upper = [TRAIN_IMAGES.upper(), f"{TRAIN_LABELS.upper()}.GZ", TEST_IMAGES.upper()]
    one_line(
        describe(cli, "mnist", tmp_path / "m"),
        2,
        f"error: data.root '{tmp_path / 'm'}' has no readable MNIST idx files ({raw}/) "
        f"({', '.join(upper)} and {TEST_LABELS.upper()} in {raw} are named in other case) "
        f"(rename them to {TRAIN_IMAGES}, {TRAIN_LABELS}.gz, {TEST_IMAGES} and {TEST_LABELS}, "
        "the names torchvision gives them)",
    )
