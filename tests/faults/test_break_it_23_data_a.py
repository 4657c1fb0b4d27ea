"""The twenty-third break-it round (P2, the user's own data): causes 1, 3, 5 and 10.

1. A PNG whose zTXt chunk unpacks past Pillow's MAX_TEXT_CHUNK raised ValueError, which
   `opened_image` (catching OSError only) let through: a traceback from `data describe`,
   `run` (in memory, and streamed in loaders.channel_stats) and `detect eval` (voc's
   _header_size catches only UserError).
3. CIFAR batches.meta label names were taken from any iterable: a (1, 2) array was blamed on
   the labels, a (2, 1) array named classes "['cat']", a set's order followed PYTHONHASHSEED,
   a dict named label 0 by key order, a string made one class per character.
5. A link from one class folder into a sibling class folder (train/a/linkb -> ../b) gave b's
   images both labels, without a word.
10. A damaged TIFF printed Pillow's UserWarnings and libtiff's own stderr lines (naming
   "tempfile.tif", a file that is not the user's) before dlperf's one line.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from dlperf.detect import voc
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_4_inputs import _image_folder
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
RNG = np.random.default_rng(23)
SMALL = ("--set", "data.image_size=8")


def write_folder(root: Path, classes: tuple[str, ...] = ("a", "b"), per_class: int = 6) -> Path:
    """root/train/<class> and root/val/<class> of 8x8 PNGs."""
    _image_folder(root, list(classes), per_class)
    return root


def ztxt_png(path: Path) -> Path:
    """An 8x8 PNG of 1 KB whose zTXt chunk unpacks past Pillow's MAX_TEXT_CHUNK."""
    info = PngImagePlugin.PngInfo()
    info.add_text("k", "A" * (PngImagePlugin.MAX_TEXT_CHUNK + 10), zip=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path, pnginfo=info)
    return path


def describe(cli: Cli, name: str, root: Path, *sets: str) -> CliResult:
    more = tuple(s for pair in (("--set", x) for x in sets) for s in pair)
    return cli("data", "describe", name, "--set", f"data.root={root}", *more, "--json")


# --- cause 1: Pillow's ValueError from a zTXt chunk -----------------------------------------


def test_a_png_over_pillows_text_cap_is_one_line_from_data_describe(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: "ValueError: Decompressed data too large for PngImagePlugin.MAX_TEXT_CHUNK",
    a traceback, exit 1."""
    root = write_folder(tmp_path / "if")
    bad = ztxt_png(root / "train" / "a" / "7.png")
    r = describe(cli, "imagefolder", root, "data.image_size=8")
    one_line(r, 2, str(bad), "cannot decode the image", "MAX_TEXT_CHUNK")


@pytest.mark.parametrize("in_memory", ["true", "false"], ids=["in_memory", "streamed"])
def test_a_png_over_pillows_text_cap_is_one_line_from_run(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, in_memory: str
) -> None:
    """Before: the same traceback; streamed, from loaders.channel_stats."""
    root = write_folder(tmp_path / "if")
    bad = ztxt_png(root / "train" / "a" / "7.png")
    sets = ("data.name=imagefolder", f"data.root={root}", "data.image_size=8")
    sets += (f"data.in_memory={in_memory}", "train.batch_size=2", "train.epochs=1")
    more = tuple(s for pair in (("--set", x) for x in sets) for s in pair)
    r = cli("run", str(tiny_exp(epochs=1)), *more)
    one_line(r, 2, str(bad), "cannot decode the image")


def test_a_voc_image_over_pillows_text_cap_is_refused_as_it_is_decoded(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: the ValueError escaped voc._header_size as the split loaded (`detect eval`,
    a traceback). Now the split loads (the image is refused as it is decoded, in its own
    line), and eval goes on to its next check: here the junk weights."""
    root = tmp_path / "det"
    voc.make_shapes(root, images=4, size=64)
    image_id = voc.read_split(root, "val")[0]
    annotation = voc.parse_annotation(root / "Annotations" / f"{image_id}.xml")
    image = root / "JPEGImages" / annotation.filename
    info = PngImagePlugin.PngInfo()
    info.add_text("k", "A" * (PngImagePlugin.MAX_TEXT_CHUNK + 10), zip=True)
    Image.new("RGB", (64, 64)).save(image, format="PNG", pnginfo=info)
    (tmp_path / "junk.pt").write_bytes(b"junk")
    r = cli("detect", "eval", str(root), "--weights", str(tmp_path / "junk.pt"), "--threads", "1")
    one_line(r, 2)
    assert "ValueError" not in r.err, r.err
    loaded = voc.load_split(root, "val")
    dataset = voc.VocDataset(root, loaded, voc.class_names(loaded))
    index = next(i for i, a in enumerate(loaded) if a.image_id == image_id)
    with pytest.raises(UserError, match="cannot decode the image") as caught:
        dataset[index]
    assert str(image) in str(caught.value)


def test_a_user_error_from_the_body_of_opened_image_is_not_a_decode_failure(
    tmp_path: Path,
) -> None:
    """opened_image now turns any Pillow exception into its line: a UserError of the reader
    itself (a size other than <size>, say) passes through as it is."""
    from dlperf.data.sources import opened_image

    path = tmp_path / "x.png"
    Image.new("RGB", (8, 8)).save(path)
    with pytest.raises(UserError, match=r"^its own words$"), opened_image(path):
        raise UserError("its own words")


# --- cause 3: CIFAR label names of any iterable ---------------------------------------------


def write_cifar(root: Path, names: Any) -> Path:
    """root/cifar-10-batches-py of 10 images a batch, labels 0 and 1, batches.meta `names`."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        entry = {"data": RNG.integers(0, 256, (10, 3072), dtype=np.uint8)}
        entry["labels"] = (np.arange(10) % 2).tolist()
        (folder / name).write_bytes(pickle.dumps(entry))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": names}))
    return folder / "batches.meta"


BAD_NAMES = [
    (np.array([["cat", "dog"]]), "an array of shape (1, 2)"),
    (np.array([["cat"], ["dog"]]), "an array of shape (2, 1)"),
    ({"cat", "dog"}, "a set"),
    ({"dog": 1, "cat": 0}, "a dict"),
    ("ab", "a str"),
    (b"ab", "a bytes"),
    (["cat", 1], "a list holding int"),
    (np.array([0, 1]), "an array of int64"),
    (np.array(["cat", None], dtype=object), "an array holding NoneType"),
]


@pytest.mark.parametrize(("names", "said"), BAD_NAMES, ids=[s for _, s in BAD_NAMES])
def test_cifar_label_names_that_are_no_list_of_names_are_refused(
    cli: Cli, tmp_path: Path, names: Any, said: str
) -> None:
    """Before: (1, 2) blamed the labels; (2, 1) named classes "['cat']"; a set's order
    followed PYTHONHASHSEED; a dict named label 0 "dog"; "ab" made classes 'a' and 'b'."""
    meta = write_cifar(tmp_path / "c", names)
    r = describe(cli, "cifar10", tmp_path / "c")
    one_line(r, 2, str(meta), f"holds 'label_names' as {said}, not a list of names")


GOOD_NAMES = [
    ["cat", "dog"],
    ("cat", "dog"),
    np.array(["cat", "dog"]),
    [b"cat", b"dog"],
    np.array([b"cat", b"dog"]),
    np.array(["cat", "dog"], dtype=object),
]
GOOD_IDS = ["list", "tuple", "array", "bytes", "S", "object"]


@pytest.mark.parametrize("names", GOOD_NAMES, ids=GOOD_IDS)
def test_cifar_label_names_as_a_list_tuple_or_1d_array_are_read(
    cli: Cli, tmp_path: Path, names: Any
) -> None:
    import json

    write_cifar(tmp_path / "c", names)
    r = describe(cli, "cifar10", tmp_path / "c")
    assert r.code == 0, r.err
    assert json.loads(r.out)["classes"] == ["cat", "dog"]


# --- cause 5: a link into a sibling class folder --------------------------------------------


def test_a_link_into_a_sibling_class_folder_is_refused_naming_it(cli: Cli, tmp_path: Path) -> None:
    """Before: class a counted b's images as its own as well; nothing was said."""
    root = write_folder(tmp_path / "if")
    deeper = root / "train" / "a" / "deeper"
    deeper.mkdir()
    (root / "train" / "a" / "1.png").rename(deeper / "1.png")
    link = root / "train" / "a" / "linkb"
    link.symlink_to("../b")
    r = describe(cli, "imagefolder", root, "data.image_size=8")
    one_line(r, 2, str(link), "class b", str(root / "train" / "b"))


def test_a_file_link_into_a_sibling_class_folder_is_refused_naming_it(
    cli: Cli, tmp_path: Path
) -> None:
    root = write_folder(tmp_path / "if")
    link = root / "val" / "b" / "copy.png"
    link.symlink_to(root / "val" / "a" / "0.png")
    r = describe(cli, "imagefolder", root, "data.image_size=8")
    one_line(r, 2, str(link), "class a", str(root / "val" / "a"))


def test_links_that_add_no_second_label_are_still_read(cli: Cli, tmp_path: Path) -> None:
    """A class folder that is itself a link, a link to images outside the set, and a link
    back up its own class (skipped, as before) are no second label."""
    import json

    root = write_folder(tmp_path / "if")
    elsewhere = write_folder(tmp_path / "elsewhere", classes=("c",))
    (root / "train" / "a" / "outside").symlink_to(elsewhere / "train" / "c")
    (root / "train" / "a" / "loop").symlink_to("..")
    (root / "train" / "b").rename(tmp_path / "b_real")
    (root / "train" / "b").symlink_to(tmp_path / "b_real")
    r = describe(cli, "imagefolder", root, "data.image_size=8")
    assert r.code == 0, r.err
    counts = json.loads(r.out)
    assert counts["classes"] == ["a", "b"]


# --- cause 10: Pillow's warnings and libtiff's lines ----------------------------------------


def damaged_tiff(path: Path) -> Path:
    """A TIFF whose PlanarConfiguration tag (284) claims more data than the file holds, and
    whose LZW strip is junk: Pillow warns "Tag data larger than file" (as it opens it and as
    it loads it), libtiff writes its own lines to fd 2, and the decode fails."""
    Image.fromarray(RNG.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
        path, compression="tiff_lzw"
    )
    data = bytearray(path.read_bytes())
    offset = int.from_bytes(data[4:8], "little")
    count = int.from_bytes(data[offset : offset + 2], "little")
    for n in range(count):
        entry = offset + 2 + 12 * n
        tag = int.from_bytes(data[entry : entry + 2], "little")
        if tag == 284:  # PlanarConfiguration: a count past the end of the file
            data[entry + 4 : entry + 8] = (10**6).to_bytes(4, "little")
        if tag == 273:  # StripOffsets: the strip is junk
            strip = int.from_bytes(data[entry + 8 : entry + 12], "little")
            data[strip : strip + 16] = b"\xff" * 16
    path.write_bytes(bytes(data))
    return path


def test_a_damaged_tiff_is_one_line_on_stderr_and_no_more(tmp_path: Path) -> None:
    """Before: Pillow's 2-line UserWarning twice, then libtiff's "TIFFFetchNormalTag:
    Incorrect count for "PlanarConfiguration"." and "tempfile.tif: ..." lines, then dlperf's
    line. A real process: libtiff writes to fd 2 itself, past any capture of sys.stderr."""
    root = write_folder(tmp_path / "if")
    bad = damaged_tiff(root / "train" / "a" / "z.tif")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "default"}
    command = [sys.executable, "-m", "dlperf", "data", "describe", "imagefolder"]
    command += ["--set", f"data.root={root}", *SMALL, "--out", str(tmp_path / "d")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {bad}: cannot decode the image"), done.stderr


def test_inferences_decoder_says_a_damaged_tiff_in_its_line_alone(tmp_path: Path) -> None:
    """`infer` and `detect run` decode through deploy.runtime.decode, which printed Pillow's
    warnings and libtiff's own fd-2 lines before its one line, as the readers did."""
    bad = damaged_tiff(tmp_path / "z.tif")
    script = (
        "from pathlib import Path\n"
        "from dlperf.deploy.runtime import decode\n"
        "from dlperf.errors import UserError\n"
        "try:\n"
        f"    decode(Path({str(bad)!r}).read_bytes(), 'z.tif')\n"
        "except UserError as e:\n"
        "    print(e)\n"
    )
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("z.tif"), done.stdout
    assert done.stderr == ""  # before: Pillow's UserWarning lines and libtiff's
