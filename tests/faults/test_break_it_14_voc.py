"""Break-it round 14, cause 9: a VOC annotation's mistakes are one line each, before any run.

make-shapes' set, its first train XML edited, then `detect finetune ... --size 96`. Before:
xmin > xmax ended in torchvision's AssertionError traceback at the first step, exit 1, the run
stored failed; `<width>64.0</width>` in a ValueError traceback (the size's int() was outside
the parser's try); `<xmin>nan</xmin>` was accepted and the NaN loss blamed on train.lr;
`<difficult>true</difficult>` was told as "a box coordinate is not a number"; xmax 5000 on a
64 px image was accepted, exit 0. Now the one parser (voc.parse_annotation, which finetune and
eval both read a split through) checks every field as it reads it: the line names the XML
file, the object (its 1-based place among the file's objects, and its name) and the field,
exit 2, nothing stored. Kind where tools differ: a whole size written as "64.0" is 64,
difficult and truncated take true/false as well as 1/0, a box may touch the image's edge (0
as well as VOC's 1, for tools that write 0-based corners) and be one pixel wide (xmin = xmax:
VOC's corners are inclusive).
"""

from __future__ import annotations

import copy
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.detect import voc
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
Shapes = Callable[[Path], Path]

OBJECT = {"name": "square", "xmin": "4", "ymin": "1", "xmax": "21", "ymax": "18"}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """make-shapes' 8 images of 64 px (6 train, 2 val), made once: each test edits a copy."""
    root = tmp_path_factory.mktemp("made") / "det"
    voc.make_shapes(root, images=8, size=64)
    return root


@pytest.fixture
def shapes(made: Path) -> Shapes:
    def copied(into: Path) -> Path:
        return Path(shutil.copytree(made, into / "det"))

    return copied


def edit(xml: Path, index: int = 0, **fields: str) -> None:
    """Set the fields of the file's object `index` (0-based; copies of the first are added
    when the file has fewer) to OBJECT, then to `fields`: name, a box corner, difficult or
    truncated, or the size's width or height."""
    tree = ET.parse(xml)
    node = tree.getroot()
    objects = node.findall("object")
    while len(objects) <= index:
        objects.append(copy.deepcopy(objects[0]))
        node.append(objects[-1])
    where = {"width": "size/width", "height": "size/height"}
    for corner in ("xmin", "ymin", "xmax", "ymax"):
        where[corner] = f"bndbox/{corner}"
    for key, value in {**OBJECT, **fields}.items():
        parent = node if key in ("width", "height") else objects[index]
        found = parent.find(where.get(key, key))
        assert found is not None, key
        found.text = value
    tree.write(xml)


def first(root: Path, split: str) -> Path:
    return root / "Annotations" / f"{voc.read_split(root, split)[0]}.xml"


def runs(tmp_path: Path) -> list[object]:
    return list(RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}").list_runs())


def finetune(cli: Cli, root: Path, tmp_path: Path) -> CliResult:
    return cli(
        "detect", "finetune", str(root), "--size", "96", "--epochs", "1", "--batch", "4",
        "--threads", "1", "--out", str(tmp_path / "x.pt"),
    )  # fmt: skip


SWAP = "swap them: xmin, ymin is the box's top left corner, xmax, ymax its bottom right"
OUTSIDE = "VOC corners are pixels 1 to <width> and <height>: fix the box, or <size>"
NUMBER = "write the corner's pixel as a number"
FLAG = "write 1 or 0 (true or false are read too)"
SIZE = "write the image's size in whole pixels"

CASES = [
    ({"xmin": "21", "xmax": "4"}, "object 1 (square): <xmin> 21 is past <xmax> 4", SWAP),
    ({"ymin": "18", "ymax": "1"}, "object 1 (square): <ymin> 18 is past <ymax> 1", SWAP),
    ({"xmin": "nan"}, "object 1 (square): <xmin> is nan, not a finite number", NUMBER),
    ({"ymax": "inf"}, "object 1 (square): <ymax> is inf, not a finite number", NUMBER),
    ({"xmax": "abc"}, "object 1 (square): <xmax> is 'abc', not a number", NUMBER),
    ({"xmax": "5000"}, "object 1 (square): <xmax> 5000 is outside the 64 x 64 image", OUTSIDE),
    ({"ymin": "-3"}, "object 1 (square): <ymin> -3 is outside the 64 x 64 image", OUTSIDE),
    ({"difficult": "yes"}, "object 1 (square): <difficult> is 'yes', not 1 or 0", FLAG),
    ({"truncated": "2"}, "object 1 (square): <truncated> is '2', not 1 or 0", FLAG),
    ({"width": "64.5"}, "<size> <width> is '64.5', not a positive whole number", SIZE),
    ({"width": "0"}, "<size> <width> is '0', not a positive whole number", SIZE),
    ({"height": "inf"}, "<size> <height> is 'inf', not a positive whole number", SIZE),
    ({"height": "big"}, "<size> <height> is 'big', not a positive whole number", SIZE),
    ({"name": " "}, "object 1: missing <name>", "give each object the name of its class"),
]


@pytest.mark.parametrize(("fields", "said", "fix"), CASES, ids=[s for _, s, _ in CASES])
def test_a_bad_field_is_one_line_naming_the_file_object_and_field(
    cli: Cli, shapes: Shapes, tmp_path: Path, fields: dict[str, str], said: str, fix: str
) -> None:
    root = shapes(tmp_path)
    xml = first(root, "train")
    edit(xml, **fields)
    result = finetune(cli, root, tmp_path)
    one_line(result, 2, f"{xml}: {said}", fix)
    assert runs(tmp_path) == []
    assert not (tmp_path / "x.pt").exists()


def test_the_object_is_named_by_its_place_and_name(
    cli: Cli, shapes: Shapes, tmp_path: Path
) -> None:
    root = shapes(tmp_path)
    xml = first(root, "train")
    edit(xml, 1, name="disc", xmin="30", xmax="12")
    result = finetune(cli, root, tmp_path)
    one_line(result, 2, f"{xml}: object 2 (disc): <xmin> 30 is past <xmax> 12", SWAP)
    assert runs(tmp_path) == []


def test_eval_reads_through_the_same_parser_and_says_the_same(
    cli: Cli, shapes: Shapes, tmp_path: Path
) -> None:
    """Refused before the weights are read: a junk file would be the line otherwise."""
    root = shapes(tmp_path)
    xml = first(root, "val")
    edit(xml, xmin="nan")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    result = cli(
        "detect", "eval", str(root), "--weights", str(tmp_path / "junk.pt"), "--threads", "1"
    )  # fmt: skip
    one_line(result, 2, f"{xml}: object 1 (square): <xmin> is nan, not a finite number", NUMBER)
    assert runs(tmp_path) == []


KIND = {"width": "64.0", "difficult": "true", "truncated": "False"}


def test_what_tools_write_for_a_good_file_is_read(shapes: Shapes, tmp_path: Path) -> None:
    """A whole size as "64.0"; true/false flags; a box on the image's edges, 0 or 1 to 64;
    a box one pixel wide (inclusive corners: xmin = xmax)."""
    root = shapes(tmp_path)
    xml = first(root, "train")
    edit(xml, xmin="0", ymin="1", xmax="64", ymax="64", **KIND)
    edit(xml, 1, name="disc", xmin="7", xmax="7", ymin="5.5", ymax="9.5", difficult="FALSE")
    [a] = [a for a in voc.load_split(root, "train") if a.image_id == xml.stem]
    assert (a.width, a.height) == (64, 64) and isinstance(a.width, int)
    assert [(o.name, o.box, o.difficult) for o in a.objects[:2]] == [
        ("square", (0.0, 0.0, 64.0, 64.0), True),  # xmin 0 as 1 (round 26): x1 was -1
        ("disc", (6.0, 4.5, 7.0, 9.5), False),
    ]
    for o in a.objects:  # every box has a positive width and height, as torchvision asserts
        x1, y1, x2, y2 = o.box
        assert x2 > x1 and y2 > y1


@pytest.mark.parametrize("command", ["finetune", "eval"])
def test_the_commands_go_past_such_a_file(
    cli: Cli, shapes: Shapes, tmp_path: Path, command: str
) -> None:
    """Through the CLI: the line is the next file's, which the split lists but is missing,
    read after the edited one (eval reads --weights after the split: no file is needed)."""
    root = shapes(tmp_path)
    split = "train" if command == "finetune" else "val"
    xml = first(root, split)
    edit(xml, xmax="64", **KIND)
    listed = root / "ImageSets" / "Main" / f"{split}.txt"
    listed.write_text(f"{xml.stem}\nlost\n")
    args = ["--weights", str(tmp_path / "junk.pt")] if command == "eval" else ["--threads", "1"]
    result = cli("detect", command, str(root), *args)
    one_line(
        result, 2, f"split {split} lists lost but {root / 'Annotations' / 'lost.xml'} is missing"
    )
    assert runs(tmp_path) == []


def test_the_parser_says_the_same_as_the_cli(shapes: Shapes, tmp_path: Path) -> None:
    root = shapes(tmp_path)
    xml = first(root, "train")
    edit(xml, difficult="true ", truncated=" 1")
    assert voc.parse_annotation(xml).objects[0].difficult
    edit(xml, difficult="0.5")
    with pytest.raises(UserError) as caught:
        voc.parse_annotation(xml)
    assert (
        str(caught.value) == f"{xml}: object 1 (square): <difficult> is '0.5', not 1 or 0 ({FLAG})"
    )
