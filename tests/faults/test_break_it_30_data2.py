"""Break-it round 30, review of the user's data fixes (e8203ff; fixer R2).

C3. A refusal of an MNIST set after a raw file was kept beside a newer .gz lost the warning
    that said so: the line told the user to replace a file they had already replaced.
C4. That warning was a Python warning, "path:0: SetWarning: ...", in `dlperf run` and `data
    samples`: it is now a note returned with the data (ImageData.notes) for commands to tell.
C5. An unpack by an older dlperf (no .NAME.unpacked mark) was never refreshed from a newer
    .gz, and each load gunzipped and compared both files: now the unmarked file is kept as
    NAME.kept and the newer .gz is read, once.
C6. An unmarked raw file beside a newer .gz that does not unpack was refused: it is read.
C7. Idx files named in upper case in data.root itself were "none of its 4 files".
C8. An .npz with members `images` and `images.npy` (one array name for numpy) read one.
C12. `--classes 'dog, cat'` picks a folder ' cat' over 'cat' where both exist (as typed).
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

from dlperf.config import DataConfig
from dlperf.data import load_data
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
RNG = np.random.default_rng(30)


def newer_gz(raw: Path, name: str, data: bytes) -> Path:
    """raw/name.gz holding `data`, dated after raw/name (the user's copy put in later)."""
    gz = raw / f"{name}.gz"
    gz.write_bytes(data)
    stamp = (raw / name).stat().st_mtime + 2
    os.utime(gz, (stamp, stamp))
    return gz


def moved(raw: Path, name: str) -> str:
    return (
        f"{raw / name}.gz is newer than {raw / name}, of other contents, and is read: the "
        f"former {name}, which this dlperf did not unpack (an older one's unpack, or your "
        f"file), is kept as {raw / name}.kept"
    )


# --- C3 and C4: the note of a kept file, on a refusal and as a warning ---------------------------


def test_a_kept_files_note_is_in_the_refusal_that_follows(cli: Cli, tmp_path: Path) -> None:
    """Before: "... holds 60 labels for 30 images (replace it ...)", nothing of the .gz."""
    raw = write_mnist(tmp_path / "m")
    newer_gz(raw, TRAIN_IMAGES, gzip.compress(idx_bytes(np.zeros((30, 28, 28)))))
    r = describe(cli, "mnist", tmp_path / "m")
    one_line(r, 2, f"; {moved(raw, TRAIN_IMAGES)})")


def test_a_kept_files_note_is_returned_with_the_data_not_warned(cli: Cli, tmp_path: Path) -> None:
    """Before: a SetWarning, "path:0: SetWarning: ..." where no command caught it."""
    raw = write_mnist(tmp_path / "m")
    old = (raw / TRAIN_IMAGES).read_bytes()
    new = idx_bytes(RNG.integers(0, 256, (60, 28, 28)))
    newer_gz(raw, TRAIN_IMAGES, gzip.compress(new))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = load_data(DataConfig(name="mnist", root=str(tmp_path / "m")))
    assert data.notes == [moved(raw, TRAIN_IMAGES)]
    assert (raw / f"{TRAIN_IMAGES}.kept").read_bytes() == old
    assert (raw / TRAIN_IMAGES).read_bytes() == new
    r = describe(cli, "mnist", tmp_path / "m")  # unpacked once: nothing more to say
    assert r.code == 0, r.err
    assert json.loads(r.out)["warnings"] == [] and "warning" not in r.err


# --- C5: an older dlperf's unpack beside a newer .gz --------------------------------------------


def test_an_unmarked_unpack_is_kept_aside_and_the_newer_gz_read(cli: Cli, tmp_path: Path) -> None:
    """Before: the old unpack (60 images) read for ever, beside a newer .gz of 30, with a
    warning saying dlperf did not unpack it, and both files read whole at each load."""
    raw = write_mnist(tmp_path / "m")
    newer_gz(raw, TRAIN_IMAGES, gzip.compress(idx_bytes(RNG.integers(0, 256, (30, 28, 28)))))
    newer_gz(raw, TRAIN_LABELS, gzip.compress(idx_bytes(np.arange(30) % 10)))
    r = describe(cli, "mnist", tmp_path / "m")
    assert r.code == 0, r.err
    assert json.loads(r.out)["splits"] == {"train": 27, "val": 3, "test": 20}
    warned = [line for line in r.err.splitlines() if line.startswith("warning: ")]
    assert warned == [f"warning: {moved(raw, n)}" for n in (TRAIN_IMAGES, TRAIN_LABELS)]
    again = describe(cli, "mnist", tmp_path / "m")
    assert again.code == 0 and "warning" not in again.err, again.err


# --- C6: an unmarked raw file beside a newer .gz that does not unpack ---------------------------


def test_an_unmarked_raw_file_beside_a_gz_that_does_not_unpack_is_read(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: "... .gz does not unpack (...)", exit 2, of a set whose raw file is whole."""
    raw = write_mnist(tmp_path / "m")
    gz = newer_gz(raw, TRAIN_IMAGES, gzip.compress(b"x" * 100)[:20])
    r = describe(cli, "mnist", tmp_path / "m")
    assert r.code == 0, r.err
    assert json.loads(r.out)["splits"] == {"train": 54, "val": 6, "test": 20}
    warned = [line for line in r.err.splitlines() if line.startswith("warning: ")]
    assert warned == [
        f"warning: {raw / TRAIN_IMAGES} is read: {gz}, newer, does not unpack (Compressed file "
        "ended before the end-of-stream marker was reached)"
    ]


# --- C7: upper-case idx files in data.root itself -----------------------------------------------


@pytest.mark.parametrize("flat", [False, True])
def test_upper_case_idx_files_in_data_root_are_found(cli: Cli, tmp_path: Path, flat: bool) -> None:
    """Before: "... (none of its 4 files in .../MNIST/raw) (point data.root at it, ...)"."""
    raw = write_mnist(tmp_path / "m")
    for name in (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS):
        (raw / name).rename(raw / name.upper())
    root = raw
    if flat:
        root = tmp_path / "flat"
        raw.rename(root)
    fix = (
        f"move them into {root / 'MNIST' / 'raw'}"
        if flat
        else f"set data.root = '{tmp_path / 'm'}'"
    )
    one_line(
        describe(cli, "mnist", root),
        2,
        f"(its files are in {root}, named in other case: {fix})",
    )


# --- C8: an .npz with members `images` and `images.npy` -----------------------------------------


def test_an_npz_with_images_and_images_npy_is_refused(cli: Cli, tmp_path: Path) -> None:
    """Before: exit 0, one of the two read without a word (zip names differ, numpy's not)."""
    path = tmp_path / "two.npz"
    with zipfile.ZipFile(path, "w") as archive:
        for name, array in (
            ("images", np.zeros((40, 3, 8, 8), np.uint8)),
            ("images.npy", np.ones((40, 3, 8, 8), np.uint8)),
            ("labels.npy", np.arange(40) % 4),
        ):
            held = io.BytesIO()
            np.save(held, array)
            archive.writestr(name, held.getvalue())
    one_line(
        cli("data", "describe", "npz", "--set", f"data.root={path}", "--out", str(tmp_path / "o")),
        2,
        f"error: {path} holds members images and images.npy, both numpy's array 'images', of "
        "which numpy reads one (write it again with numpy.savez(path, images=..., labels=...))",
    )


# --- C12: a name as typed wins over a stripped one ----------------------------------------------


def test_a_class_name_as_typed_wins_over_one_without_its_spaces(cli: Cli, tmp_path: Path) -> None:
    """Documented in _class_id: 'dog, cat' gives ' cat', which a folder ' cat' is."""
    root = image_folder(tmp_path / "if", (" cat", "cat", "dog"))
    sets = ("--set", f"data.root={root}", "--set", "data.image_size=8", "--per-class", "1")
    out = ("--out", str(tmp_path / "out"), "--json", "--classes", "dog, cat")
    r = cli("data", "describe", "imagefolder", *sets, *out)
    assert r.code == 0, r.err
    assert json.loads(r.out)["sample_classes"] == ["dog", " cat"]
