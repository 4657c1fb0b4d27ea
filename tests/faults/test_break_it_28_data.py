"""Break-it round 28, the user's image folders and .npz files (fixer A).

C1. An image file or a folder of an image folder that cannot be read: the file was "cannot
    decode the image ... replace or remove it", a class folder "Found no valid file", and a
    sub-folder's images were dropped without a word (os.walk passes over what it cannot list).
C2. Class folders of train/ and val/ that differ only in case or white space at an end: two
    unquoted names ("cat is in train/ ... cat  is in val/") and a fix that removed a class.
C3. An .npz whose labels leave classes with no image (labels 1..10, or gaps) was trained as a
    set of more classes than it holds, without a word (one that names them is taken as named).
C4. An .npz member whose .npy header claims more than it holds was "out of memory", exit 1.
C5. An .npz member that is not an .npy file was a traceback (numpy hands over its bytes).
C6. A relative data.root not found said neither where it was read from.
C7. A file name of bytes that are not UTF-8 was shown with Python's surrogate escapes.
C8. A data.root that is a file, for a set of files in folders, was "root/train not found" or
    "set data.download = true".
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import json
import os
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
RNG = np.random.default_rng(28)


def images(folder: Path, n: int) -> Path:
    """`n` 8x8 PNGs in `folder`."""
    folder.mkdir(parents=True)
    for i in range(n):
        Image.fromarray(RNG.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return folder


def image_set(root: Path, val: tuple[str, ...] = ("cat", "dog")) -> Path:
    """root/train/{cat,dog} and root/val/<val>, 4 PNGs each."""
    for name in ("cat", "dog"):
        images(root / "train" / name, 4)
    for name in val:
        images(root / "val" / name, 4)
    return root


def describe(cli: Cli, root: Path | str, name: str = "imagefolder") -> CliResult:
    args = ("data", "describe", name, "--set", f"data.root={root}")
    return cli(*args, "--set", "data.image_size=8", "--json")


# --- C1: what cannot be read ---------------------------------------------------------------------


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint32) for f in ("effective", "permitted", "inheritable")]


# CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: with them, root reads whatever the mode bits say
_READ_ANYTHING = (1 << 1) | (1 << 2)


@contextlib.contextmanager
def mode_bits_bind() -> Iterator[None]:
    """Mode bits binding this thread, as they do a user's: as root, the capabilities that
    override them are dropped from the effective set (kept permitted, and put back after), as
    `setpriv --bounding-set=-dac_override,-dac_read_search` runs a command."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        pytest.skip("root, and capget failed: mode bits cannot be made to bind")
    saved = data[0].effective
    data[0].effective = saved & ~_READ_ANYTHING
    if libc.capset(ctypes.byref(header), data) != 0:
        pytest.skip("root, and capset failed: mode bits cannot be made to bind")
    try:
        yield
    finally:
        data[0].effective = saved
        assert libc.capset(ctypes.byref(header), data) == 0


@pytest.mark.parametrize(
    ("what", "mode"),
    [("file", 0o000), ("class folder", 0o000), ("class folder", 0o311), ("sub-folder", 0o000)],
)
def test_what_cannot_be_read_is_said_as_such(
    cli: Cli, tmp_path: Path, what: str, mode: int
) -> None:
    """Before: "cannot decode the image ... (replace or remove it)" for the file, "Found no
    valid file for the classes dog" for the class folder, and exit 0 with cat's images of the
    sub-folder left out."""
    root = image_set(tmp_path / "set")
    if what == "sub-folder":
        images(root / "train" / "cat" / "more", 4)
    locked = {
        "file": root / "train" / "cat" / "0.png",
        "class folder": root / "train" / "dog",
        "sub-folder": root / "train" / "cat" / "more",
    }[what]
    locked.chmod(mode)
    try:
        with mode_bits_bind():
            r = describe(cli, root)
    finally:
        locked.chmod(0o755)
    if what == "file":
        one_line(
            r, 2, f"{locked}: cannot read the image (Permission denied)", f"chmod a+r {locked}"
        )
    else:
        said = f"{locked}: cannot list the folder (Permission denied): its images would be left out"
        one_line(r, 2, said, f"chmod -R a+rX {locked}, or run as a user who can read it")
    assert "decode" not in r.err and "replace or remove" not in r.err


# --- C2: class folders that differ only in case or white space -----------------------------------


@pytest.mark.parametrize(
    ("twin", "shown", "how"),
    [
        ("Cat", "Cat", "case"),
        ("cat ", "'cat '", "white space at an end"),
        (" Cat", "' Cat'", "case and white space at an end"),
    ],
)
def test_class_folders_differing_only_in_case_or_spaces_are_said_so(
    cli: Cli, tmp_path: Path, twin: str, shown: str, how: str
) -> None:
    """Before: "class folder cat is in train/ but not in val/, and class folder cat  is in
    val/ but not in train/ (add val/cat and train/cat  images, or remove train/cat and
    val/cat )": the names unquoted, and a fix that removes a class."""
    root = image_set(tmp_path / "set", val=(twin, "dog"))
    r = describe(cli, root)
    said = f"{root}: class folder {shown} in val/ is train/'s cat but for {how}"
    one_line(r, 2, said, f"rename val/{shown} to val/cat")
    assert "remove" not in r.err


# --- C3: npz classes with no image ------------------------------------------------------------


def npz(path: Path, labels: np.ndarray, **more: np.ndarray) -> Path:
    shape = (len(labels), 1, 8, 8)
    np.savez(path, images=RNG.integers(0, 256, shape, dtype=np.uint8), labels=labels, **more)
    return path


@pytest.mark.parametrize(
    ("labels", "said", "fix"),
    [
        (
            np.arange(60) % 10 + 1,
            "labels 1..10 leave class 0 with no image: the model would have 11 outputs for the "
            "10 classes that have images",
            "number the classes from 0: save labels=labels - 1",
        ),
        (
            np.array([0, 2, 5] * 20),
            "labels 0..5 leave classes 1, 3 and 4 with no image: the model would have 6 outputs "
            "for the 3 classes that have images",
            "name its 6 classes: numpy.savez(..., classes=[...]) with 6 names, or number them "
            "0, 1, ... (class 2 becomes 1, and so on): "
            "save labels=numpy.unique(labels, return_inverse=True)[1]",
        ),
    ],
)
def test_npz_classes_with_no_image_are_refused(
    cli: Cli, tmp_path: Path, labels: np.ndarray, said: str, fix: str
) -> None:
    """Before: exit 0, "npz: 11 classes" with 0 images of class 0, and a model of 11 outputs."""
    path = npz(tmp_path / "c.npz", labels)
    r = describe(cli, path, "npz")
    one_line(r, 2, f"{path}: {said}", fix)


def test_npz_classes_it_names_are_its_classes_images_or_not(cli: Cli, tmp_path: Path) -> None:
    """A file that names its classes says what they are: distill's selection of the pool
    names all the teacher's classes, of which the kept images may lack some."""
    path = npz(
        tmp_path / "c.npz", np.arange(60) % 10, classes=np.array([f"c{i}" for i in range(12)])
    )
    r = describe(cli, path, "npz")
    assert r.code == 0, r.err
    counts = json.loads(r.out)["counts"]
    assert list(counts) == [f"c{i}" for i in range(12)] and counts["c11"] == 0


# --- C4, C5: npz members that are not what they claim -------------------------------------------


def _npy(array: np.ndarray) -> bytes:
    held = io.BytesIO()
    np.save(held, array)
    return held.getvalue()


@pytest.mark.parametrize("count", [10**11, 10**5])
def test_an_npz_member_holding_less_than_its_header_claims_is_said_damaged(
    cli: Cli, tmp_path: Path, count: int
) -> None:
    """Before: "out of memory: Unable to allocate 5.82 TiB", exit 1 (an EOF line for a claim
    numpy could allocate)."""
    header = io.BytesIO()
    claim = {"descr": "|u1", "fortran_order": False, "shape": (count, 1, 8, 8)}
    np.lib.format.write_array_header_1_0(header, claim)
    path = tmp_path / "d.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("images.npy", header.getvalue() + b"\0" * 1000)
        z.writestr("labels.npy", _npy(np.zeros(10, dtype=np.int64)))
    r = describe(cli, path, "npz")
    said = f"{path}: 'images' claims uint8 {count} x 1 x 8 x 8 ({count * 64:,} bytes)"
    one_line(r, 2, said, "but its member holds 1,000: truncated or damaged", "numpy.savez")


@pytest.mark.parametrize("member", ["images", "labels", "classes"])
def test_an_npz_member_that_is_no_npy_file_is_said_so(
    cli: Cli, tmp_path: Path, member: str
) -> None:
    """Before: AttributeError: 'bytes' object has no attribute 'dtype' (or 'ndim')."""
    arrays = {"images": np.zeros((6, 1, 4, 4), np.uint8), "labels": np.arange(6) % 2}
    path = tmp_path / "e.npz"
    with zipfile.ZipFile(path, "w") as z:
        for key in ("images", "labels", "classes"):
            if key == member:
                z.writestr(f"{key}.npy", "garbage")
            elif key in arrays:
                z.writestr(f"{key}.npy", _npy(arrays[key]))
    r = describe(cli, path, "npz")
    one_line(r, 2, f"{path}: '{member}.npy' is not an .npy array", "numpy.savez")


# --- C6: a relative data.root -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "root", "missing"), [("imagefolder", "set", "set/train"), ("npz", "n.npz", "n.npz")]
)
def test_a_relative_data_root_not_found_says_where_it_was_read_from(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, root: str, missing: str
) -> None:
    """Before: "set/train not found (imagefolder wants root/train and root/val)", though it is
    there, beside the experiment file, one folder up."""
    image_set(tmp_path / "set")
    npz(tmp_path / "n.npz", np.arange(8) % 2)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    r = describe(cli, root, name)
    where = f"a relative data.root is read from the current directory, {tmp_path / 'sub'}"
    one_line(r, 2, missing, where, "give an absolute path")


# --- C7: a file name that is not UTF-8 ----------------------------------------------------------


def test_a_file_name_that_is_not_utf8_is_shown_as_its_bytes(cli: Cli, tmp_path: Path) -> None:
    """Before: "bad\\udcff\\udcfe.png: cannot decode the image (cannot identify image file
    '...bad\\udcff\\udcfe.png')"."""
    root = image_set(tmp_path / "set")
    bad = os.fsencode(root / "train" / "cat") + b"/bad\xff\xfe.png"
    Path(os.fsdecode(bad)).write_bytes(b"garbage")
    r = describe(cli, root)
    shown = f"{root / 'train' / 'cat'}/bad\\xff\\xfe.png"
    one_line(r, 2, f"{shown}: cannot decode the image (cannot identify image file)")
    assert "\\udc" not in r.err


# --- C8: a data.root that is a file -----------------------------------------------------------


@pytest.mark.parametrize("name", ["imagefolder", "mnist", "cifar10"])
def test_a_data_root_that_is_a_file_is_said_so(cli: Cli, tmp_path: Path, name: str) -> None:
    """Before: "j.npz/train not found" and, for mnist, "set data.download = true", which would
    make j.npz/MNIST."""
    path = npz(tmp_path / "j.npz", np.arange(4) % 2)
    r = describe(cli, path, name)
    one_line(r, 2, f"data.root {path} is a file, not a folder", 'set data.name = "npz"')
    assert "download" not in r.err
