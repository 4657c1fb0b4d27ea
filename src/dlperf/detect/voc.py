"""Pascal VOC detection data: the on-disk layout, a torch Dataset, and AP@0.5 per class.

Layout (VOCdevkit/VOC2007 or anything shaped like it)::

    ROOT/Annotations/<id>.xml        filename, size, object/name/bndbox/difficult
    ROOT/JPEGImages/<id>.jpg
    ROOT/ImageSets/Main/<split>.txt  one image id per line

VOC boxes are 1-based inclusive pixel indices; they are read as continuous 0-based corners
(x1 = xmin - 1, y1 = ymin - 1, x2 = xmax, y2 = ymax), the convention torchvision's detectors
predict in, so plain IoU applies without the devkit's "+1".

AP follows the VOC devkit: detections of a class ranked by score over the whole split; one
that overlaps an unmatched ground-truth box with IoU >= 0.5 is a true positive, a second hit
on the same box is a false positive, a hit on a "difficult" box counts as neither, and
difficult boxes are left out of the number of positives. The precision-recall curve is
summarised by all-point interpolation (the area under the monotone precision envelope,
VOC2010 onwards) by default: it is exact for every recall level, where the VOC2007
11-point rule quantises recall to steps of 0.1 and jumps on a small validation set.
`method="11point"` reproduces the VOC2007 devkit's figures for comparison with papers.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import secrets
import shutil
import socket
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlperf import image_modes, stopping
from dlperf.errors import UserError, not_utf8
from dlperf.formatting import binary_size, few
from dlperf.parsing import name_text, plain_number
from dlperf.paths import link_loop, link_to_nothing, made_dir, not_regular, replaced, writing
from dlperf.system import machine_memory

BACKGROUND = "__background__"
AP_METHODS = ("area", "11point")
SHAPES = ("square", "disc")
LAYOUT = ("Annotations", "ImageSets/Main")  # the folders a VOC root holds


@dataclass
class VocObject:
    name: str
    box: tuple[float, float, float, float]  # x1, y1, x2, y2, continuous 0-based pixels
    difficult: bool


@dataclass
class VocAnnotation:
    image_id: str
    filename: str
    width: int
    height: int
    objects: list[VocObject]


def find_root(path: Path) -> Path:
    """ROOT itself, or ROOT/VOC2007 when given a VOCdevkit directory."""
    candidates = (path, path / "VOC2007")
    for candidate in candidates:
        if all((candidate / folder).is_dir() for folder in LAYOUT):
            return candidate
    _refuse_broken_links(path, [c / sub for c in candidates for sub in LAYOUT])
    raise UserError(
        f"{path} is not a VOC data set (no Annotations/ and ImageSets/Main/)",
        "give VOCdevkit/VOC2007 or a directory made by `dlperf detect make-shapes`",
    )


def _refuse_broken_links(path: Path, folders: list[Path]) -> None:
    """`path`, its VOC2007/ or a folder of the layout under either (`folders`) that is a loop
    of symbolic links or a link to nothing (a drive not mounted): is_dir is False of both as
    of no folder there, and "not a VOC data set" sent the user to look for the folder a
    link, pointed right, leads to."""
    for folder in (path, path / "VOC2007", *folders):
        if (chain := link_loop(folder)) is not None:
            raise UserError(
                f"{folder} is a loop of symbolic links ({chain})",
                "point one of the links at the VOC data set: VOCdevkit/VOC2007, or a directory "
                "made by `dlperf detect make-shapes`",
            )
        if (target := link_to_nothing(folder)) is not None:
            raise UserError(
                f"{folder} is a link to {target}, which is not there",
                f"mount or restore {target}, or give the VOC data set's folder",
            )


def read_split(root: Path, split: str) -> list[str]:
    path = root / "ImageSets" / "Main" / f"{split}.txt"
    _regular(path, "a text file of image ids, one a line")
    if not path.is_file():
        _refuse_incomplete(root)
        raise UserError(f"no split file {path}")
    try:
        # utf-8-sig: Notepad and PowerShell start a UTF-8 file with a byte order mark, which
        # read as UTF-8 became part of the first id, then blamed on its "missing" annotation.
        # splitlines() takes CRLF and CR line ends as well.
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise not_utf8(path, e) from None
    lines: dict[str, list[int]] = {}  # each id's lines, from 1, in the order first listed
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            lines.setdefault(_line_id(root, line), []).append(number)
    if not lines:
        raise UserError(f"split file {path} lists no images")
    _refuse_repeats(path, lines)
    return list(lines)


def _refuse_incomplete(root: Path) -> None:
    """Refuse a set without a split list, as an earlier make-shapes stopped partway left it
    (images and annotations, an empty ImageSets/Main): "no split file .../train.txt" gave no
    way out of it."""
    main = root / "ImageSets" / "Main"
    if not _lists(main):
        raise UserError(
            f"{root} is an incomplete VOC set: {main} holds no split lists",
            f"remove {root} and make it again with `dlperf detect make-shapes`, "
            "or give a whole VOC set",
        )


def _lists(main: Path) -> bool:
    """Whether `main` (ImageSets/Main) holds a split list."""
    return main.is_dir() and any(p.suffix == ".txt" for p in main.iterdir())


# A line of VOC's per-class split files (aeroplane_train.txt): an id, then its flag, -1, 0 or
# 1 ("000005 -1", "000007  1").
_FLAGGED = re.compile(r"(.*?\S)\s+(-1|0|1)")


def _line_id(root: Path, line: str) -> str:
    """The image id of a split file's `line`: the whole line, stripped, or, in VOC's per-class
    files, the line before its flag. Cut at the first space, an id holding one ("img 0000")
    was read as "img" and blamed on a missing img.xml. A line that ends in a flag is an id
    and a flag unless the whole line names an annotation."""
    whole = line.strip()
    flagged = _FLAGGED.fullmatch(whole)
    # os.path.exists: False, not an OSError, for a name too long for the file system
    if flagged and not os.path.exists(root / "Annotations" / f"{whole}.xml"):
        return flagged.group(1)
    return whole


def _refuse_repeats(path: Path, lines: dict[str, list[int]]) -> None:
    """Refuse an id on more than one of its `lines`: the image would be trained twice an
    epoch, and `evaluate`, which keys the truth by id, would count its truth once and each
    copy's detections again (every second hit a false positive: perfect predictions scored
    mAP 0.83). Dropping the copy would leave a file that says one thing and means another."""
    repeated = [(image_id, at) for image_id, at in lines.items() if len(at) > 1]
    if not repeated:
        return
    image_id, at = repeated[0]
    listed = ", ".join(map(str, at[:-1])) + f" and {at[-1]}"
    others = len(repeated) - 1
    more = f" (and {others} other id{'s' if others > 1 else ''} more than once)" if others else ""
    raise UserError(
        f"{path}: image id {image_id} is listed on lines {listed}{more}",
        "list each image once: a repeated id is trained twice and its detections counted twice",
    )


def _text(node: ET.Element, tag: str, source: object, hint: str | None = None) -> str:
    text = (node.findtext(tag) or "").strip()
    if not text:  # no such element, one without text, or only whitespace
        raise UserError(f"{source}: missing <{tag}>", hint)
    return text


# What <difficult> and <truncated> may say: VOC writes 1 and 0; some tools true and false.
FLAGS = {"0": False, "1": True, "false": False, "true": True}
CORNERS = ("xmin", "ymin", "xmax", "ymax")
# The elements this reader reads, each of which VOC gives its parent once.
ONCE = {
    "annotation": ("filename", "size"),
    "size": ("width", "height"),
    "object": ("name", "bndbox", "truncated", "difficult"),
    "bndbox": CORNERS,
}
VOC_TAGS = {tag for tags in ONCE.values() for tag in tags} | {"object"}


def parse_annotation(path: Path, images: Path | None = None) -> VocAnnotation:
    """One annotation file, every field checked as it is read, so that a mistake in it is
    one line naming the file, the object (its place among the file's objects, from 1, and its
    name) and the field, before anything is trained: the size in positive whole pixels
    ("64.0" is 64) and, given the folder of `images`, the image's own (`check_size`); each
    corner a finite number inside the image, 0 to the width or height (0, which a tool
    writing 0-based corners puts at the edge, is read as the first pixel, 1; a side within
    the first pixel with a fraction for a corner is fractions of the image, refused), xmin <=
    xmax and ymin <= ymax (VOC's corners are inclusive: equal ones are a box one pixel wide,
    which torchvision's positive width takes); difficult and truncated 1 or 0 (true or
    false, any case)."""
    try:
        tree = ET.parse(path)
    except (ET.ParseError, OSError) as e:
        raise UserError(f"{path}: not a readable VOC annotation ({e})") from None
    node = tree.getroot()
    _local_names(node)
    _one_each(node, ONCE["annotation"], str(path))
    if (size := node.find("size")) is not None:
        _one_each(size, ONCE["size"], f"{path}: <size>")
    width, height = (_size(node, side, path) for side in ("width", "height"))
    filename = _text(node, "filename", path)
    if images is not None:
        # Before the boxes: they are checked against <size>, so a <size> that is not the
        # image's is the mistake to name (a box outside it may be inside the image).
        image = images / filename
        _regular(image, "the image")
        stored, turned = _header_size(image, (width, height))
        check_size(path, image, width, height, stored, turned)
    objects = [
        _object(obj, f"{path}: object {n}", width, height)
        for n, obj in enumerate(node.iter("object"), 1)
    ]
    return VocAnnotation(
        image_id=path.stem, filename=filename, width=width, height=height, objects=objects
    )


def _local_names(root: ET.Element) -> None:
    """Rename every element of `root` to its local name ("{http://...}size" to "size"), and
    VOC's elements in another case to VOC's ("Object" to "object"): an annotation whose root
    declares a namespace (xmlns="...", some labelling tools write one) holds VOC's elements
    all the same, and found by their plain names they were told missing ("missing
    <size/width>") though there; an <Object> was not read at all, its box trained as
    background."""
    for element in root.iter():
        if isinstance(element.tag, str):
            local = element.tag.rpartition("}")[2]
            element.tag = local.lower() if local.lower() in VOC_TAGS else local


def _one_each(node: ET.Element, tags: tuple[str, ...], where: str) -> None:
    """Refuse a second of the elements `tags` in `node`: the first was read and the rest
    dropped without a word, an object's second box trained as background."""
    for tag in tags:
        if (n := len(node.findall(tag))) > 1:
            raise UserError(
                f"{where}: {n} <{tag}> elements, where VOC has one",
                "give each box its own <object>" if tag == "bndbox" else f"keep the <{tag}> meant",
            )


def _header_size(image: Path, said: tuple[int, int]) -> tuple[tuple[int, int] | None, int]:
    """The image's size as its header says, no pixel decoded (Pillow opens lazily), and its
    EXIF orientation (`orientation`) where that size is not `said`, the <size> (only then
    does `check_size` need it: Pillow's PNG reads its EXIF by decoding the whole image, 0.1 s
    for a 12-megapixel one, at every image of a split); no size when it is missing or cannot
    be opened: that is refused, in its own line, as it is decoded."""
    from dlperf.data.sources import opened_image

    if not image.is_file():
        return None, 1
    try:
        with opened_image(image) as im:
            size = (int(im.size[0]), int(im.size[1]))
            return size, orientation(im) if size != said else 1
    except UserError:
        return None, 1


# EXIF orientations (tag 0x0112) that show the stored pixels turned a quarter, width and
# height swapped: 5 to 8 (1 to 4 keep them, mirrored or turned a half at most).
_QUARTER_TURNS = (5, 6, 7, 8)


def orientation(im: Any) -> int:
    """The EXIF orientation of the open image `im`, 1 (as stored) without one. Pixels are
    read as stored, as torchvision reads them, whatever the orientation says."""
    try:
        value = im.getexif().get(0x0112, 1)
    except Exception:  # a damaged EXIF block: Pillow raises what its parser met
        return 1
    return value if isinstance(value, int) else 1


def check_size(
    xml: Path,
    image: Path,
    width: int,
    height: int,
    size: tuple[int, int] | None,
    turned: int = 1,
) -> None:
    """Refuse an annotation whose <size> is not its image's `size` (width, height): its boxes
    were checked against <size>, so against another image they may lie outside it, and
    trained as they are. No size (an image not read yet) passes. `turned`, the image's EXIF
    orientation, names the case of a <size> that is the image as a viewer shows it (turned a
    quarter), whose boxes were drawn on that view: the fix is to turn the pixels, not to
    redraw the boxes."""
    if (
        size is not None
        and size != (width, height)  # a square image's <size> is its own either way
        and turned in _QUARTER_TURNS
        and (size[1], size[0]) == (width, height)
    ):
        raise UserError(
            f"{xml}: <size> says {width} x {height}, the size {image} shows at (its EXIF "
            f"orientation {turned} turns it), but its pixels are stored {size[0]} x {size[1]}, "
            "which is how they are read",
            "turn the pixels themselves, keeping the boxes: "
            "PIL.ImageOps.exif_transpose(Image.open(f)).save(f); or write the stored size, "
            f"{size[0]} x {size[1]}, in <size> and the boxes in the stored pixels",
        )
    if size is not None and size != (width, height):
        raise UserError(
            f"{xml}: <size> says {width} x {height}, but {image} is {size[0]} x {size[1]}",
            "write the image's own size in <size>, and its boxes in that image's pixels",
        )


def _size(node: ET.Element, side: str, path: Path) -> int:
    text = _text(node, f"size/{side}", path)
    try:
        value = plain_number(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1 and value.is_integer()):
        raise UserError(
            f"{path}: <size> <{side}> is '{text}', not a positive whole number",
            "write the image's size in whole pixels",
        )
    return int(value)


def _object(obj: ET.Element, where: str, width: int, height: int) -> VocObject:
    _one_each(obj, ONCE["object"], where)
    name = _text(obj, "name", where, "give each object the name of its class")
    where = f"{where} ({name})"
    if (box := obj.find("bndbox")) is not None:
        _one_each(box, CORNERS, f"{where} <bndbox>")
    if name == BACKGROUND:  # label 0: as a class it was trained, and named twice in the labels
        raise UserError(
            f"{where}: {BACKGROUND} is the name dlperf gives the background (label 0), not a class",
            "rename the object's class",
        )
    corners = {}
    for corner in CORNERS:
        text = _text(obj, f"bndbox/{corner}", where)
        try:
            value = plain_number(text)
        except ValueError:
            raise UserError(
                f"{where}: <{corner}> is '{text}', not a number",
                "write the corner's pixel as a number",
            ) from None
        if not math.isfinite(value):
            raise UserError(
                f"{where}: <{corner}> is {text}, not a finite number",
                "write the corner's pixel as a number",
            )
        corners[corner] = (text, value)
    for low, high in (("xmin", "xmax"), ("ymin", "ymax")):
        if corners[low][1] > corners[high][1]:
            raise UserError(
                f"{where}: <{low}> {corners[low][0]} is past <{high}> {corners[high][0]}",
                "swap them: xmin, ymin is the box's top left corner, xmax, ymax its bottom right",
            )
    for corner, (text, value) in corners.items():
        if not 0 <= value <= (width if corner[0] == "x" else height):
            raise UserError(
                f"{where}: <{corner}> {text} is outside the {width} x {height} image",
                "VOC corners are pixels 1 to <width> and <height>: fix the box, or <size>",
            )
    for low, high in (("xmin", "xmax"), ("ymin", "ymax")):
        # A side within the first pixel with a fraction for a corner (a 0-based tool's edge is
        # a whole 0): fractions of the image, which read as pixels all collapsed to the
        # top-left pixel below; a box touching the far edges ends at 1, 1.
        (low_text, start), (high_text, end) = corners[low], corners[high]
        if end <= 1 and (0 < start < 1 or 0 < end < 1):
            raise UserError(
                f"{where}: <{low}> {low_text} to <{high}> {high_text} lies within the image's "
                "first pixel: corners from 0 to 1 are fractions of the image, not pixels",
                "VOC corners are pixels 1 to <width> and <height>: multiply x by "
                f"{width} and y by {height}",
            )
    _flag(obj, "truncated", where)  # not used, but a file with a broken flag is a broken file
    # A corner under 1 (a tool writing 0-based corners puts 0 at the image's edge) is read as
    # VOC's first pixel, 1: read as it is, xmin 0 became x1 = -1, and 0,0,0,0 a box wholly
    # outside the image.
    xmin, ymin, xmax, ymax = (max(corners[c][1], 1.0) for c in CORNERS)
    return VocObject(name, (xmin - 1, ymin - 1, xmax, ymax), _flag(obj, "difficult", where))


def _flag(obj: ET.Element, tag: str, where: str) -> bool:
    """<difficult> or <truncated>: none, or an empty one, is 0."""
    text = (obj.findtext(tag) or "").strip()
    if text.lower() not in {"", *FLAGS}:
        raise UserError(
            f"{where}: <{tag}> is '{text}', not 1 or 0", "write 1 or 0 (true or false are read too)"
        )
    return FLAGS.get(text.lower(), False)


def load_split(root: Path, split: str) -> list[VocAnnotation]:
    annotations = []
    owners: dict[Path, Path] = {}  # each image file, resolved, and the XML that names it
    for image_id in read_split(root, split):
        path = root / "Annotations" / f"{image_id}.xml"
        _regular(path, "a VOC annotation (XML)")
        if not path.is_file():
            spaced = any(c.isspace() for c in image_id)
            raise UserError(
                f"{root}: split {split} lists {repr(image_id) if spaced else image_id} but "
                f"{path} is missing",
                "a split file's line is one image id, the whole line (or an id and a flag, "
                "-1, 0 or 1, as VOC's per-class files write)"
                if spaced
                else f"add the file, or remove {image_id} from ImageSets/Main/{split}.txt",
            )
        # Refused as the split is loaded, before any training: each image is decoded only
        # when its batch comes, but a FIFO in its place, or a size other than <size>, is
        # refused now. A missing or unreadable one is left to then, as before.
        annotation = parse_annotation(path, root / "JPEGImages")
        _refuse_shared_image(root, split, owners, path, image_file(root, annotation))
        annotations.append(annotation)
    return annotations


def image_file(root: Path, annotation: VocAnnotation) -> Path:
    """The file `annotation`'s <filename> names, resolved: "../JPEGImages/x.jpg", an absolute
    path or a link to it are the same file as "x.jpg". os.path.realpath, not Path.resolve:
    a link loop is left to the image's read to name, where resolve() raised RuntimeError."""
    return Path(os.path.realpath(root / "JPEGImages" / annotation.filename))


def _refuse_shared_image(
    root: Path, split: str, owners: dict[Path, Path], xml: Path, image: Path
) -> None:
    """Refuse a second annotation (`xml`) of the split whose <filename> names an image an
    earlier one (in `owners`) names: a copy-pasted XML scored its boxes on the other's
    pixels and counted that image twice, while its own image was never read. `owners` is
    added to."""
    first = owners.setdefault(image, xml)
    if first != xml:
        raise UserError(
            f"{root}: split {split}: {first} and {xml} both name the image {image}",
            "give each annotation its own image in <filename> (VOC's is <id>.jpg)",
        )


def _regular(path: Path, what: str) -> None:
    """Refuse a `path` that is there but is not a regular file (a FIFO, a directory, a
    device), stat'ed and never opened: opening a FIFO waits for a writer, for ever when there
    is none. Nothing there is left to the caller's "missing"."""
    kind = not_regular(path)
    if kind is not None:
        raise UserError(f"{path} is not a regular file ({kind})", f"replace it with {what}")


def class_names(*splits: list[VocAnnotation]) -> list[str]:
    """Label names by id: background first, then the object names sorted (for VOC2007
    this is the devkit's own order, aeroplane ... tvmonitor)."""
    names = {obj.name for split in splits for a in split for obj in a.objects}
    _refuse_normalised_twins(splits)
    _refuse_case_twins(splits)
    return [BACKGROUND, *sorted(names)]


def _refuse_case_twins(splits: tuple[list[VocAnnotation], ...]) -> None:
    """Refuse object names equal but for case (`Square` in one annotation, `square` in the
    rest): they trained as two classes, the stray one an AP row of nan, without a word. Each
    spelling is named with the annotation it is first met in, as Unicode twins are."""
    met: dict[str, str] = {}  # each spelling, and the id of the annotation it is first in
    for split in splits:
        for a in split:
            for obj in a.objects:
                met.setdefault(obj.name, a.image_id)
    spellings: dict[str, list[str]] = {}
    for name in met:
        spellings.setdefault(unicodedata.normalize("NFC", name).casefold(), []).append(name)
    twins = [sorted(group) for group in spellings.values() if len(group) > 1]
    if not twins:
        return
    shown = few(
        [
            " and ".join(f"{name_text(n)!r} (Annotations/{met[n]}.xml)" for n in group)
            for group in sorted(twins)
        ]
    )
    raise UserError(
        f"object names differ only in case, {shown}: they would be classes of their own, "
        "each with its own output and AP row",
        "write each class's <name> in one spelling",
    )


def _refuse_normalised_twins(splits: tuple[list[VocAnnotation], ...]) -> None:
    """Refuse object names equal but for their Unicode normalisation (café as NFC,
    'caf\\xe9', and as NFD, 'cafe\\u0301', typed on macOS): they show alike, yet were two
    classes, each with its own output and its own AP row, printed alike. Each spelling is
    named with the annotation it is first met in; the rule is the image folders' and npz's
    (`normalised_twins`)."""
    from dlperf.data.sources import _form, normalised_twins

    met: dict[str, str] = {}  # each spelling, and the id of the annotation it is first in
    for split in splits:
        for a in split:
            for obj in a.objects:
                met.setdefault(obj.name, a.image_id)
    twins = normalised_twins(met)
    if not twins:
        return
    shown = few(
        [
            f"{name_text(unicodedata.normalize('NFC', one))} as {_form(one)} {one!a} "
            f"(Annotations/{met[one]}.xml) and {_form(two)} {two!a} (Annotations/{met[two]}.xml)"
            for one, two in twins
        ]
    )
    raise UserError(
        f"object names differ only in Unicode normalisation, {shown}: they "
        "would be two classes that show as one name",
        "write each class's name in one spelling: unicodedata.normalize('NFC', name) of each "
        "<name> gives one",
    )


def check_measurable(root: Path, split: str, annotations: list[VocAnnotation]) -> None:
    """Refuse a split to measure AP on that holds no object AP counts (none, or difficult
    ones only, which are left out of the positives): every class's AP, and the mAP, would be
    NaN, reported after the whole training without a word."""
    _check_objects(root, split, annotations, "measure AP on", "AP", "--val-split")


def check_trainable(root: Path, split: str, annotations: list[VocAnnotation]) -> None:
    """Refuse a split to train on that holds no object to learn (none, or difficult ones
    only, which `VocDataset` leaves out of the targets): the detector would learn the
    background alone, and an "after" AP be reported as if it had been trained."""
    _check_objects(root, split, annotations, "train on", "training", "--train-split")


def _check_objects(
    root: Path, split: str, annotations: list[VocAnnotation], to: str, who: str, option: str
) -> None:
    objects = [o for a in annotations for o in a.objects]
    if any(not o.difficult for o in objects):
        return
    count = len(annotations)
    has = "image has" if count == 1 else "images have"
    which = f"only difficult ones, which {who} leaves out" if objects else "none"
    raise UserError(
        f"{root}: the {split} split has no objects to {to} (its {count} {has} {which})",
        f"annotate objects in its images, or name a split that has some with {option}",
    )


def check_classes_trained(
    root: Path,
    train_split: str,
    train: list[VocAnnotation],
    val_split: str,
    val: list[VocAnnotation],
) -> None:
    """Refuse to fine-tune where a class has objects AP counts in the `val` split but no
    object to learn in the `train` split (none, or difficult ones only, which `VocDataset`
    leaves out of the targets): it would be trained with no example, and its "after" AP
    (about 0) averaged into the mAP without a word. A class that only the train split has
    is fine: its AP is NaN, left out of the mAP, as `evaluate` says."""
    trained = {o.name for a in train for o in a.objects if not o.difficult}
    missing = sorted({o.name for a in val for o in a.objects if not o.difficult} - trained)
    if not missing:
        return
    count = len(missing)
    listed = ", ".join(name_text(n) for n in missing[:3])
    listed += f" and {count - 3} more" if count > 3 else ""
    one = count == 1
    classes = "1 class of the" if one else f"{count} classes of the"
    has, their, them = ("has", "its", "it") if one else ("have", "their", "them")
    never = "a class" if one else "classes"
    raise UserError(
        f"{root}: {classes} {val_split} split {has} no objects to train on in the "
        f"{train_split} split (difficult ones are left out): {listed}; {their} AP after "
        f"fine-tuning would be of {never} never trained",
        f"annotate {them} in images of the {train_split} split, name a training split that "
        f"has {them} with --train-split, or remove {them} from the {val_split} split's "
        "annotations",
    )


def check_apart(
    root: Path,
    train_split: str,
    train: list[VocAnnotation],
    val_split: str,
    val: list[VocAnnotation],
) -> None:
    """Refuse to train on images AP is measured on: the same split named for both, or a
    train split holding an image of the val split, by id (make-shapes' and VOC's trainval
    holds val) or by the file its <filename> names. AP on trained images is inflated, and
    was reported without a word."""
    if train_split == val_split:
        what = f"{train_split} is both the training and the validation split"
    else:
        shared = _shared(train_split, train, val_split, val, root)
        if not shared:
            return
        count = len(shared)
        listed = ", ".join(shared[:3]) + (f" and {count - 3} more" if count > 3 else "")
        image = "image" if count == 1 else "images"
        what = f"the {train_split} and {val_split} splits share {count} {image} ({listed})"
    raise UserError(
        f"{root}: {what}: AP on {val_split} would be measured on images trained on",
        _apart_hint(root, train_split, train, val_split, val),
    )


def _shared(
    train_split: str,
    train: list[VocAnnotation],
    val_split: str,
    val: list[VocAnnotation],
    root: Path,
) -> list[str]:
    """The images of `val` that `train` holds too, by id or by the file their <filename>
    names (an id of each split naming one image), each as its id or a phrase naming both."""
    ids = {a.image_id for a in train}
    files = {image_file(root, a): a.image_id for a in train}
    shared = []
    for a in val:
        image = image_file(root, a)
        if a.image_id in ids:
            shared.append(a.image_id)
        elif image in files:
            shared.append(
                f"{val_split}'s {a.image_id} names the image of {train_split}'s "
                f"{files[image]}, {image}"
            )
    return shared


def _apart_hint(
    root: Path,
    train_split: str,
    train: list[VocAnnotation],
    val_split: str,
    val: list[VocAnnotation],
) -> str:
    """The fix: VOC's (and make-shapes') own train split in place of the one given, or its
    val split, where it is there, has objects and shares no image with the other split;
    else which options to change."""
    if "train" not in (train_split, val_split):
        try:
            candidate = load_split(root, "train")
            check_trainable(root, "train", candidate)
        except UserError:  # not there, or refused: not a fix to offer
            pass
        else:
            if not _shared("train", candidate, val_split, val, root):
                return "train on a split without them: --train-split train"
    if "val" not in (train_split, val_split):
        try:
            candidate = load_split(root, "val")
            check_measurable(root, "val", candidate)
        except UserError:
            pass
        else:
            if not _shared(train_split, train, "val", candidate, root):
                return "measure on a split without them: --val-split val"
    return (
        f"name a training split with none of the {val_split} images with --train-split, "
        "or another split to measure on with --val-split"
    )


class VocDataset:
    """(image [3, H, W] float in [0, 1], target {"boxes", "labels"}) as torchvision's
    detectors take them. Images are decoded per item: VOC2007 in memory would take ~3 GB.
    Difficult objects are left out of training targets, as the SSD and Faster R-CNN
    recipes do; evaluation reads them from `annotations` instead."""

    def __init__(self, root: Path, annotations: list[VocAnnotation], labels: list[str]) -> None:
        self.root = root
        self.annotations = annotations
        self.index = {name: i for i, name in enumerate(labels)}

    def __len__(self) -> int:
        return len(self.annotations)

    def __getitem__(self, i: int) -> tuple[Any, dict[str, Any]]:
        import torch

        from dlperf.data.sources import opened_image

        a = self.annotations[i]
        path = self.root / "JPEGImages" / a.filename
        _regular(path, "the image")  # one replaced since the split was loaded
        if not path.is_file():
            raise UserError(f"{self.root}: {a.image_id}.xml names {a.filename}, which is missing")
        # a corrupt or truncated file, or one over Pillow's cap, is one line naming it
        with opened_image(path) as im:
            # Replaced since the split was loaded: its boxes were checked against <size>.
            check_size(
                self.root / "Annotations" / f"{a.image_id}.xml",
                path,
                a.width,
                a.height,
                im.size,
                orientation(im) if im.size != (a.width, a.height) else 1,  # read when refused
            )
            # image_modes.rgb, as `detect run`, `serve` and the classifiers' readers decode it:
            # convert("RGB") clips a 16-bit grey image at 255 (a white picture).
            rgb = image_modes.rgb(im, str(path))
            pixels = np.array(rgb, dtype=np.uint8)  # writable, for torch
        image = torch.from_numpy(pixels).permute(2, 0, 1).float().div_(255)
        kept = [o for o in a.objects if not o.difficult and o.name in self.index]
        boxes = torch.tensor([o.box for o in kept], dtype=torch.float32).reshape(-1, 4)
        labels = torch.tensor([self.index[o.name] for o in kept], dtype=torch.int64)
        return image, {"boxes": boxes, "labels": labels}


# --- average precision -------------------------------------------------------------------


def iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one box against (N, 4) boxes, continuous corner coordinates."""
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return np.asarray(inter / np.maximum(area + areas - inter, np.finfo(np.float64).eps))


def curve_ap(recall: np.ndarray, precision: np.ndarray, method: str = "area") -> float:
    """Area under a precision-recall curve, the VOC way (see the module docstring)."""
    if method == "11point":
        points = [precision[recall >= t].max(initial=0.0) for t in np.linspace(0, 1, 11)]
        return float(np.mean(points))
    r = np.concatenate([[0.0], recall, [1.0]])
    p = np.concatenate([[0.0], precision, [0.0]])
    p = np.maximum.accumulate(p[::-1])[::-1]  # the envelope: best precision at recall >= r
    steps = np.nonzero(r[1:] != r[:-1])[0]
    return float(np.sum((r[steps + 1] - r[steps]) * p[steps + 1]))


def class_ap(
    detections: list[tuple[str, float, tuple[float, ...]]],
    truths: dict[str, tuple[np.ndarray, np.ndarray]],
    iou_threshold: float = 0.5,
    method: str = "area",
) -> float:
    """AP of one class. `detections`: (image_id, score, box); `truths`: image_id ->
    (boxes (N, 4), difficult (N,) bool). NaN when the class has no non-difficult object."""
    positives = sum(int((~difficult).sum()) for _, difficult in truths.values())
    if positives == 0:
        return math.nan
    matched = {image_id: np.zeros(len(b), dtype=bool) for image_id, (b, _) in truths.items()}
    # A stable sort keeps ties in input order, as the devkit's MATLAB sort does.
    ranked = sorted(detections, key=lambda d: -d[1])
    tp = np.zeros(len(ranked))
    fp = np.zeros(len(ranked))
    for k, (image_id, _, box) in enumerate(ranked):
        boxes, difficult = truths.get(image_id, (np.zeros((0, 4)), np.zeros(0, dtype=bool)))
        overlaps = iou(np.asarray(box, dtype=np.float64), boxes) if len(boxes) else np.zeros(0)
        best = int(np.argmax(overlaps)) if len(overlaps) else -1
        if best < 0 or overlaps[best] < iou_threshold:
            fp[k] = 1
        elif difficult[best]:
            continue
        elif not matched[image_id][best]:
            tp[k], matched[image_id][best] = 1, True
        else:
            fp[k] = 1
    tp, fp = np.cumsum(tp), np.cumsum(fp)
    recall = tp / positives
    precision = tp / np.maximum(tp + fp, np.finfo(np.float64).eps)
    return curve_ap(recall, precision, method)


def evaluate(
    annotations: list[VocAnnotation],
    predictions: list[dict[str, np.ndarray]],
    labels: list[str],
    iou_threshold: float = 0.5,
    method: str = "area",
    classes: list[str] | None = None,
) -> dict[str, Any]:
    """Per-class AP and mAP. predictions[i] = {"boxes", "scores", "labels"} for
    annotations[i], boxes in that image's pixels; `labels` names the predicted label ids.
    AP is given for each of `classes` (default: every label but the background); a class no
    label id names has no detections. mAP averages the classes that have objects in the
    split."""
    if method not in AP_METHODS:
        raise UserError(f"unknown AP method '{method}'", f"choose {' or '.join(AP_METHODS)}")
    ap: dict[str, float] = {}
    for name in classes if classes is not None else labels[1:]:
        ids = {i for i, label in enumerate(labels) if label == name and i != 0}
        truths = {}
        for a in annotations:
            objs = [o for o in a.objects if o.name == name]
            truths[a.image_id] = (
                np.asarray([o.box for o in objs], dtype=np.float64).reshape(-1, 4),
                np.asarray([o.difficult for o in objs], dtype=bool),
            )
        detections = [
            (a.image_id, float(score), tuple(float(v) for v in box))
            for a, p in zip(annotations, predictions, strict=True)
            for box, score, lab in zip(p["boxes"], p["scores"], p["labels"], strict=True)
            if int(lab) in ids
        ]
        ap[name] = class_ap(detections, truths, iou_threshold, method)
    valid = [v for v in ap.values() if not math.isnan(v)]
    return {"ap": ap, "map": float(np.mean(valid)) if valid else math.nan, "method": method}


# --- a synthetic VOC set -----------------------------------------------------------------


def _annotation_xml(image_id: str, size: int, objects: list[VocObject]) -> str:
    lines = [
        "<annotation>",
        "  <folder>shapes</folder>",
        f"  <filename>{image_id}.jpg</filename>",
        f"  <size><width>{size}</width><height>{size}</height><depth>3</depth></size>",
        "  <segmented>0</segmented>",
    ]
    for o in objects:
        x1, y1, x2, y2 = o.box
        lines += [
            "  <object>",
            f"    <name>{o.name}</name>",
            "    <pose>Unspecified</pose>",
            "    <truncated>0</truncated>",
            f"    <difficult>{int(o.difficult)}</difficult>",
            # Back to VOC's 1-based inclusive indices.
            f"    <bndbox><xmin>{int(x1) + 1}</xmin><ymin>{int(y1) + 1}</ymin>"
            f"<xmax>{int(x2)}</xmax><ymax>{int(y2)}</ymax></bndbox>",
            "  </object>",
        ]
    lines.append("</annotation>")
    return "\n".join(lines) + "\n"


def make_shapes(
    root: Path, images: int = 200, size: int = 96, val_fraction: float = 0.25, seed: int = 0
) -> dict[str, Any]:
    """Write a VOC-layout set of filled squares and discs on noisy backgrounds, 1-3 per
    image, non-overlapping. About one object in ten is drawn in a colour close to the
    background and marked difficult, which is what VOC's flag means. The set is written in a
    hidden folder of `root`'s own (`STAGING`) and moved into place once whole: a stop leaves
    `root` as it was (none, where it made it)."""
    if images < 2:
        raise UserError("make-shapes needs at least 2 images (one for train, one for val)")
    if size < 64:
        raise UserError(f"image size {size} is too small", "use --size 64 or more")
    if size > JPEG_MAX:  # else found by libjpeg only once the whole image is made (minutes)
        raise UserError(
            f"--size {size}: a JPEG holds at most {JPEG_MAX:,} pixels a side",
            f"give --size {JPEG_MAX} or less",
        )
    if seed < 0:  # NumPy's own "expected non-negative integer" was a traceback
        raise UserError(f"--seed must be ≥ 0, got {seed}")
    _refuse_held(root)
    _check_memory(size)
    _check_room(root, images, size)
    with made_dir(root):
        _remove_abandoned(root)
        staging = root / f"{STAGING}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            with _named_in(root, staging):
                summary = _write_shapes(staging, images, size, val_fraction, seed)
            with stopping.shielded():  # a stop must not leave some folders moved, not all
                _refuse_held(root)  # another make-shapes put its set there meanwhile
                for sub in SHAPES_LAYOUT:  # ImageSets last: a set with its lists is whole
                    os.replace(staging / sub, root / sub)
        finally:
            with stopping.shielded():  # a second Ctrl-C must not leave half of it
                shutil.rmtree(staging, ignore_errors=True)
    return {"root": str(root), **summary}


def _write_shapes(
    root: Path, images: int, size: int, val_fraction: float, seed: int
) -> dict[str, Any]:
    """make-shapes' set, written into `root` (a folder of its own, not there yet)."""
    from PIL import ImageDraw

    rng = np.random.default_rng(seed)
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / sub).mkdir(parents=True)
    ids, counts = [], {name: 0 for name in SHAPES}
    for n in range(images):
        image_id = f"{n:06d}"
        base = rng.uniform(60, 190, size=3)
        image = _noisy(rng, base, size)
        draw = ImageDraw.Draw(image)
        objects: list[VocObject] = []
        for _ in range(int(rng.integers(1, 4))):
            side = int(rng.integers(size // 7, int(size // 2.5)))
            for _attempt in range(20):
                x1, y1 = (int(v) for v in rng.integers(0, size - side, size=2))
                box = (float(x1), float(y1), float(x1 + side), float(y1 + side))
                if all(iou(np.asarray(box), np.asarray([o.box])).item() == 0 for o in objects):
                    break
            else:
                continue
            difficult = rng.random() < 0.1
            offset = rng.uniform(12, 20) if difficult else rng.uniform(70, 120)
            colour = tuple(int(v) for v in np.clip(base + offset * rng.choice([-1, 1]), 0, 255))
            name = str(rng.choice(SHAPES))
            # PIL's shapes include the end pixel; box corners are continuous.
            xy = (box[0], box[1], box[2] - 1, box[3] - 1)
            (draw.rectangle if name == "square" else draw.ellipse)(xy, fill=colour)
            objects.append(VocObject(name, box, bool(difficult)))
            counts[name] += 1
        _save_jpeg(image, root / "JPEGImages" / f"{image_id}.jpg")
        del draw, image  # before the next is made: two at once took twice the memory
        (root / "Annotations" / f"{image_id}.xml").write_text(
            _annotation_xml(image_id, size, objects)
        )
        ids.append(image_id)
    n_val = max(1, round(images * val_fraction))
    splits = {"train": ids[:-n_val], "val": ids[-n_val:], "trainval": ids}
    for split, members in splits.items():
        (root / "ImageSets" / "Main" / f"{split}.txt").write_text("\n".join(members) + "\n")
    return {
        "images": images,
        "size": size,
        "objects": counts,
        "train": len(splits["train"]),
        "val": len(splits["val"]),
    }


# Where make-shapes writes its set until it is whole: a hidden folder in ROOT per writer,
# STAGING-HOST-PID-RANDOM, whose folders are moved into ROOT at the end (renames: one file
# system, and ROOT's own permissions). Written in ROOT itself, a stopped make-shapes left 103
# images and no split lists, which a rerun refused as "a VOC set" and finetune as "no split
# file". One a SIGKILLed make-shapes of this host left (its pid is gone) is removed by the next.
STAGING = ".make-shapes"
_STAGED = re.compile(rf"{re.escape(STAGING)}-(?P<host>.+)-(?P<pid>[0-9]+)-[0-9a-f]{{8}}")
# The folders of a make-shapes set, in the order they are moved into place: ImageSets, with
# its split lists, last, so that a set found with its lists is whole.
SHAPES_LAYOUT = ("Annotations", "JPEGImages", "ImageSets")


def _refuse_held(root: Path) -> None:
    """Refuse a `root` holding a VOC set, whole or not: its images and annotations would be
    replaced, and its lists name only the new ids beside the old files left. Empty folders are
    no set: the new set's folders take their place. A file or a link in the place of `root`
    or of a folder is refused before the work, not by the move at its end."""
    if root.exists() and not root.is_dir():  # mkdir's "Not a directory" named ROOT/Annotations
        raise UserError(f"{root} is not a folder", "give a new or empty folder for the set")
    for sub in SHAPES_LAYOUT:
        path = root / sub
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            # A link would be replaced by the move, not filled where it leads.
            kind = "a symbolic link" if path.is_symlink() else "not a folder"
            raise UserError(
                f"{path} is {kind}: make-shapes moves its own {sub} folder there",
                "move it, or give a new or empty folder",
            )
    held = [root / sub for sub in sorted(SHAPES_LAYOUT) if _holds(root / sub)]
    if not held:
        return
    named = ", ".join(map(str, held))
    main = root / "ImageSets" / "Main"
    if not _lists(main):
        raise UserError(
            f"{root} holds an incomplete VOC set ({named}): no split lists in {main}",
            f"remove {root} and make the set again, or give a new or empty folder",
        )
    raise UserError(f"{root} already holds a VOC set ({named})", "give a new or empty folder")


def _remove_abandoned(root: Path) -> None:
    """Remove the hidden folders in `root` of make-shapes runs that are gone: those of this
    host whose process has ended (SIGKILLed: no cleanup ran). Another host's may be in use (a
    shared file system): it stays. Not removing one costs disk, not the set: a failure here
    is not make-shapes'."""
    from dlperf.procs import process_alive

    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            staged = _STAGED.fullmatch(entry.name)
            if staged is None or not entry.is_dir(follow_symlinks=False):
                continue
            if process_alive({"host": staged["host"], "pid": int(staged["pid"])}) is False:
                shutil.rmtree(entry.path, ignore_errors=True)


@contextlib.contextmanager
def _named_in(root: Path, staging: Path) -> Iterator[None]:
    """An OSError of a file in `staging` (a full disk, a file size limit) named as the file
    of `root` it was to become: the one error line names the set's file the user asked for."""
    try:
        yield
    except OSError as e:
        inside = os.fspath(staging)
        for attr in ("filename", "filename2"):
            name = getattr(e, attr)
            if isinstance(name, str) and (name == inside or name.startswith(inside + os.sep)):
                setattr(e, attr, os.fspath(root) + name[len(inside) :])
        raise


# Values of noise drawn at a time: made for the whole image at once, the float64 noise and its
# two temporaries took 72 bytes a pixel (19 GB at --size 20000, until the kernel killed it).
_NOISE_BLOCK = 2**18
# Bytes a pixel of --size making one image takes: Pillow's RGB image (4 bytes a pixel) and its
# JPEG encoded in memory (up to 1) with the copy written (1 more); 4.8 measured at 8,000 px.
MAKE_BYTES = 6


def _noisy(rng: np.random.Generator, base: np.ndarray, size: int) -> Any:
    """A size x size RGB image of `base` plus Gaussian noise (sigma 18), clipped to 0..255,
    drawn a block of rows at a time: the same values, from the same generator, as the whole
    image drawn at once, in memory that follows the image's own."""
    from PIL import Image

    image = Image.new("RGB", (size, size))
    rows = max(1, _NOISE_BLOCK // (size * 3))
    for top in range(0, size, rows):
        noise = rng.normal(0, 18, size=(min(rows, size - top), size, 3))
        image.paste(Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8)), (0, top))
    return image


# libjpeg's largest side (JPEG_MAX_DIMENSION), which Pillow's writer refuses past.
JPEG_MAX = 65_500


def _check_memory(size: int) -> None:
    """Refuse, before any folder is made, a --size whose one image cannot be made in this
    machine's memory (as data.image_size is refused where one decoded image cannot fit)."""
    memory = machine_memory()
    needed = MAKE_BYTES * size * size
    if needed <= memory:
        return
    raise UserError(
        f"--size {size}: one image of {size}×{size} takes about {binary_size(needed)} to "
        f"make, more than this machine's {binary_size(memory)} of memory",
        f"give --size {math.isqrt(memory // MAKE_BYTES)} or less",
    )


def _save_jpeg(image: Any, path: Path) -> None:
    """`image` as a JPEG at `path`, whole or not at all. Pillow's JPEG encoder writes to the
    raw descriptor and takes a short write for success: under a file size limit (ulimit -f)
    or on a full disk it left a cut image and no error. Encoded in memory, then written by
    Python, which raises (the one-line error names `path`); aside, then renamed."""
    encoded = io.BytesIO()
    image.save(encoded, format="JPEG", quality=95)
    with writing(path), replaced(path) as aside:
        aside.write_bytes(encoded.getvalue())


# A file's last block, which it fills whatever its size (4 KiB on ext4 and most file systems).
BLOCK = 4096


def image_bytes(size: int) -> int:
    """About what one image of make-shapes takes on disk, over-estimated: its JPEG (of noisy
    pixels, at quality 95: 0.6-0.8 bytes a pixel, taken as 1) and its XML (about 600 bytes),
    each to the end of its last block."""
    return size * size + 2 * BLOCK


def _check_room(root: Path, images: int, size: int) -> None:
    """Refuse, before writing, a set whose files would not fit the free space of the disk
    `root` is on: --images 10^9 wrote until the disk was full (about 8 TB at --size 64)."""
    there = next(p for p in (root.absolute(), *root.absolute().parents) if p.exists())
    usage = shutil.disk_usage(there)
    free, each = usage.free, image_bytes(size)
    # /proc and /sys report a size of 0: they hold no files of ours, which mkdir says.
    if usage.total == 0 or images * each <= free:
        return
    fits = free // each
    raise UserError(
        f"{images:,} images of {size}×{size} take about {binary_size(images * each)}, "
        f"and {there} has {binary_size(free)} free: about {fits:,} fit",
        f"give --images {fits} or fewer, or a folder on a disk with room"
        if fits >= 2
        else "free space on the disk, or give a folder on another",
    )


def _holds(folder: Path) -> bool:
    """Whether `folder` is there with something in it (a file in its place is
    `_refuse_held`'s to refuse)."""
    return folder.is_dir() and any(folder.iterdir())
