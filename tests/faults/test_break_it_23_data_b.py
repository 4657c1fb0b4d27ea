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

from dlperf.detect import voc
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_14_voc import finetune, runs
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
