"""What the ninth break-it round found in the data readers, each seen failing before its fix.

A FIFO among the user's files hung without a word: an image folder's `x.png` that is a FIFO
blocked `run` (in memory or streamed), `sweep` and `data describe` in PIL's open(), and a
FIFO given to `converge fit --csv` blocked in open(); a FIFO given as an .npz data file was
called "no such file". Each is now one line naming the file, exit 2, the file stat'ed and
never opened, as traces and checkpoints are (test_break_it_5_files).

An .npz set of 2 or 7 channels trains, but `data describe` crashed in matplotlib (a
traceback, exit 1) and `data samples` in PIL, leaving an empty output directory behind.

The commands that could block run under a guard, a regression that blocks failing its test
instead of hanging the suite: in this process, a watchdog freeing a reader blocked on the FIFO
(in any thread, or a loader's worker process: it opens the FIFO itself for writing).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np
import pytest

from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
GUARD_S = 120  # a reader thread blocked on a FIFO is given a quarter of it to be freed

EXPERIMENT = """
[model]
name = "smallcnn"
[data]
name = "imagefolder"
root = "img"
image_size = 8
[train]
epochs = 1
batch_size = 4
lr = 0.05
[run]
threads = 1
checkpoint = false
"""

SWEEP = """
base = "exp.toml"
[grid]
"train.lr" = [0.05, 0.1]
"""


def image_folder(root: Path) -> None:
    """root/train and root/val, classes a and b, a few 8x8 RGB PNGs each."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("val", 2)):
        for name in ("a", "b"):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")


def npz_set(path: Path, channels: int) -> np.ndarray:
    """An .npz of 60 uint8 images of `channels` channels, 8x8, labels 0 and 1; its images."""
    rng = np.random.default_rng(channels)
    images = rng.integers(0, 256, (60, channels, 8, 8), dtype=np.uint8)
    np.savez(path, images=images, labels=np.array([0, 1] * 30))
    return images


# --- cause 1: a FIFO among the user's files ---------------------------------------------------


@pytest.mark.faults  # over 10 s under load: make test-faults
@pytest.mark.parametrize(
    "command",
    [
        "data describe imagefolder --set data.root=img --set data.image_size=8 --out figs",
        "run exp.toml",
        "run exp.toml --set data.in_memory=false",
        "sweep sweep.toml",
    ],
)
def test_a_fifo_in_an_image_folder_is_one_line(command: str, cli: Cli, tmp_path: Path) -> None:
    """Before: each blocked in PIL's open() of the FIFO, without a word, until killed."""
    image_folder(tmp_path / "img")
    fifo = tmp_path / "img" / "train" / "a" / "x.png"
    os.mkfifo(fifo)
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    (tmp_path / "sweep.toml").write_text(SWEEP)
    with watched(fifo) as freed:
        result = cli(*command.split())
    assert not freed, f"dlperf {command} blocked on the FIFO"
    one_line(result, 2, "img/train/a/x.png is not a regular file (a FIFO)")


def test_a_fifo_without_an_image_extension_is_no_image_and_not_read(
    cli: Cli, tmp_path: Path
) -> None:
    """Only the files the folder would read are refused: a FIFO named otherwise stays out, as
    any file of another extension does."""
    image_folder(tmp_path / "img")
    os.mkfifo(tmp_path / "img" / "train" / "a" / "pipe")
    result = cli("data", "describe", "imagefolder", "--set", "data.root=img", "--set",
                 "data.image_size=8", "--out", "figs", "--json")  # fmt: skip
    assert result.code == 0, result.err
    assert '"train": ' in result.out


def test_decode_file_refuses_a_fifo_without_opening_it(tmp_path: Path) -> None:
    """A file replaced by a FIFO after the folder was listed (a streamed set reads each file
    when its batch comes): refused, not waited on. Before: blocked in open()."""
    from dlperf.data.sources import decode_file

    fifo = tmp_path / "x.png"
    os.mkfifo(fifo)
    caught: list[BaseException] = []

    def decode() -> None:
        try:
            decode_file(str(fifo), 8)
        except BaseException as e:  # handed to the test's thread
            caught.append(e)

    reader = threading.Thread(target=decode, daemon=True)
    reader.start()
    reader.join(timeout=GUARD_S / 4)
    if reader.is_alive():  # blocked in open(): a writer's open and close set it free
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=GUARD_S / 4)
        pytest.fail("decode_file blocked opening a FIFO")
    assert len(caught) == 1 and isinstance(caught[0], UserError), caught
    assert str(caught[0]).startswith(f"{fifo} is not a regular file (a FIFO)")


@contextmanager
def watched(fifo: Path) -> Iterator[list[bool]]:
    """The block's command (in this process) set free if it blocks on `fifo`: past GUARD_S / 4
    a watchdog opens and closes it for writing, which ends a reader's blocked open() or read()
    (again each second, for a reader that opens it anew), and says so in the list yielded."""
    done = threading.Event()
    freed: list[bool] = []

    def watch() -> None:
        wait = GUARD_S / 4
        while not done.wait(wait):
            with suppress(OSError):  # ENXIO: no reader has it open
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                freed.append(True)
            wait = 1.0

    watchdog = threading.Thread(target=watch, daemon=True)
    watchdog.start()
    try:
        yield freed
    finally:
        done.set()
        watchdog.join()


def test_a_fifo_as_the_npz_file_is_not_called_missing(cli: Cli, tmp_path: Path) -> None:
    """Before: "not a readable .npz file (no such file)" for a file that is there."""
    os.mkfifo(tmp_path / "fifo.npz")
    with watched(tmp_path / "fifo.npz") as freed:
        result = cli("data", "describe", "npz", "--set", "data.root=fifo.npz", "--out", "figs")
    assert not freed, "data describe blocked on the FIFO"
    one_line(result, 2, "fifo.npz is not a regular file (a FIFO)")


def test_a_fifo_as_a_converge_csv_is_one_line(cli: Cli, tmp_path: Path) -> None:
    """Before: blocked in open() of the CSV until killed."""
    os.mkfifo(tmp_path / "fifo.csv")
    with watched(tmp_path / "fifo.csv") as freed:
        result = cli("converge", "fit", "--csv", "fifo.csv", "--y", "metric")
    assert not freed, "converge fit blocked on the FIFO"
    one_line(result, 2, "fifo.csv is not a regular file (a FIFO)")


# --- cause 2: npz sets of channel counts an image cannot show -----------------------------


@pytest.mark.parametrize("channels", [2, 5, 7])
def test_describe_draws_an_npz_set_of_any_channel_count(
    channels: int, cli: Cli, tmp_path: Path
) -> None:
    """Before: matplotlib's "Invalid shape (8, 8, 2) for image data", a traceback, exit 1."""
    npz_set(tmp_path / "set.npz", channels)
    result = cli("data", "describe", "npz", "--set", "data.root=set.npz", "--out", "figs")
    assert result.code == 0, result.err
    assert (tmp_path / "figs" / "npz-samples.png").stat().st_size > 0


def test_a_figure_of_images_png_cannot_show_says_which_channel_it_shows() -> None:
    from dlperf.report.data import shown_channels

    assert shown_channels(1) == shown_channels(3) == shown_channels(4) == ""
    assert shown_channels(2) == "channel 1 of 2 shown, in grey"
    assert shown_channels(7) == "channel 1 of 7 shown, in grey"


@pytest.mark.parametrize(("channels", "mode"), [(1, "L"), (2, "LA"), (3, "RGB"), (4, "RGBA")])
def test_samples_writes_the_channels_a_png_holds(
    channels: int, mode: str, cli: Cli, tmp_path: Path
) -> None:
    """Before: PIL's "Cannot handle this data type: (1, 1, 2)", a traceback, exit 1."""
    from PIL import Image

    images = npz_set(tmp_path / "set.npz", channels)
    result = cli("data", "samples", "npz", "--set", "data.root=set.npz", "--per-class", "1",
                 "--split", "train", "--out", "samples", "--json")  # fmt: skip
    assert result.code == 0, result.err
    files = sorted((tmp_path / "samples").iterdir())
    assert len(files) == 2
    with Image.open(files[0]) as png:
        assert png.mode == mode
        written = np.asarray(png)
    # the split's images are a permutation of the file's: the one written is among them
    chw = written.reshape(8, 8, channels).transpose(2, 0, 1)
    assert any(np.array_equal(chw, image) for image in images)


@pytest.mark.parametrize("channels", [5, 7])
def test_samples_refuses_other_channel_counts_before_making_the_directory(
    channels: int, cli: Cli, tmp_path: Path
) -> None:
    """Before: a traceback, exit 1, and an empty samples directory left behind."""
    npz_set(tmp_path / "set.npz", channels)
    result = cli("data", "samples", "npz", "--set", "data.root=set.npz", "--out", "samples")
    one_line(result, 2, f"npz images have {channels} channels; a PNG holds 1 to 4")
    assert not (tmp_path / "samples").exists()
