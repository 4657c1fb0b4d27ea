"""Break-it round 31, the user's own data (fixer G).

C1. A data.root that is a loop of symbolic links (la -> lb -> la) was "a link to lb, which is
    not there" (mount or restore lb), and an .npz one "no such file", blamed on the current
    directory: both are now said to be a loop of links, naming them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


# --- C1: a data.root that is a loop of symbolic links ----------------------------------------


def loops(tmp_path: Path) -> Path:
    """tmp_path/loops holding la -> lb -> la and self.npz -> self.npz."""
    folder = tmp_path / "loops"
    folder.mkdir()
    (folder / "lb").symlink_to("la")
    (folder / "la").symlink_to("lb")
    (folder / "self.npz").symlink_to("self.npz")
    return folder


@pytest.mark.parametrize("name", ["imagefolder", "mnist", "cifar10"])
def test_a_data_root_that_is_a_loop_of_links_is_said_to_be_one(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Before: "data.root loops/la is a link to lb, which is not there (mount or restore lb,
    ...)": lb is there, and links back to la."""
    loops(tmp_path)
    monkeypatch.chdir(tmp_path)
    sets = ("--set", "data.root=loops/la", "--set", "data.image_size=12")
    r = cli("data", "describe", name, *sets[: 4 if name == "imagefolder" else 2])
    one_line(r, 2, "data.root loops/la is a loop of symbolic links (loops/la -> lb -> la)",
             f"point one of the links at the folder that holds the {name} files")  # fmt: skip
    assert "not there" not in r.err
    # a loop further up the path is found where it is
    r = cli("data", "describe", name, "--set", "data.root=loops/la/sub", *sets[2:4])
    one_line(r, 2, "data.root loops/la/sub is a loop of symbolic links (loops/la -> lb -> la)")


def test_an_npz_data_root_that_is_a_loop_of_links_is_said_to_be_one(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "loops/self.npz: not a readable .npz file (no such file): a relative data.root
    is read from the current directory, ...", of a link that is there."""
    folder = loops(tmp_path)
    monkeypatch.chdir(tmp_path)
    for root, chain in [
        ("loops/self.npz", "loops/self.npz -> self.npz"),
        (str(folder / "self.npz"), f"{folder / 'self.npz'} -> self.npz"),
    ]:
        r = cli("data", "describe", "npz", "--set", f"data.root={root}")
        one_line(r, 2, f"{root} is a loop of symbolic links ({chain})",
                 "point one of the links at the .npz file")  # fmt: skip
        assert "no such file" not in r.err and "current directory" not in r.err
