"""The unlabelled images of `dlperf distill --unlabeled SPEC`.

SPEC is NAME[:KEY=VALUE,...]: a data set with data.* keys (e.g. "mnist5k:image_size=8"), all
of whose images become the pool; or NAME:holdout=F, the share F of the experiment's own
training split that data.holdout sets aside (the labelled runs then train on the rest). The
pool keeps the set's labels, hidden from the teacher, to measure pseudo-label precision; an
npz file may have none, or mark an image without one by -1 (as STL-10's unlabelled split does).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from dlperf.config import DataConfig, Experiment, build_experiment, parse_value
from dlperf.config.distill import Unlabeled
from dlperf.data import DATASETS, ImageData, Split, load_data
from dlperf.data.sources import NoImageSize, TooLargeToDecode, read_npz, resize
from dlperf.errors import UserError
from dlperf.formatting import few
from dlperf.parsing import did_you_mean, name_text, quoted
from dlperf.progress import Reporter

EXAMPLE = "mnist5k:image_size=8 or digits:holdout=0.5"
_PAIRS = re.compile(r",(?=\s*[A-Za-z_]\w*\s*=)")  # a comma that starts a KEY=


@dataclass
class Pool:
    spec: str
    images: torch.Tensor  # uint8 N,C,H,W
    hidden: torch.Tensor | None  # labels of the images as the teacher's, when it has them all
    digest: str  # of the images and labels: a selection is reused only for the same pool
    unmeasured: str | None = None  # why `hidden` is None, for the study to say
    notes: list[str] = field(default_factory=list)  # its reader's, of the set's files


def _given(spec: str) -> Unlabeled:
    """`spec` with where it was given; a plain string is the --unlabeled flag's."""
    return spec if isinstance(spec, Unlabeled) else Unlabeled(spec)


def parse(spec: str, exp: Experiment) -> tuple[DataConfig, DataConfig]:
    """(the pool's data config, the labelled runs' data config) of `spec`."""
    name, _, rest = spec.partition(":")
    given = _given(spec)
    where = given.where()
    if not name.strip():
        raise UserError(f"{where}: no data set named", f"e.g. {EXAMPLE}")
    pairs = _pairs(rest, where) if rest else {}
    if "holdout" in pairs:
        _check_holdout(name, pairs, exp, given)
        if not pairs["holdout"]:
            raise UserError(f"{where}: holdout must be above 0")
        raw = exp.to_dict()
        raw["data"]["holdout"] = pairs["holdout"]
        labelled = build_experiment(raw, where).data
        return labelled, labelled
    pool = build_experiment({"data": {"name": name, **pairs}}, where).data
    # The roots as the file system resolves them: "./if/base", "if/base/" and a link to it
    # were taken as another set, and the student pre-trained on the test images (a copy is
    # caught in `load`, by its images).
    same_root = _real(pool.root) == _real(exp.data.root)
    if pool.name == exp.data.name and same_root and pool.name != "synthetic":
        raise UserError(
            f"{where}: these are the experiment's labelled images",
            f"hold a share of them out: {given.given(f'{name}:holdout=0.5')}",
        )
    return pool, exp.data


def _check_holdout(name: str, pairs: dict[str, Any], exp: Experiment, given: Unlabeled) -> None:
    """NAME:holdout=F names the experiment's own set and no other key: say which is wrong (a
    set not the experiment's was said to take "no other keys", only holdout given)."""
    where, own = given.where(), exp.data.name
    use = given.given(f"{own}:holdout={pairs['holdout']}")
    if name not in DATASETS:  # as load_data says it of a set it has no reader for
        hint = did_you_mean(name, DATASETS, f"choose one of {', '.join(DATASETS)}", quote=True)
        raise UserError(f"{where}: unknown dataset {quoted(name)}", hint)
    if name != own:
        raise UserError(
            f"{where}: holdout sets aside a share of the experiment's own {own}, not of {name}",
            f"use {use}, or all of {name}'s images: {given.given(name)}",
        )
    if len(pairs) > 1:
        raise UserError(
            f"{where}: holdout sets aside a share of the experiment's own {own} "
            "and takes no other keys",
            f"use {use}",
        )


def _real(root: str) -> str:
    """`root` as the file system resolves it, from the working directory as data.root is."""
    return os.path.realpath(os.path.expanduser(root))


def _pairs(text: str, where: str) -> dict[str, Any]:
    """'image_size=8,shape=[3,8,8]' as {'image_size': 8, 'shape': [3, 8, 8]}: split at the
    commas that start a KEY=, so that list values keep theirs."""
    pairs: dict[str, Any] = {}
    for part in _PAIRS.split(text):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UserError(f"{where}: expected KEY=VALUE after the name", f"e.g. {EXAMPLE}")
        pairs[key.strip()] = parse_value(value.strip())
    return pairs


def load(spec: str, cfg: DataConfig, labelled: ImageData, reporter: Reporter | None = None) -> Pool:
    """The pool of `spec` (parsed into `cfg`), checked against the images the teacher takes:
    `labelled`, the experiment's data as its runs see them; `reporter` hears its reading (an
    image folder of 10^5 files takes minutes)."""
    given = _given(spec)
    where = given.where()
    if cfg.holdout and labelled.unlabeled is not None:
        data, held = labelled, labelled.unlabeled
    else:
        try:
            data = _read(cfg, reporter)
        except NoImageSize:  # its line names data.image_size, which the experiment may set
            raise UserError(
                f"{where}: {cfg.name} needs the pool's image size",
                f"set {given.given(_sized(spec, labelled.shape[-1]))}, the teacher's",
            ) from None
        except TooLargeToDecode as e:  # its line names data.image_size: the pool's is meant
            raise UserError(
                f"{where}: image_size {cfg.image_size}: {e.said}",
                f"set {given.given(_sized(spec, labelled.shape[-1]))}, the teacher's",
            ) from None
        splits = [data.train, data.val, data.test]
        if not data.in_memory:
            raise UserError(
                f"{where}: {data.name} does not fit in memory",
                "give it a smaller image_size or set in_memory=true",
            )
        held = Split(
            torch.cat([s.labels for s in splits]),
            torch.cat([s.images for s in splits if s.images is not None]),
        )
    assert held.images is not None
    if len(held) == 0 and cfg.holdout:
        raise UserError(f"{where}: no images", "hold out a larger share")
    if len(held) == 0:
        named = cfg.root if cfg.name == "npz" else cfg.name
        raise UserError(f"{where}: {named} holds no images", "give a pool of images")
    _check_shape(given, tuple(held.images.shape[1:]), labelled.shape)
    if held is not labelled.unlabeled:
        _check_unseen(given, held.images, labelled)
    hidden, unmeasured = _as_teachers(held.labels, data.classes, labelled.classes)
    digest = hashlib.sha256(held.images.numpy().tobytes())
    # the labels as the teacher numbers them: a pool's own order of the same names is the
    # same pool (and a pool in the teacher's order keeps the digest it had)
    digest.update((held.labels if hidden is None else hidden).numpy().tobytes())
    # A held-out share's notes are the labelled data's, which the study says already.
    notes = [] if data is labelled else data.notes
    return Pool(spec, held.images, hidden, digest.hexdigest()[:16], unmeasured, notes)


def _as_teachers(
    labels: torch.Tensor, classes: list[str], teachers: list[str]
) -> tuple[torch.Tensor | None, str | None]:
    """The pool's `labels` (indices into its `classes`) as indices into the teacher's
    classes, by name, to measure pseudo-label precision with; or None and why not. Compared
    as lists, a pool listing the teacher's names in another order (its labels numbered by its
    own list) lost its precision, nothing said. A pool with some of the teacher's classes
    maps as well: a kept image is right when the teacher's label is its own."""
    unlabelled = int(labels.lt(0).sum())
    if unlabelled == len(labels) > 0:
        return None, "pseudo-label precision is not measured: the pool has no labels"
    if unlabelled:  # a pool of labelled and unlabelled (-1) images
        has = "has" if unlabelled == 1 else "have"
        return None, (
            f"pseudo-label precision is not measured: {unlabelled} of the pool's "
            f"{len(labels)} images {has} no label (-1)"
        )
    if classes == teachers:  # the teacher's own list: the labels as they are
        return labels, None
    index = {name: i for i, name in enumerate(teachers)}
    foreign = [name for name in classes if name not in index]
    if foreign:
        listed = few([name_text(n) for n in foreign])
        theirs = ", ".join(name_text(n) for n in teachers[:10])
        theirs += ", ..." if len(teachers) > 10 else ""
        classes_are = f"class {listed} is" if len(foreign) == 1 else f"classes {listed} are"
        return None, (
            f"pseudo-label precision is not measured: the pool's {classes_are} not among the "
            f"teacher's ({theirs})"
        )
    mapping = torch.tensor([index[name] for name in classes], dtype=torch.int64)
    return mapping[labels], None


def _check_unseen(spec: str, images: torch.Tensor, labelled: ImageData) -> None:
    """Refuse a pool that holds any of the images the experiment measures on (its val and
    test splits), byte for byte: a copy of its folder, or a set that contains it, would have
    the student pre-train on the images it is then tested on, and its accuracy and the
    pseudo-labels' precision mean nothing. Images are compared as the teacher takes them
    (both at the experiment's size), by a hash of each."""
    pool = [_image_hash(image) for image in images]
    measured = {
        name: {_image_hash(image) for image in split.images}
        for name in ("val", "test")
        if (split := getattr(labelled, name)) is not None and split.images is not None
    }
    found = [name for name, hashes in measured.items() if not hashes.isdisjoint(pool)]
    if found:
        given = _given(spec)
        seen = set().union(*(measured[name] for name in found))
        inside = sum(digest in seen for digest in pool)
        raise UserError(
            f"{given.where()}: {inside} of its {len(images)} images are the experiment's "
            f"{' and '.join(found)} images, byte for byte",
            "give a pool of other images, or hold a share of the training images out: "
            f"{given.given(f'{labelled.name}:holdout=0.5')}",
        )


def _image_hash(image: torch.Tensor) -> bytes:
    """A digest of one image's pixels (and shape: a 2x8 and an 8x2 image are not one)."""
    digest = hashlib.blake2b(image.numpy().tobytes(), digest_size=16)
    digest.update(repr(tuple(image.shape)).encode())
    return digest.digest()


def _read(cfg: DataConfig, reporter: Reporter | None) -> ImageData:
    if cfg.name != "npz":
        return load_data(cfg, reporter)
    # An npz pool may have no labels (truly unlabelled): -1 marks them unknown.
    notes: list[str] = []  # its arrays dlperf does not read: names saved as 'names', say
    images, labels, classes = read_npz(cfg.root, pool=True, notes=notes)
    known = labels if labels is not None else torch.full((len(images),), -1, dtype=torch.int64)
    empty = Split(known[:0], images[:0])
    channels, height, width = images.shape[1:]  # read_npz checked N,C,H,W
    data = ImageData(
        "npz",
        Split(known, images),
        empty,
        empty,
        len(classes),
        (channels, height, width),
        classes=classes,
        notes=notes,
    )
    return resize(data, cfg.image_size, cfg.max_memory_gb) if cfg.image_size else data


def _check_shape(spec: str, got: tuple[int, ...], wanted: tuple[int, int, int]) -> None:
    """The pool's images must be what the teacher takes: say what to set when they are not."""
    if got == wanted:
        return
    given = _given(spec)
    where = f"{given.where()}: images are {'x'.join(map(str, got))}"
    takes = f"the teacher takes {'x'.join(map(str, wanted))}"
    if got[0] != wanted[0]:
        raise UserError(
            f"{where}, {takes} ({got[0]} channel(s), not {wanted[0]})",
            f"choose a set with {wanted[0]} channel(s)",
        )
    raise UserError(f"{where}, {takes}", f"set {given.given(_sized(given, wanted[-1]))}")


def _sized(spec: str, side: int) -> str:
    """`spec` with image_size=`side` in place of any image_size it gives: the other pairs as
    _pairs reads them (spaces around a pair allowed), so that the hint is one shell word."""
    name, _, rest = spec.partition(":")
    parts = [p.strip() for p in _PAIRS.split(rest)]
    keys = ",".join(p for p in parts if p and p.partition("=")[0].strip() != "image_size")
    return f"{name}:{keys + ',' if keys else ''}image_size={side}"
