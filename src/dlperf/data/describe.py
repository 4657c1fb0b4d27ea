"""What a data set holds, before anything trains on it: classes, images per class, split sizes,
image shape, per-channel statistics, and sample images with, when an [augment] key is set,
what training's batched augmentation makes of them (`dlperf data describe`).

Returns data only; `dlperf.cli.data` draws the figures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dlperf.config import AugmentConfig, DataConfig
from dlperf.data import ImageData, load_data
from dlperf.data.augment import augment_batch, check_augment
from dlperf.data.loaders import STD_FLOOR, channel_stats, stats_measured
from dlperf.data.sources import Split, decode_file, repeated, too_few_classes
from dlperf.errors import UserError
from dlperf.parsing import file_name_text, name_text
from dlperf.paths import within
from dlperf.progress import Reporter

SPLITS = ("train", "val", "test")


@dataclass
class Description:
    name: str
    classes: list[str]
    counts: list[int]  # training images per class
    splits: dict[str, int]
    image_shape: tuple[int, int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    # Training images the measured statistics are of: the whole split, or a sample of a
    # streamed one; None when data.mean and data.std are both given (nothing measured).
    stats_images: int | None
    in_memory: bool
    shown: list[str]  # the classes sampled, in the order asked for
    samples: list[torch.Tensor]  # per shown class: uint8 n,C,H,W
    augment: AugmentConfig | None  # None: no augmentation set
    augmented: list[torch.Tensor] | None  # per shown class: uint8 M,n,C,H,W, M copies of each
    warnings: list[str]  # what `dlperf run` would refuse in the set, said without refusing it

    @property
    def stats_sampled(self) -> bool:
        """Whether the measured mean/std are of a sample of the training split."""
        return self.stats_images is not None and self.stats_images < self.splits["train"]

    @property
    def stats_basis(self) -> str:
        """What the mean/std are of, as the table says it."""
        if self.stats_images is None:
            return "given (data.mean, data.std)"
        train = self.splits["train"]
        if self.stats_sampled:
            return (
                f"{self.stats_images:,} of the {train:,} training images, spread over the "
                "split (a sample: the set is streamed from its files)"
            )
        return f"all {train:,} training images" if train != 1 else "the 1 training image"

    def summary(self) -> dict[str, Any]:
        """Everything but the images, as JSON takes it."""
        return {
            "name": self.name,
            "classes": self.classes,
            "counts": dict(zip(self.classes, self.counts, strict=True)),
            "splits": self.splits,
            "image_shape": list(self.image_shape),
            "mean": list(self.mean),
            "std": list(self.std),
            "stats_images": self.stats_images,
            "stats_sampled": self.stats_sampled,
            "in_memory": self.in_memory,
            "sample_classes": self.shown,
            "augment": self.augment.model_dump() if self.augment is not None else None,
            "warnings": self.warnings,
        }


def _samples(
    data: ImageData, split: Split, labels: list[int], per_class: int
) -> list[torch.Tensor]:
    """Up to `per_class` uint8 images C,H,W of each class in `labels`, in split order."""
    picked: list[torch.Tensor] = []
    for label in labels:
        index = torch.nonzero(split.labels == label).flatten()[:per_class]
        if split.images is not None:
            picked.append(split.images[index])
        else:  # a streamed set: read only the files shown
            picked.append(torch.stack([decode_file(split.files[i], data.shape[-1]) for i in index]))
    return picked


def outside_the_set(cfg: DataConfig, out: Path) -> None:
    """Refuse `out`, a folder PNG files are to be written to, inside a split folder that the
    set `cfg` reads its images from (imagefolder's root/train, val and test, there or not):
    its PNGs would become images of the set, a test image of a dog one of class cat in the
    training split, or a test/ made would be tested on in place of val/. The root itself,
    beside the split folders, is not read."""
    if cfg.name != "imagefolder":  # the other sets are files that PNGs beside them leave be
        return
    splits = [Path(cfg.root) / split for split in SPLITS]
    for split in splits:
        below = within(out, split)
        if below is None:
            continue
        what = (
            f"become images of class {file_name_text(below.parts[0])}"
            if below.parts
            else f"land in the {split.name} split"
        )
        raise UserError(
            f"--out {out} is inside the data set being read ({split}): its PNGs would {what}",
            f"give a folder outside {', '.join(map(str, splits))}",
        )


def pick_classes(name: str, classes: list[str], chosen: int | list[str] | None) -> list[int]:
    """Label ids of `chosen`: all classes (None), the first N (an int), or each listed class
    by name, else by index."""
    if chosen is None:
        return list(range(len(classes)))
    if isinstance(chosen, int):
        if chosen < 1:
            raise UserError(f"--classes must be at least 1, got {chosen}")
        if chosen > len(classes):
            raise UserError(f"--classes {chosen}: {name} has {len(classes)} classes")
        return list(range(chosen))
    if not chosen:
        raise UserError("--classes names no class", "give a count or names, e.g. --classes 2")
    picked = [_class_id(name, classes, item) for item in chosen]
    # Read item by item, a name first: over classes named by numbers "0,1" was index 0 and
    # the class "1", one class twice (or once), without a word.
    read = list(zip(chosen, picked, strict=True))
    as_index = [(item, label) for item, label in read if not _named(item, classes[label])]
    as_name = [item for item, label in read if _named(item, classes[label])]
    if as_index and as_name and any(c.strip().isdigit() for c in classes):
        item, label = as_index[0]
        raise UserError(
            f"--classes: {item.strip()} would be read as an index (class "
            f"{name_text(classes[label])}) and {as_name[0].strip()} as a class name, where "
            f"{name}'s classes are named by numbers",
            f"give class names alone: {_some(classes)}",
        )
    for at, label in enumerate(picked):
        if label in picked[:at]:
            twice = chosen[picked.index(label)].strip()
            raise UserError(
                f"--classes: {twice} and {chosen[at].strip()} both pick the class "
                f"{name_text(classes[label])}"
            )
    return picked


def _named(item: str, class_name: str) -> bool:
    """Whether --classes' `item` picked `class_name` by its name (else by index)."""
    return item == class_name or item.strip() == class_name.strip()


def _class_id(name: str, classes: list[str], item: str) -> int:
    """The label id of `item` of --classes: the class of that name as typed, else the one
    class whose name is it without the spaces at its edges ("a, b" gives " b"; a folder may
    be named "cat "), else an index. A name as typed wins: where folders ' cat' and 'cat'
    both exist, `--classes 'dog, cat'` picks ' cat' (`--classes dog,cat` picks 'cat')."""
    if item in classes:
        return classes.index(item)
    bare = item.strip()
    spaced = [i for i, c in enumerate(classes) if c.strip() == bare]
    if len(spaced) == 1:
        return spaced[0]
    if spaced:  # "cat" of " cat" and "cat ": only an index tells them apart on a command line
        said = " and ".join(name_text(classes[i]) for i in spaced)
        indices = ", ".join(f"{i} for {name_text(classes[i])}" for i in spaced)
        raise UserError(
            f"--classes: '{bare}' names {len(spaced)} classes of {name} with spaces "
            f"at their edges, {said}",
            f"give the one meant by its index: {indices}",
        )
    if bare.isdigit() and int(bare) < len(classes):
        return int(bare)
    raise UserError(
        f"--classes: {name} has no class '{bare}'",
        f"give names or indices 0..{len(classes) - 1}: {_some(classes)}",
    )


def _some(classes: list[str]) -> str:
    """The first 12 of `classes`, as --classes' lines show names, and "..." for more."""
    return ", ".join(map(name_text, classes[:12])) + (", ..." if len(classes) > 12 else "")


def _augments(cfg: AugmentConfig) -> bool:
    return bool(cfg.crop_padding or cfg.flip or cfg.cutout or cfg.batch_aug_m > 1)


def _augmented(
    samples: list[torch.Tensor], cfg: AugmentConfig, mean: tuple[float, ...], std: tuple[float, ...]
) -> list[torch.Tensor]:
    """Each class's samples through training's `augment_batch` (all of them as one batch,
    with a fixed seed, so the figure is the same every time), back to uint8 for display:
    per class M,n,C,H,W."""
    x = torch.cat(samples)
    mean_t = torch.tensor(mean).view(-1, 1, 1)
    std_t = torch.tensor(std).view(-1, 1, 1)
    g = torch.Generator().manual_seed(0)
    out, _ = augment_batch(x, torch.zeros(len(x), dtype=torch.long), cfg, mean_t, std_t, g)
    pixels = (out * std_t + mean_t).mul(255).round().clamp(0, 255).to(torch.uint8)
    # augment_batch's M copies are copy-major: all first copies, then all second ones.
    pixels = pixels.view(cfg.batch_aug_m, *x.shape)
    return list(torch.split(pixels, [len(images) for images in samples], dim=1))


MOST_SHOWN = 100  # classes the sample grid shows by default, of a set of more than this


def describe(
    cfg: DataConfig,
    augment: AugmentConfig | None = None,
    classes: int | list[str] | None = None,
    per_class: int = 8,
    reporter: Reporter | None = None,
) -> Description:
    """The data set `cfg` names, described, with up to `per_class` training images of each
    class `classes` picks (see `pick_classes`) and, when `augment` sets any augmentation,
    what training's augmentation makes of them. `reporter` hears of the set's reading."""
    data = load_data(cfg, reporter)
    said = list(data.notes)  # the reader's, of the set's files
    names = data.classes or [str(i) for i in range(data.num_classes)]
    # The readers refuse a name twice; the counts are keyed by name, and would merge them.
    twice = repeated(names)
    if twice:
        raise UserError(f"{data.name} names a class more than once: {', '.join(twice)}")
    labels = pick_classes(data.name, names, classes)
    counts = torch.bincount(data.train.labels, minlength=data.num_classes).tolist()
    if classes is None and len(labels) > MOST_SHOWN:
        # A grid row per class of 100,000 classes kept matplotlib busy for minutes: by
        # default, the first classes that have training images.
        labels = [i for i in labels if counts[i] > 0][:MOST_SHOWN]
    active = augment if augment is not None and _augments(augment) else None
    if active:  # what training refuses of it, refused before its samples are augmented
        shown = sum(min(per_class, counts[i]) for i in labels)
        check_augment(active, data.shape, shown, data.name, "show fewer images (--per-class)")
    samples = _samples(data, data.train, labels, per_class)
    refused = too_few_classes(data, cfg.limit)
    if refused:
        said.append(f"{refused.message}, and `dlperf run` refuses it ({refused.hint})")
    mean, std = data.mean, data.std
    measured = stats_measured(data) if cfg.mean is None or cfg.std is None else None
    if cfg.std is None and min(std) < 2 * STD_FLOOR:
        # data.std is what training divides by, floored: a channel of one value showed as
        # 0.0010, a measurement it never was. Measured again (only then), as it is.
        level, std = channel_stats(data, floor=0.0)
        if 0.0 in std and measured is not None and measured < len(data.train):
            # A sample of a streamed split is one value in a channel: the split is measured
            # whole (every file decoded, only here) before the set is said to be blank.
            measured = len(data.train)
            level, std = channel_stats(data, sample=measured, floor=0.0)
            mean = level if cfg.mean is None else mean
        said += [
            f"channel {c} holds one value, {round(level[c] * 255)} of 255, in every pixel "
            "of the training images (std 0): it tells no class from another (a blank "
            "or wrongly decoded set?)"
            for c, s in enumerate(std)
            if s == 0
        ]
    return Description(
        name=data.name,
        classes=names,
        counts=counts,
        splits={"train": len(data.train), "val": len(data.val), "test": len(data.test)},
        image_shape=data.shape,
        mean=mean,
        std=std,
        stats_images=measured,
        in_memory=data.in_memory,
        shown=[names[i] for i in labels],
        samples=samples,
        augment=active,
        augmented=_augmented(samples, active, data.mean, data.std) if active else None,
        warnings=said,
    )
