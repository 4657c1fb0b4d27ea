"""Break-it round 32, an image folder's reading and two memory lines (fixer M).

C5. An image folder of 10^5 tiny files was listed and decoded for about 3 minutes before
    `data describe` (or `run`) said anything: load_data took no Reporter. It takes one now,
    and the image folder reader reports the listing of a long folder and the decoding of
    each split ("decoding 90,000 images of ROOT/train", advanced every PROGRESS_FILES).
    `data describe` and `data samples` pass the command's reporter.

Reviewer's notes: `detect make-shapes`' memory refusal said "0.0 GiB" of a small need, and
`resize`'s said "GB" of a size it computed in GiB: both are in the unit that shows them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf.cli import console
from dlperf.config import DataConfig
from dlperf.data import load_data, sources
from dlperf.detect import voc
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


class Recorded:
    """A Reporter that keeps what it hears."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def task(self, description: str, total: int | None = None) -> None:
        self.events.append(("task", description, total))

    def advance(self, n: int = 1, status: str = "") -> None:
        self.events.append(("advance", n))

    def log(self, message: str) -> None:
        self.events.append(("log", message))


def folder(root: Path, train: int, val: int) -> Path:
    """root/{train,val}/{a,b}/ holding `train` and `val` 4x4 PNGs per class."""
    rng = np.random.default_rng(32)
    for split, n in (("train", train), ("val", val)):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


# --- C5: progress while an image folder is listed and decoded --------------------------------


def test_an_image_folder_reports_its_listing_and_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: load_data took no reporter, and 10^5 files were read in silence for minutes."""
    root = folder(tmp_path / "f", train=5, val=2)
    monkeypatch.setattr(sources, "PROGRESS_FILES", 4)
    heard = Recorded()
    data = load_data(DataConfig(name="imagefolder", root=str(root), image_size=4), heard)
    assert heard.events == [
        # a folder is said as it is listed only once PROGRESS_FILES images are found in it
        ("task", f"listing {root}/train", None),
        ("advance", 4),
        ("advance", 4),
        ("task", f"listing {root}/val", None),
        ("advance", 4),
        ("task", f"decoding 10 images of {root}/train", 10),
        ("advance", 4),
        ("advance", 4),
        ("advance", 2),
        ("task", f"decoding 4 images of {root}/val", 4),
        ("advance", 4),
    ]
    # the same images as read without a reporter
    quiet = load_data(DataConfig(name="imagefolder", root=str(root), image_size=4))
    assert all(
        bool((getattr(data, s).images == getattr(quiet, s).images).all())
        for s in ("train", "val", "test")
    )


def test_a_small_folder_is_listed_without_a_word(tmp_path: Path) -> None:
    """A folder of fewer than PROGRESS_FILES images is not said as it is listed (a line of it
    on every command reading a small folder), and its decoding reports one advance a split."""
    root = folder(tmp_path / "f", train=2, val=1)
    heard = Recorded()
    cfg = DataConfig(name="imagefolder", root=str(root), image_size=4, in_memory=True)
    load_data(cfg, heard)
    assert heard.events == [
        ("task", f"decoding 4 images of {root}/train", 4),
        ("advance", 4),
        ("task", f"decoding 2 images of {root}/val", 2),
        ("advance", 2),
    ]


def test_a_streamed_folder_decodes_nothing_as_it_loads(tmp_path: Path) -> None:
    root = folder(tmp_path / "f", train=2, val=1)
    heard = Recorded()
    load_data(DataConfig(name="imagefolder", root=str(root), image_size=4, in_memory=False), heard)
    assert heard.events == []


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Recorded:
    """The Reporter the CLI's commands get from console.reporter()."""
    heard = Recorded()

    @contextmanager
    def reporter() -> Iterator[Recorded]:
        yield heard

    monkeypatch.setattr(console, "reporter", reporter)
    return heard


@pytest.mark.parametrize("command", ["describe", "samples"])
def test_data_commands_pass_their_reporter_to_the_reader(
    cli: Cli, tmp_path: Path, recorded: Recorded, command: str
) -> None:
    """Before: `data describe` and `data samples` of an image folder said nothing until the
    whole folder was decoded."""
    root = folder(tmp_path / "f", train=2, val=1)
    out = ["--out", str(tmp_path / "out")]
    r = cli("data", command, "imagefolder", "--set", f"data.root={root}",
            "--set", "data.image_size=4", *out)  # fmt: skip
    assert r.code == 0, r.err
    assert ("task", f"decoding 4 images of {root}/train", 4) in recorded.events


def test_run_passes_its_reporter_to_the_reader(
    cli: Cli, tmp_path: Path, recorded: Recorded
) -> None:
    """Before: `run` of an image folder said nothing until every image was decoded."""
    root = folder(tmp_path / "f", train=4, val=1)
    exp = tmp_path / "exp.toml"
    exp.write_text(
        f'[model]\nname = "smallcnn"\n[data]\nname = "imagefolder"\nroot = "{root}"\n'
        "image_size = 8\nval_fraction = 0.25\n[train]\nepochs = 1\nbatch_size = 2\n"
        f'[run]\nthreads = 1\nwarmup_steps = 0\nout_dir = "{tmp_path / "runs"}"\n'
    )
    r = cli("run", str(exp))
    assert r.code == 0, r.err
    assert ("task", f"decoding 8 images of {root}/train", 8) in recorded.events


# --- reviewer: memory lines in the unit that shows them ---------------------------------------


def test_make_shapes_says_a_small_need_in_its_own_unit(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "takes about 0.0 GiB to make, more than this machine's 0.0 GiB of memory"."""
    monkeypatch.setattr(voc, "machine_memory", lambda: 16 * 2**10)
    r = cli("detect", "make-shapes", str(tmp_path / "sh"), "--images", "2", "--size", "100")
    one_line(r, 2, "--size 100: one image of 100×100 takes about 58.6 KiB to make, more than "
             "this machine's 16.0 KiB of memory", "give --size 52 or less")  # fmt: skip


def test_resize_over_max_memory_says_gib(tmp_path: Path) -> None:
    """Before: "takes 0.0 GB, more than data.max_memory_gb 1e-06": computed in GiB, said in
    GB, and a small size as 0.0."""
    path = tmp_path / "n.npz"
    images = np.zeros((20, 3, 4, 4), dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(20) % 2)
    cfg = DataConfig(name="npz", root=str(path), image_size=8, max_memory_gb=1e-6)
    with pytest.raises(sources.UserError) as e:
        load_data(cfg)
    assert e.value.message == (
        "data.image_size 8: npz at 8x8 takes 3.8 KiB, more than data.max_memory_gb 1e-06"
    )
