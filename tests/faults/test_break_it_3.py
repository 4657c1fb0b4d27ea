"""Cases of issue 41's confirming break-it round (docs/faults.md) that failed, each through the
real entry point: a user's model that cannot be trained, store text too long to show."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

NETS = """
import torch
from torch import nn


class InPlace(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.c = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.h = nn.Linear(4 * 64, num_classes)

    def forward(self, x):
        y = self.c(x)
        y.relu_()
        y += 1  # changes what relu_ saved for its backward
        return self.h(y.flatten(1))


class Detached(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.h = nn.Linear(in_channels * 64, num_classes)

    def forward(self, x):
        return self.h(x.flatten(1)).detach()
"""


@pytest.mark.parametrize(
    ("net", "said"),
    [
        ("InPlace", "modified by an inplace operation"),
        ("Detached", "returns scores that carry no gradient"),
    ],
)
def test_a_model_whose_backward_fails_is_one_line_and_not_stored(
    cli: Callable[..., CliResult],
    tiny_exp: Callable[..., Path],
    store: RunStore,
    tmp_path: Path,
    net: str,
    said: str,
) -> None:
    (tmp_path / "nets.py").write_text(NETS)
    result = cli("run", str(tiny_exp(epochs=1)), "--set", f"model.name=nets.py:{net}")
    assert result.code == 2, result.err  # before: exit 1, a 57-line autograd traceback
    assert "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    said_model = f"error: model '{tmp_path}/nets.py:{net}' cannot be trained:"  # stored absolute
    assert result.err.startswith(said_model), result.err
    assert said in result.err
    assert store.list_runs() == []


def test_a_tag_key_too_long_says_its_limit(cli: Callable[..., CliResult], store: RunStore) -> None:
    run = store.create_run("r", "run", {})
    result = cli("runs", "tag", str(run), "k" * 101 + "=x")
    assert result.code == 2
    # before: "expected KEY=VALUE (KEY of letters, digits, _ . -)" for a key of letters only
    assert "KEY of 1 to 100 ASCII letters" in result.err, result.err


def test_a_tag_value_too_long_to_show_is_refused_on_writing(
    cli: Callable[..., CliResult], store: RunStore
) -> None:
    run = store.create_run("r", "run", {})
    result = cli("runs", "tag", str(run), "note=" + "v" * 100_000)
    # before: stored, and every `runs show` of the run then took minutes and 4 GB to print it
    assert result.code == 2, result.err
    assert result.err.startswith("error: tag note: its value is 100000 characters long;")
    assert store.get_run(run).tags == {}


def test_an_npz_label_in_the_billions_is_one_line(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    images = np.zeros((8, 1, 8, 8), dtype=np.uint8)
    labels = np.arange(8, dtype=np.int64) % 2 * 3_000_000_000
    np.savez(tmp_path / "ids.npz", images=images, labels=labels)
    # before: a name made for each of the 3e9 classes, until the kernel killed it (exit 137)
    result = cli("data", "describe", "npz", "--set", "data.root=ids.npz")
    assert result.code == 2, result.err
    assert result.err.startswith(
        "error: ids.npz: label 3000000000 would make 3000000001 classes; dlperf reads at most "
        "1000000"
    ), result.err


def test_a_postgres_url_reads_as_libpq_reads_it(cli: Callable[..., CliResult]) -> None:
    """`postgres://` is libpq's, psql's and most hosts' spelling of `postgresql://`."""
    short = cli("--db", "postgres://u@127.0.0.1:1/db", "runs", "list")
    long = cli("--db", "postgresql://u@127.0.0.1:1/db", "runs", "list")
    assert short.code == long.code == 2
    # before: "Can't load plugin: sqlalchemy.dialects:postgres", and no fix
    assert short.err.replace("postgres://", "postgresql://") == long.err, short.err


def _folder_set(root: Path) -> None:
    from PIL import Image

    for split in ("train", "val"):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (6, 6), (40 * i, 0, 0)).save(root / split / name / f"{i}.png")


def test_an_image_folder_skips_hidden_entries_and_symlink_loops(tmp_path: Path) -> None:
    from dlperf.config import DataConfig
    from dlperf.data.sources import imagefolder

    root = tmp_path / "set"
    _folder_set(root)
    for split in ("train", "val"):
        # Jupyter's checkpoints folder was a class; macOS's AppleDouble file refused the set
        (root / split / ".ipynb_checkpoints").mkdir()
        (root / split / "a" / "._0.png").write_bytes(b"\x00\x05\x16\x07")
        (root / split / "a" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    # a link back up the tree: os.walk followed it 40 deep (12 images became 492)
    (root / "train" / "a" / "up").symlink_to(root / "train")
    (root / "train" / "b" / "self").symlink_to(root / "train" / "b")
    # what is data stays: a nested folder, a link to a folder elsewhere
    (root / "train" / "a" / "sub").mkdir()
    (root / "train" / "a" / "0.png").rename(root / "train" / "a" / "sub" / "0.png")
    (tmp_path / "more").mkdir()
    (root / "train" / "b" / "1.png").rename(tmp_path / "more" / "1.png")
    (root / "train" / "b" / "more").symlink_to(tmp_path / "more")
    data = imagefolder(DataConfig(name="imagefolder", root=str(root), image_size=6))
    assert data.classes == ["a", "b"]
    assert len(data.train) + len(data.val) == 6
    assert len(data.test) == 6


def test_an_integer_of_5001_digits_is_one_line(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    digits = "1" + "0" * 5000
    # before: a 63-line ValueError traceback (Python's limit on converting long numbers)
    given = cli("run", str(tiny_exp(epochs=1)), "--set", f"train.epochs={digits}")
    (tmp_path / "long.toml").write_text(f"[train]\nepochs = {digits}\n")
    written = cli("run", "long.toml")
    for result in (given, written):
        assert result.code == 2, result.err
        assert len(result.err.strip().splitlines()) == 1, result.err
        assert "an integer of more than 4300 digits" in result.err, result.err


SECOND_STOP = """
import os, signal
from dlperf import stopping

class Dying:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)

def command():
    try:
        os.kill(os.getpid(), signal.SIGINT)
    finally:
        Dying()  # the second Ctrl-C lands in a finaliser while the first one's cleanup runs
    return 0

stopping.run(command, process=True)
"""


def test_a_second_stop_signal_in_a_finaliser_prints_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SECOND_STOP], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 130, done.stderr
    # before: "Exception ignored in: <function _get_module_lock.<locals>.cb ...>" and an
    # 8-line traceback, from `dlperf distill` given Ctrl-C twice while importing
    assert done.stderr == ""


@pytest.mark.parametrize("command", ["run", "report"])
def test_a_path_too_long_for_the_file_system_is_bad_input(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path], command: str
) -> None:
    long = "/tmp/" + "d" * 300 + "/x"  # a name of 300 bytes; Linux file systems take 255
    args = {
        "run": ["run", str(tiny_exp(epochs=1)), "--set", f'run.out_dir="{long}"'],
        "report": ["report", "--out", long],
    }[command]
    result = cli(*args)
    assert result.code == 2, result.err  # before: exit 1, as for a fault of dlperf's own
    assert result.err.startswith("error: cannot use /tmp/ddd"), result.err
    assert result.err.strip().endswith("File name too long")


def test_exporting_a_model_that_returns_a_dict_is_one_line(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "net.py").write_text(
        "from torch import nn\n\n\n"
        "class Dict(nn.Module):\n"
        "    def __init__(self, num_classes=10, in_channels=1):\n"
        "        super().__init__()\n"
        "        self.f = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))\n\n"
        "    def forward(self, x):\n"
        '        return {"logits": self.f(x)}\n'
    )
    result = cli("export", "net.py:Dict", "--input", "1,8,8", "--out", "m.onnx")
    assert result.code == 2, result.err  # before: exit 1, a 40-line AttributeError traceback
    assert "Traceback" not in result.err
    assert (
        result.err.strip()
        .splitlines()[-1]
        .startswith("error: model 'net.py:Dict' returns a dict, not a tensor")
    ), result.err
    assert not (tmp_path / "m.onnx").exists()


def test_exporting_a_model_whose_scores_are_nan_says_so(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "net.py").write_text(
        "from torch import nn\n\n\n"
        "class NaN(nn.Module):\n"
        "    def __init__(self, num_classes=10, in_channels=1):\n"
        "        super().__init__()\n"
        "        self.f = nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))\n\n"
        "    def forward(self, x):\n"
        '        return self.f(x) * float("nan")\n'
    )
    result = cli("export", "net.py:NaN", "--input", "1,8,8", "--out", "m.onnx")
    assert result.code == 1, result.err
    # before: "ONNX Runtime differs from PyTorch by up to nan", where both gave NaN
    assert (
        result.err.strip()
        .splitlines()[-1]
        .startswith("check failed: PyTorch's own scores are not finite (NaN or inf)")
    ), result.err
    assert not (tmp_path / "m.onnx").exists()  # a model of NaN scores is not shipped
