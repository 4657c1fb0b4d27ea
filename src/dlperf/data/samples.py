"""A data set's images as PNG files, a few per class (`dlperf data samples`): what a
student runs inference on, or looks at, without writing Python.

Each file is one image of a split exactly as the loader holds it (after `data.image_size`
when set, before normalisation and augmentation), at its own size: an 8 x 8 digit stays
8 x 8 pixels, with its channels as PNG holds them (1 grey, 2 grey and alpha, 3 RGB, 4 RGBA;
a set of more channels is refused). Files are named SPLIT-INDEX-CLASS.png, INDEX the image's
position in the split, so a file leads back to its image; CLASS is the class name where a file
name can hold it as it is, else a stand-in of at most 180 bytes ending in a hash of the name
(see `_safe`)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.data.describe import SPLITS, outside_the_set, pick_classes
from dlperf.data.sources import ImageData, decode_file
from dlperf.errors import UserError
from dlperf.formatting import few
from dlperf.parsing import name_text
from dlperf.paths import replaced, writing
from dlperf.progress import Reporter

# Bytes of a file name's class part. A name is at most 255 bytes on most file systems, and a
# class folder's own name may take all of them (84 CJK characters are 252 bytes): cut here, the
# part, its hash, the split, the index and ".png" fit with room to spare (the temporary name it
# is written under is cut to fit: `paths.part_name`).
PART_BYTES = 180


def _safe(name: str) -> str:
    """A class name as a file name part: letters, digits, '.', '_' and '-' only, at most
    PART_BYTES bytes of UTF-8 (cut on a character boundary). A name not kept as it is (a
    character replaced, an edge '_' or space dropped, or cut) ends in a hash of the whole
    name, so that names that differ only in what was lost ("a" and "a ", or two long names
    sharing their first 180 bytes) still give files that tell their classes apart."""
    part = re.sub(r"[^\w.-]+", "_", name).strip("_") or "class"
    cut = part.encode()[:PART_BYTES].decode("utf-8", "ignore")  # a cut character dropped
    if cut == name:
        return cut
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{cut}-{digest}"


def write_samples(
    cfg: DataConfig,
    out: Path,
    per_class: int = 1,
    classes: int | list[str] | None = None,
    split: str = "test",
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """Write up to `per_class` images of each class `classes` picks (see `pick_classes`)
    from `split`, the first of that class in split order, as PNG files in `out`. Returns
    the data set, split, directory and one entry per file (path, class, label, index).
    `reporter` hears of the set's reading."""
    from PIL import Image

    if per_class < 1:
        raise UserError(f"--per-class must be at least 1, got {per_class}")
    if split not in SPLITS:
        raise UserError(f"unknown split '{split}'", f"choose {', '.join(SPLITS)}")
    outside_the_set(cfg, out)  # before the set is read
    data = load_data(cfg, reporter)
    part = getattr(data, split)
    if len(part) == 0:
        raise UserError(f"{data.name} has no {split} images", "choose another --split")
    channels = data.shape[0]
    if channels > 4:  # before the directory is made: a refusal leaves none behind
        raise UserError(
            f"{data.name} images have {channels} channels; a PNG holds 1 to 4 (grey, grey and "
            "alpha, RGB, RGBA)",
            "dlperf data describe shows their first channel; numpy reads them from the file",
        )
    names = data.classes or [str(i) for i in range(data.num_classes)]
    picked = {
        label: torch.nonzero(part.labels == label).flatten()[:per_class].tolist()
        for label in pick_classes(data.name, names, classes)
    }
    short = _short(data, split, names, picked, per_class, asked=classes is not None)
    if short is not None and not any(picked.values()):  # before the directory is made
        raise UserError(f"no {split} image of the {short.classes}: {short.items}", short.fix)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for label, indices in picked.items():
        for index in indices:
            if part.images is not None:
                pixels = part.images[index]
            else:  # a streamed set: read only the files written
                pixels = decode_file(part.files[index], data.shape[-1])
            array = np.ascontiguousarray(pixels.permute(1, 2, 0).numpy())
            # 1 channel: L, 2: LA, 3: RGB, 4: RGBA
            image = Image.fromarray(array.squeeze(-1) if array.shape[-1] == 1 else array)
            path = out / f"{split}-{index:05d}-{_safe(names[label])}.png"
            # Aside, then renamed: a full disk fails PIL's save as it closes the file, which
            # left a 0-byte PNG that looked like a sample; the error names the file.
            with writing(path), replaced(path) as aside:
                image.save(aside)
            files.append({"path": str(path), "class": names[label], "label": label, "index": index})
    # "warnings": the reader's notes on the set's files (a raw file kept aside, ...), and the
    # classes asked that got fewer files than asked
    return {
        "dataset": data.name,
        "split": split,
        "out": str(out),
        "files": files,
        "warnings": [*data.notes, *([short.warning] if short else [])],
    }


@dataclass
class _Short:
    """Classes picked that the split holds fewer than --per-class images of."""

    classes: str  # "1 class asked" (of --classes), "10 classes"
    items: str  # "dog has 0 (1 in test), ..."
    fix: str
    warning: str


def _short(
    data: ImageData,
    split: str,
    names: list[str],
    picked: dict[int, list[int]],
    per_class: int,
    asked: bool,
) -> _Short | None:
    """The classes of `picked` (`asked`: named by --classes) given fewer than `per_class`
    images of `split`, with how many of each the other splits hold: a class whose images all
    went to another split gave none, and the command said nothing of it. Another split is
    offered only where it holds `per_class` of every class picked, else the most of each a
    split holds is said: "try --split train" of a set too small for --per-class 500 gave
    fewer again. None when every class got all it asked."""
    short = [label for label, indices in picked.items() if len(indices) < per_class]
    if not short:
        return None
    others = [s for s in SPLITS if s != split]
    # One count per split (a scan per class was seconds on an ImageNet-sized set)
    labels = {s: getattr(data, s).labels for s in SPLITS}
    counts = {s: torch.bincount(y[y >= 0], minlength=len(names)) for s, y in labels.items()}
    held = {s: {label: int(counts[s][label]) for label in picked} for s in SPLITS}

    def item(label: int) -> str:
        where = ", ".join(f"{held[s][label]} in {s}" for s in others if held[s][label])
        where = where or f"none in {' or '.join(others)}"
        return f"{name_text(names[label])} has {len(picked[label])} ({where})"

    enough = [s for s in others if min(held[s].values()) >= per_class]
    if enough:
        fix = f"try --split {max(enough, key=lambda s: sum(held[s][label] for label in short))}"
    elif any(not any(held[s][label] for s in SPLITS) for label in short):
        fix = "ask for classes the set holds images of"
    else:
        best = max([split, *others], key=lambda s: min(held[s].values()))  # ties: this split
        least = min(held[best].values())
        fix = f"no split holds {per_class} of each class" + (
            f": {best} holds at least {least} of each" if least else ""
        )
    n = len(short)
    classes = f"{n} class{'es' if n > 1 else ''}{' asked' if asked else ''}"
    items = few([item(label) for label in short])
    what = f"no {split} image" if per_class == 1 else f"fewer than {per_class} {split} images"
    warning = f"{classes} {'have' if n > 1 else 'has'} {what}: {items}; {fix}"
    return _Short(classes, items, fix, warning)
