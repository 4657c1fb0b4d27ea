"""The twelfth break-it round (issue 41, part C), [augment]: batch augmentation's M without a
bound, and a Cutout or a crop's padding that leaves nothing of the image.

C2. `augment.batch_aug_m` took any count: `data describe digits --set
augment.batch_aug_m=1000000000` and `run` with it ended in torch's "DefaultCPUAllocator: can't
allocate memory: you tried to allocate 2048000000000 bytes" with its traceback, exit 1, the run
stored failed; `config show` accepted it. M is now at most 64 in the config, and M copies of a
batch, as float32 images of the data's shape, must fit in the machine's memory where the data
is known (as a synthetic set's size is checked).

C6. A Cutout square whose side is 2 x the image side - 1 or more covers every pixel wherever it
is centred: `cutout=100` on the 8x8 digits made every augmented copy a flat square and a sweep
point trained on blank images (test accuracy 0.09). A crop's padding of the image side or more
lets a crop miss the image entirely (pure padding, the label kept): `crop_padding=1000` on 8x8
images made ~99.6% of the crops blank. Both are refused in one line where the data is known.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from dlperf.config import AugmentConfig
from dlperf.data.augment import augment_batch, cutout, random_crop
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

DESCRIBE = ["data", "describe", "digits", "--classes", "2", "--per-class", "2", "--out", "figs"]


def _cutout_covers_all(side: int, h: int, w: int) -> bool:
    """Every centre of `cutout`'s draws (all h x w of them) masks every pixel of an h x w image."""
    x = torch.ones(h * w, 1, h, w)
    g = torch.Generator().manual_seed(0)
    # one image per centre: cutout draws centres uniformly; checked over enough draws to see all
    out = torch.cat([cutout(x, side, g) for _ in range(8)])
    return bool((out == 0).all())


# --- C2: M without a bound ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["config", "show", "tiny.toml"],
        DESCRIBE,
        ["run", "tiny.toml"],
    ],
    ids=["config-show", "describe", "run"],
)
def test_a_huge_batch_aug_m_is_one_line_and_stores_nothing(
    command: list[str], cli: Cli, store: RunStore, tiny_exp: Callable[..., Path]
) -> None:
    """Before: config show exit 0; describe and run a 2 TB allocation's traceback, exit 1, the
    run stored failed."""
    tiny_exp(epochs=1)
    result = cli(*command, "--set", "augment.batch_aug_m=1000000000")
    one_line(result, 2, "augment.batch_aug_m", "64")
    assert store.list_runs() == []


def test_batch_aug_m_of_64_is_still_taken(cli: Cli) -> None:
    result = cli("config", "show", "--set", "augment.batch_aug_m=64")
    assert result.code == 0, result.err
    assert "batch_aug_m = 64" in result.out


@pytest.fixture
def small_memory(monkeypatch: pytest.MonkeyPatch) -> int:
    """The machine's memory as the checks read it, made 1 MiB."""
    import dlperf.config.experiment as experiment

    monkeypatch.setattr(experiment, "machine_memory", lambda: 2**20)
    return 2**20


def test_m_copies_of_a_batch_beyond_memory_are_refused_before_the_run(
    cli: Cli, store: RunStore, tiny_exp: Callable[..., Path], small_memory: int
) -> None:
    """64 copies of a batch of 128 digits (1x8x8) as float32 take 2 MiB (64 x 128 x 64 x 4
    bytes), over the 1 MiB of memory the check is shown."""
    tiny_exp(epochs=1)
    result = cli("run", "tiny.toml", "--set", "augment.batch_aug_m=64", "--set",
                 "train.batch_size=128")  # fmt: skip
    one_line(result, 2, "augment.batch_aug_m 64", "128 images", "1x8x8", "take 2.0 MiB",
             "1.0 MiB of memory")  # fmt: skip
    assert store.list_runs() == []


def test_a_synthetic_sets_m_copies_are_refused_where_the_config_is_checked(
    cli: Cli, small_memory: int
) -> None:
    """The synthetic set's shape is in the config: config show refuses it, as its size."""
    result = cli("config", "show", "--set", "data.name=synthetic", "--set", "data.size=64",
                 "--set", "data.shape=[1,16,16]", "--set", "augment.batch_aug_m=64",
                 "--set", "train.batch_size=64")  # fmt: skip
    one_line(result, 2, "augment.batch_aug_m 64", "64 images", "1x16x16")


def test_describe_counts_the_images_it_shows(cli: Cli, small_memory: int) -> None:
    """describe augments its sample images, not a training batch: 10 classes x 100 images x
    64 copies (16 MiB) do not fit in 1 MiB."""
    result = cli("data", "describe", "digits", "--per-class", "100", "--out", "figs",
                 "--set", "augment.batch_aug_m=64")  # fmt: skip
    one_line(result, 2, "augment.batch_aug_m 64", "1000 images", "1x8x8")


# --- C6: a Cutout or padding that leaves nothing of the image -----------------------------------


def test_the_cutout_bound_is_where_every_pixel_is_masked() -> None:
    """A side of 2h - 1 masks all of an h x h image wherever it is centred; 2h - 2 does not."""
    assert _cutout_covers_all(15, 8, 8)
    assert not _cutout_covers_all(14, 8, 8)
    assert _cutout_covers_all(2 * 12 - 1, 5, 12)  # the longer side decides
    assert not _cutout_covers_all(2 * 12 - 2, 5, 12)


def test_the_padding_bound_is_where_a_crop_can_miss_the_image() -> None:
    """Padding of the image side lets a crop be pure padding; one less never does."""
    x = torch.ones(4000, 1, 8, 8)
    g = torch.Generator().manual_seed(0)
    blank = (random_crop(x, 8, g) == 0).flatten(1).all(1)
    assert blank.any()
    assert not (random_crop(x, 7, g) == 0).flatten(1).all(1).any()


@pytest.mark.parametrize(
    ("key", "bad", "said"),
    [
        ("augment.cutout", 100, "augment.cutout 100"),
        ("augment.cutout", 15, "augment.cutout 15"),
        ("augment.crop_padding", 1000, "augment.crop_padding 1000"),
        ("augment.crop_padding", 8, "augment.crop_padding 8"),
    ],
)
@pytest.mark.parametrize("command", [DESCRIBE, ["run", "tiny.toml"]], ids=["describe", "run"])
def test_an_augmentation_that_blanks_images_is_one_line(
    command: list[str],
    key: str,
    bad: int,
    said: str,
    cli: Cli,
    store: RunStore,
    tiny_exp: Callable[..., Path],
) -> None:
    """Before: exit 0, every (cutout) or most (padding) augmented images blank."""
    tiny_exp(epochs=1)
    result = cli(*command, "--set", f"{key}={bad}")
    one_line(result, 2, said, "8x8")
    assert store.list_runs() == []


def test_the_largest_cutout_and_padding_that_leave_pixels_are_taken(cli: Cli) -> None:
    result = cli(*DESCRIBE, "--set", "augment.cutout=14", "--set", "augment.crop_padding=7")
    assert result.code == 0, result.err


def test_a_sweep_point_of_blank_images_is_refused_before_the_first_point(
    cli: Cli, store: RunStore, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """Before: the point trained on blank images (test accuracy 0.09), its run finished."""
    tiny_exp(epochs=1)
    sweep = tmp_path / "sw.toml"
    sweep.write_text('base = "tiny.toml"\n[grid]\n"augment.cutout" = [2, 100]\n')
    result = cli("sweep", str(sweep))
    one_line(result, 2, "augment.cutout 100", "8x8")
    assert store.list_runs() == []


def test_augment_batch_still_augments_within_the_bounds() -> None:
    """The largest accepted cutout and padding leave some pixel of some image."""
    cfg = AugmentConfig(cutout=14, crop_padding=7, batch_aug_m=2)
    x = torch.full((16, 1, 8, 8), 200, dtype=torch.uint8)
    mean, std = torch.zeros(1, 1, 1), torch.ones(1, 1, 1)
    out, y = augment_batch(x, torch.arange(16), cfg, mean, std, torch.Generator().manual_seed(0))
    assert out.shape == (32, 1, 8, 8) and len(y) == 32
    assert (out != 0).any()
