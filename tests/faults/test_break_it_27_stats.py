"""Break-it round 27, P2 causes C4, C5, C7 and C8: data statistics, augmentation bounds, and a
converge curve at zero error.

C4: `data describe`'s mean/std (and training's normalisation) came from at most 4096 evenly
spaced training images and said nothing of it: 11% off on a 14,400-image npz. A split held in
memory is now measured whole (integer sums, chunk by chunk); a streamed one keeps a sample of
its files, which describe says (`stats_images`, `stats_sampled`), and its "channel holds one
value" warning is checked on the whole split before it is given.
C5: a training split of one pixel per channel printed torch's std() UserWarning.
C7: crop_padding and cutout refusals on 1x1 images suggested "<= 0, e.g. 1", a value the same
check refuses; the example is now one it takes, or "0 (off)".
C8: a curve at accuracy 1.0 (or loss 0) at every point: "the curve has fewer than 2 points
above 0: nothing to fit" named no file and no fix, and `predict` refused what converge.md
promises (`at_first_step`: the first step is the answer).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf.config import AugmentConfig, DataConfig
from dlperf.data import load_data, loaders
from dlperf.data.describe import describe
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# --- C4: statistics of the whole split, or a sample said to be one ----------------------------


def test_describe_and_training_measure_an_in_memory_split_whole(tmp_path: Path) -> None:
    """Before: mean 0.007324 and std 0.08527 from 4096 of the 14,400 training images, whose
    own are 0.008194 and 0.09015; and nothing said it was a sample."""
    rng = np.random.default_rng(7)
    images = np.zeros((20000, 1, 2, 2), np.uint8)
    images[rng.random(20000) < 0.01] = 255
    np.savez(tmp_path / "big.npz", images=images, labels=np.arange(20000) % 2)
    cfg = DataConfig(name="npz", root=str(tmp_path / "big.npz"))
    data = load_data(cfg)
    assert data.train.images is not None and len(data.train) > 4096  # the old sample
    pixels = data.train.images.numpy().astype(np.float64) / 255
    mean, std = float(pixels.mean()), float(pixels.std(ddof=1))
    assert data.mean == (pytest.approx(mean, rel=1e-9),)  # what training normalises by
    assert data.std == (pytest.approx(std, rel=1e-9),)
    desc = describe(cfg, per_class=1)
    doc = desc.summary()
    assert doc["mean"] == [pytest.approx(mean, rel=1e-9)]
    assert doc["std"] == [pytest.approx(std, rel=1e-9)]
    assert doc["stats_images"] == len(data.train) and doc["stats_sampled"] is False
    assert desc.stats_basis == f"all {len(data.train):,} training images"


def _streamed(root: Path, odd: int | None) -> DataConfig:
    """root/train/{a,b} of 4 black 4x4 PNGs each and root/val/{a,b} of one, streamed; the
    training split's last image (an index a sample of 1 never reads) is `odd` in one pixel
    when given."""
    for split, n in (("train", 4), ("val", 1)):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (4, 4)).save(root / split / name / f"{i}.png")
    cfg = DataConfig(name="imagefolder", root=str(root), image_size=4, in_memory=False)
    if odd is not None:
        pixels = np.zeros((4, 4, 3), np.uint8)
        pixels[1, 2] = odd
        Image.fromarray(pixels).save(load_data(cfg).train.files[-1])
    return cfg


@pytest.mark.parametrize("odd", [None, 200], ids=["blank", "one_bright_pixel"])
def test_a_streamed_sample_is_never_taken_for_a_blank_set(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: int | None
) -> None:
    """Where a streamed split's sample shows a channel of one value, the split is measured
    whole before the warning is given, and the numbers say what they are of."""
    monkeypatch.setattr(loaders, "STATS_SAMPLE", 1)  # the first training image: black
    cfg = _streamed(tmp_path / "if", odd)
    data = load_data(cfg)
    assert data.std == (pytest.approx(1e-3),) * 3  # training's sample: one black image
    sets = [f"data.root={cfg.root}", "data.image_size=4", "data.in_memory=false"]
    r = cli("data", "describe", "imagefolder", *(x for s in sets for x in ("--set", s)), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    blank = [w for w in doc["warnings"] if "holds one value" in w]
    n = len(data.train)
    assert doc["stats_images"] == n and doc["stats_sampled"] is False, doc
    if odd is None:
        assert len(blank) == 3 and doc["std"] == [0.0] * 3, doc
    else:
        assert blank == [] and min(doc["std"]) > 0, doc
        assert doc["mean"] == [pytest.approx(odd / 255 / (n * 16))] * 3


def test_a_streamed_sample_is_named_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: nothing said the numbers were of a sample."""
    monkeypatch.setattr(loaders, "STATS_SAMPLE", 3)
    cfg = _streamed(tmp_path / "if", 200)
    Image.new("RGB", (4, 4), (9, 9, 9)).save(load_data(cfg).train.files[0])
    desc = describe(cfg, per_class=1)
    n = len(load_data(cfg).train)
    assert desc.summary()["stats_images"] == 3 and desc.summary()["stats_sampled"] is True
    assert desc.stats_basis.startswith(f"3 of the {n} training images"), desc.stats_basis
    assert "sample" in desc.stats_basis


# --- C5: one pixel per channel ----------------------------------------------------------------


def test_one_pixel_per_channel_gives_no_library_warning() -> None:
    """Before: torch's "std(): degrees of freedom is <= 0" UserWarning and its source line."""
    cfg = DataConfig(name="synthetic", shape=[1, 1, 1], size=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = load_data(cfg)
        desc = describe(cfg, per_class=1)
    assert [str(w.message) for w in caught] == []
    assert data.std == (pytest.approx(1e-3),) and desc.std == (0.0,)


# --- C7: the example in an augmentation refusal is one the check takes ------------------------


@pytest.mark.parametrize("key", ["crop_padding", "cutout"])
def test_an_augmentation_refusal_suggests_a_value_it_accepts(key: str) -> None:
    """Before: 1x1 images were told "use augment.crop_padding <= 0, e.g. ...: 1", and 1 is
    refused by the same check."""
    for h, w in [(1, 1), (1, 9), (2, 2), (3, 3), (16, 16), (32, 32)]:
        refused = AugmentConfig.model_validate({key: 1000}).refused((3, h, w), 1, "x")
        assert refused is not None
        hint = refused[1]
        if "0 (off)" in hint:
            value = 0
        else:
            found = re.search(r"e\.g\. [^:]*: (\d+)$", hint)
            assert found is not None, hint
            value = int(found.group(1))
            assert value >= 1, hint
        assert AugmentConfig.model_validate({key: value}).refused((3, h, w), 1, "x") is None, hint
    tiny = AugmentConfig.model_validate({key: 1}).refused((3, 1, 1), 1, "x")
    assert (
        tiny is not None
        and tiny[1] == f"use augment.{key} = 0 (off): the images are too small for it"
    )


# --- C8: a curve at zero error ----------------------------------------------------------------


def _flat(path: Path, value: float) -> Path:
    path.write_text("step,y\n" + "".join(f"{i},{value}\n" for i in range(1, 21)))
    return path


@pytest.mark.parametrize(
    ("metric", "value", "said"),
    [("accuracy", 1.0, "accuracy is 1.0 (error 0)"), ("loss", 0.0, "loss is 0")],
)
def test_a_fit_of_a_curve_at_zero_error_names_the_file_and_the_fix(
    cli: Cli, tmp_path: Path, metric: str, value: float, said: str
) -> None:
    """Before: "the curve has fewer than 2 points above 0: nothing to fit", no file, no fix."""
    csv = _flat(tmp_path / "ca1.csv", value)
    r = cli("converge", "fit", "--csv", str(csv), "--x", "step", "--y", "y", "--metric", metric)
    one_line(r, 2, f"{csv}: {said} at 20 of its 20 points: nothing to fit", "log the metric")


def test_predict_answers_a_curve_at_the_target_from_its_first_step(
    cli: Cli, tmp_path: Path
) -> None:
    """converge.md: a curve at or past the target by its first step answers that step
    (`at_first_step`), never a refusal. Before: the fit's refusal, for every form."""
    csv = _flat(tmp_path / "ca1.csv", 1.0)
    args = ["converge", "predict", "--csv", str(csv), "--x", "step", "--y", "y"]
    args += ["--metric", "accuracy", "--target", "0.9"]
    for form in ("ensemble", "optimus"):
        r = cli(*args, "--form", form, "--json")
        assert r.code == 0, r.err
        doc = json.loads(r.out)
        assert doc["predicted_step"] == 1 and doc["at_first_step"] is True, doc
        assert doc["reachable"] is True and doc["actual_step"] == 1.0, doc
        assert doc["plateau"] == 1.0, doc
        text = cli(*args, "--form", form)
        assert text.code == 0, text.err
        words = " ".join(text.out.split())
        assert (
            "the measured curve is already at or above the target 0.9 accuracy at its "
            "first step 1" in words
        ), text.out
