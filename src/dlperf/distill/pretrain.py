"""What the pretrain stage's own data takes: the pseudo-labelled images of one K, split by
distill itself (FRACTION of them for test, then FRACTION of the rest for validation, whatever
data.val_fraction says: that is the labelled data's). Too few of them leave the validation
split that target.accuracy is measured on empty, or a training split of one class, which
the run refuses with a line naming data.val_fraction, a key that does not reach it, and only
once the teacher has trained and scored the pool. Checked here instead: before anything runs
where the pool's size, the classes, K and P already bound the images kept (`check_plan`), and
after the selection, before the pretrain run, with the images actually kept (`check_kept`),
each line naming the distill keys that decide it. A class kept once whose image the split
draws for test is no refusal: the split's seed is distill's to choose (`split_seed`)."""

from __future__ import annotations

import math

import torch

from dlperf.config import DataConfig, DistillConfig, Experiment
from dlperf.data import ImageData
from dlperf.data.sources import held_out, seed_keeping_all
from dlperf.engine.profiler import check_fits
from dlperf.engine.step import steps_per_epoch
from dlperf.errors import UserError

FRACTION = 0.1  # the pretrain split's test_fraction and val_fraction
NOT_OURS = "pretrain splits its images itself: data.val_fraction is the labelled data's"
SPLIT_NOT_OURS = (
    "pretrain splits its images itself: data.test_fraction and data.split_seed are the "
    "labelled data's"
)


def sizes(images: int) -> tuple[int, int, int]:
    """(train, val, test) of `images` pseudo-labelled images, as the npz reader splits them
    (test first, then validation of the rest)."""
    test = held_out(images, FRACTION)
    val = held_out(images - test, FRACTION)
    return images - test - val, val, test


def fewest(target: bool) -> int:
    """The fewest images pretrain can train on: two training images (a classifier needs two
    classes), and one validation image when a `target` accuracy is measured."""
    images = 1
    while (train := sizes(images))[0] < 2 or (target and train[1] < 1):
        images += 1
    return images


def most_kept(k: int, pool: int, classes: int, top_p: int) -> int:
    """The most images a selection can keep: K per class, each of the `pool` images for at
    most P classes (and once per class)."""
    return min(classes * min(k, pool), pool * top_p)


def _images(n: int) -> str:
    return f"{n} image{'s' if n != 1 else ''}"


def check_plan(opts: DistillConfig, pool: int, classes: int, target: float | None) -> None:
    """Refuse, before the teacher trains, the Ks whose pretrain stage cannot run whatever the
    teacher scores: those that keep fewer than `fewest` images at most. The fixes offered
    are those that work: a K that can keep enough (when the pool can give them), a pool
    large enough, or dropping target.accuracy when that alone is enough."""
    need = fewest(target is not None)
    short = [k for k in opts.top_k if most_kept(k, pool, classes, opts.top_p) < need]
    if not short:
        return
    k = max(short)
    most = most_kept(k, pool, classes, opts.top_p)
    ks = ", ".join(map(str, sorted(set(short))))
    if pool * opts.top_p <= classes * min(k, pool):
        bound = f"a pool of {_images(pool)}, each kept for at most {opts.top_p} class"
        bound += "es" if opts.top_p != 1 else ""
    else:
        bound = f"{k} per class of {classes}"
    if target is not None:
        why = (
            f"and it measures target.accuracy on a tenth of them, none: that takes {need} "
            f"images or more ({NOT_OURS})"
        )
    else:
        why = f"and a classifier trains on 2 classes: that takes {need} images or more"
    fixes = []
    if pool * opts.top_p < need:
        fixes.append(f"give a pool of {math.ceil(need / opts.top_p)} or more images (--unlabeled)")
    else:  # then K per class can reach it: ceil(need / classes) <= pool, as top_p <= classes
        fixes.append(f"give distill.top_k values of {math.ceil(need / classes)} or more")
    if target is not None and most >= fewest(False):
        fixes.append("drop target.accuracy")
    raise UserError(
        f"distill K = {ks}: pretrain would train on at most {_images(most)} ({bound}), {why}",
        ", or ".join(fixes),
    )


def check_profile(opts: DistillConfig, pool: int, classes: int, base: Experiment) -> None:
    """Refuse, before the teacher trains, the Ks whose pretrain run trains fewer steps than
    run.profile's window takes whatever the teacher keeps: at most `most_kept` images, the
    training share of them (`sizes`) in batches of train.batch_size (all of them when fewer),
    for distill.pretrain_epochs. Left to the pretrain run, it was refused only after the
    teacher had trained and scored the pool. The largest such K is said (the most steps)."""
    epochs = opts.pretrain_epochs or base.train.epochs
    short = []
    for k in opts.top_k:
        most = most_kept(k, pool, classes, opts.top_p)
        train = sizes(most)[0]
        steps = epochs * steps_per_epoch(train, min(base.train.batch_size, train)) if train else 0
        try:
            check_fits(base.run, steps)
        except UserError as e:
            short.append((k, most, e.message))
    if short:
        ks = ", ".join(str(k) for k, _, _ in sorted(short))
        _, most, said = max(short)
        raise UserError(
            f"the pretrain stage of K = {ks} (at most {_images(most)} kept, "
            f"distill.pretrain_epochs = {epochs}): {said}",
            "lower run.warmup_steps or run.profile.active, or raise distill.pretrain_epochs",
        )


def split_seed(data: ImageData, cfg: DataConfig) -> int:
    """The split seed of pretrain's data (`data`, the pseudo-labelled set as read with `cfg`):
    cfg's, unless it leaves a kept class no training image (one kept once, drawn for test),
    then the first after it that keeps every class. The split is distill's own, of images
    dlperf wrote: the run refused it naming data.split_seed and data.test_fraction, keys of
    the labelled data that do not reach it (one retrained the teacher on other splits). cfg's
    when no seed keeps every class: `check_kept` then refuses it."""
    if not _untrained(data):
        return cfg.split_seed
    seed = seed_keeping_all(data, cfg)
    return cfg.split_seed if seed is None else seed


def check_kept(
    k: int, data: ImageData, kept: list[int], opts: DistillConfig, target: float | None
) -> None:
    """Refuse the pretrain stage of K before its run, when the images the teacher kept
    (`kept` per class; `data` the pseudo-labelled set as pretrain splits it, at `split_seed`)
    leave it an empty validation split to measure `target` on, a training split of one
    class, or a kept class no training image at any split seed. The fixes offered are those
    that can work: a larger K only when a class took all K it may (and, for a split of one
    class, when more than one class kept images: the classes an image may be kept for do not
    depend on K), dropping target.accuracy only when the validation split alone fails."""
    empty_val = target is not None and len(data.val) == 0
    one_class = torch.unique(data.train.labels).numel() < 2
    lost = _untrained(data)
    if not (empty_val or one_class or lost):
        return
    said = f"pretrain K={k}: the teacher kept {_images(sum(kept))} ({_per_class(kept, data)})"
    if empty_val:
        said += (
            f", and pretrain measures target.accuracy on a tenth of them, none: that takes "
            f"{fewest(True)} images or more ({NOT_OURS})"
        )
    elif one_class:
        said += ": its training split holds images of 1 class, and a classifier needs 2 or more"
    else:
        said += (
            ", and at none of 100 split seeds does a tenth for test and a tenth of the rest for "
            f"validation leave every class a training image ({SPLIT_NOT_OURS})"
        )
    keys = []
    if k in kept and (not one_class or sum(1 for n in kept if n) >= 2):
        keys.append("distill.top_k")
    if opts.top_p < data.num_classes:  # an image may then be kept for more classes
        keys.append("distill.top_p")
    fixes = [f"raise {' or '.join(keys)}"] if keys else []
    fixes.append("give a larger, more varied pool (--unlabeled)")
    if empty_val and not (one_class or lost):
        fixes.append("drop target.accuracy")
    raise UserError(said, ", or ".join(fixes))


def _untrained(data: ImageData) -> bool:
    """Whether a class of the pseudo-labelled images (`data.pool`, as the npz reader gives
    them) has none in the training split: of two classes, that is a training split of one,
    which `untrained_classes` leaves to the run's other checks."""
    assert data.pool is not None  # read by the npz reader
    return bool(torch.unique(data.train.labels).numel() < torch.unique(data.pool).numel())


def _per_class(kept: list[int], data: ImageData) -> str:
    """The classes that kept images, with their counts: 'class 3: 1', '0: 2, 7: 1'."""
    named = [f"{data.classes[c] if c < len(data.classes) else c}: {n}" for c, n in
             enumerate(kept) if n]  # fmt: skip
    return ("class " if len(named) == 1 else "classes ") + ", ".join(named)
