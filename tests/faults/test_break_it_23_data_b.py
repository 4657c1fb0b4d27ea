"""Break-it round 23, P2 causes C2 and C8: VOC split files and numbers in data files.

C2: an image id listed twice in a VOC split file was kept twice: `evaluate` keys the ground
truth by image id, so the truth counted once while each copy's detections counted again, and
every second hit was a false positive (perfect predictions scored mAP 0.833, `detect eval`
halved a model's mAP "on 4 val images" of 2, without a word; a train split trained the image
twice an epoch). A repeated id is now refused as the split is read, in one line naming the
split file, the id and the lines it is on.
C8: numbers were read with Python's float(), which takes '_' as a digit separator: a VOC
corner `<xmin>1_0</xmin>` was read as 10, a `<size>` width `6_4` as 64, and a converge CSV's
step `2_0` fitted as 20. No tool writes them: such a field is a typo or two fields run
together. Each is refused in the line that already says "not a number".
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.converge import curve
from dlperf.converge.tables import read_numbers
from dlperf.detect import voc
from dlperf.errors import UserError
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult
from tests.faults.test_break_it_14_voc import NUMBER, SIZE, edit, finetune, first, runs
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
REPEAT = "list each image once: a repeated id is trained twice and its detections counted twice"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """make-shapes' 6 images of 64 px (4 train, 2 val), made once: each test edits a copy."""
    root = tmp_path_factory.mktemp("made") / "det"
    voc.make_shapes(root, images=6, size=64, val_fraction=0.34)
    return root


def copied(made: Path, into: Path) -> Path:
    return Path(shutil.copytree(made, into / "det"))


# --- C2: an id listed twice in a split file ---------------------------------------------------


def test_a_repeated_id_is_refused_naming_the_file_the_id_and_its_lines(
    made: Path, tmp_path: Path
) -> None:
    """Blank lines count as lines: the numbers are those an editor shows."""
    root = copied(made, tmp_path)
    split = root / "ImageSets" / "Main" / "train.txt"
    a, b, c, d = split.read_text().split()
    split.write_text(f"{a}\n{b}\n\n{a}\n{c}\n{d}\n{a}\n")
    with pytest.raises(UserError) as caught:
        voc.read_split(root, "train")
    assert (caught.value.message, caught.value.hint) == (
        f"{split}: image id {a} is listed on lines 1, 4 and 7",
        REPEAT,
    )


def test_every_repeated_id_is_counted_in_the_line(made: Path, tmp_path: Path) -> None:
    root = copied(made, tmp_path)
    split = root / "ImageSets" / "Main" / "train.txt"
    ids = split.read_text().split()
    split.write_text("\n".join(ids + ids[:3]) + "\n")  # the whole first three again
    with pytest.raises(UserError) as caught:
        voc.read_split(root, "train")
    assert caught.value.message == (
        f"{split}: image id {ids[0]} is listed on lines 1 and 5 (and 2 other ids more than once)"
    )


def test_an_id_repeated_with_other_fields_or_line_ends_is_the_same_id(
    made: Path, tmp_path: Path
) -> None:
    """VOC's per-class files put a flag after the id; Windows ends lines with CRLF."""
    root = copied(made, tmp_path)
    split = root / "ImageSets" / "Main" / "val.txt"
    a, b = split.read_text().split()
    split.write_bytes(f"{a}  1\r\n{b} -1\r\n{a}\r\n".encode())
    with pytest.raises(UserError) as caught:
        voc.read_split(root, "val")
    assert caught.value.message == f"{split}: image id {a} is listed on lines 1 and 3"


def test_detect_eval_refuses_a_doubled_split_before_reading_the_weights(
    cli: Cli, made: Path, tmp_path: Path
) -> None:
    """The case of the report: the val split written twice. Before: mAP halved, "on 4 val
    images" of 2. Refused before the weights are read (a junk file would be the line)."""
    root = copied(made, tmp_path)
    split = root / "ImageSets" / "Main" / "val.txt"
    a = split.read_text().split()[0]
    split.write_text(split.read_text() * 2)
    (tmp_path / "junk.pt").write_bytes(b"junk")
    result = cli(
        "detect", "eval", str(root), "--weights", str(tmp_path / "junk.pt"), "--threads", "1"
    )  # fmt: skip
    one_line(result, 2, f"{split}: image id {a} is listed on lines 1 and 3", REPEAT)
    assert runs(tmp_path) == []


def test_detect_finetune_refuses_a_repeated_train_id_before_training(
    cli: Cli, made: Path, tmp_path: Path
) -> None:
    root = copied(made, tmp_path)
    split = root / "ImageSets" / "Main" / "train.txt"
    ids = split.read_text().split()
    split.write_text("\n".join([*ids, ids[2]]) + "\n")
    result = finetune(cli, root, tmp_path)
    one_line(result, 2, f"{split}: image id {ids[2]} is listed on lines 3 and 5")
    assert runs(tmp_path) == []
    assert not (tmp_path / "x.pt").exists()


def test_perfect_predictions_on_a_split_read_score_one(made: Path, tmp_path: Path) -> None:
    """What a split that loads is measured as: each image's own boxes score mAP 1."""
    annotations = voc.load_split(made, "val")
    labels = voc.class_names(annotations)
    predictions = []
    for a in annotations:
        predictions.append(
            {
                "boxes": np.asarray([o.box for o in a.objects], dtype=np.float64).reshape(-1, 4),
                "scores": np.ones(len(a.objects)),
                "labels": np.asarray([labels.index(o.name) for o in a.objects]),
            }
        )
    assert voc.evaluate(annotations, predictions, labels)["map"] == 1.0


# --- C8: '_' in numbers -----------------------------------------------------------------------

UNDERSCORED = ["1_0", "2_0", " 1_0 ", "1_0.5", "1e1_0", "_1"]


@pytest.mark.parametrize("text", UNDERSCORED)
def test_a_voc_corner_with_an_underscore_is_not_a_number(
    made: Path, tmp_path: Path, text: str
) -> None:
    """Before: <xmin>1_0</xmin> was read as 10 (float() takes digit separators)."""
    root = copied(made, tmp_path)
    xml = first(root, "train")
    edit(xml, xmin=text)
    with pytest.raises(UserError) as caught:
        voc.parse_annotation(xml)
    shown = text.strip()
    assert (caught.value.message, caught.value.hint) == (
        f"{xml}: object 1 (square): <xmin> is '{shown}', not a number",
        NUMBER,
    )


@pytest.mark.parametrize("side", ["width", "height"])
def test_a_voc_size_with_an_underscore_is_not_a_whole_number(
    made: Path, tmp_path: Path, side: str
) -> None:
    """Before: <width>6_4</width> was read as 64."""
    root = copied(made, tmp_path)
    xml = first(root, "train")
    edit(xml, **{side: "6_4"})
    with pytest.raises(UserError) as caught:
        voc.parse_annotation(xml)
    assert (caught.value.message, caught.value.hint) == (
        f"{xml}: <size> <{side}> is '6_4', not a positive whole number",
        SIZE,
    )


def test_finetune_refuses_the_reports_annotation_in_one_line(
    cli: Cli, made: Path, tmp_path: Path
) -> None:
    """The report's under.xml: <xmin>1_0</xmin> ... <xmax>2_0</xmax>."""
    root = copied(made, tmp_path)
    xml = first(root, "train")
    edit(xml, xmin="1_0", xmax="2_0")
    result = finetune(cli, root, tmp_path)
    one_line(result, 2, f"{xml}: object 1 (square): <xmin> is '1_0', not a number", NUMBER)
    assert runs(tmp_path) == []


def _curve(path: Path, last: str) -> Path:
    """The report's cv/under.csv: 19 steps of a falling loss, then the step `last`."""
    rows = "".join(f"{k},{1 / (0.1 * k + 1) + 0.2:.6f}\n" for k in range(1, 20))
    path.write_text(f"step,loss\n{rows}{last},0.29\n")
    return path


def test_converge_fit_refuses_a_step_with_an_underscore(cli: Cli, tmp_path: Path) -> None:
    """Before: the step '2_0' was fitted as 20."""
    path = _curve(tmp_path / "under.csv", "2_0")
    r = cli("converge", "fit", "--csv", str(path), "--x", "step", "--y", "loss")
    one_line_error(r, f"{path}:21: 'step' is not a number: '2_0'")


@pytest.mark.parametrize("text", UNDERSCORED)
def test_read_numbers_refuses_any_underscore(tmp_path: Path, text: str) -> None:
    """The one reader of converge's curves and speed tables."""
    path = tmp_path / "t.csv"
    path.write_text(f"step,loss\n1,2\n2,{text}\n")
    with pytest.raises(UserError) as caught:
        read_numbers(path, ["step", "loss"])
    assert caught.value.message == f"{path}:3: 'loss' is not a number: {text!r}"


def test_numbers_that_tools_write_are_still_read(tmp_path: Path) -> None:
    """Signs, exponents, a leading '.', spaces around a field: what float() should take."""
    path = _curve(tmp_path / "ok.csv", "20")
    rows = path.read_text().splitlines()
    rows[1:4] = ["1, 1.0e0", "2,+.95 ", "3,9.1E-1"]
    path.write_text("\n".join(rows) + "\n")
    c = curve.from_csv(path, "step", "loss")
    assert c.steps.tolist() == list(range(1, 21))
    assert c.values.tolist()[:3] == [1.0, 0.95, 0.91]
