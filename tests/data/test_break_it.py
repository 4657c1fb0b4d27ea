"""Break-it round of issue 41 on the data readers: each test reproduces a case whose message
misled (a negative label in a .npz file was reported as "labels outside 0..0")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.data.sources import read_npz
from dlperf.errors import UserError


def npz(path: Path, labels: list[int], classes: list[str] | None = None) -> Path:
    images = np.zeros((len(labels), 1, 4, 4), np.uint8)
    named = {"classes": np.array(classes)} if classes is not None else {}
    np.savez(path, images=images, labels=np.array(labels, np.int64), **named)
    return path


def test_a_negative_label_is_named_as_negative(tmp_path: Path) -> None:
    path = npz(tmp_path / "neg.npz", [-1, 0, 0, -1])
    with pytest.raises(UserError) as caught:
        read_npz(path)
    assert str(caught.value) == (
        f"{path}: label -1 is negative (labels are class indices 0, 1, ...)"
    )


def test_a_label_past_the_named_classes_names_both(tmp_path: Path) -> None:
    path = npz(tmp_path / "past.npz", [0, 1, 2], classes=["cat", "dog"])
    with pytest.raises(UserError) as caught:
        read_npz(path)
    assert str(caught.value) == (
        f"{path}: label 2 is outside 0..1 (2 classes) "
        "(give every label a name in 'classes', or drop 'classes')"
    )


def test_labels_within_the_classes_are_read(tmp_path: Path) -> None:
    images, labels, names = read_npz(npz(tmp_path / "ok.npz", [0, 1, 1], classes=["a", "b"]))
    assert images.shape == (3, 1, 4, 4) and labels is not None
    assert labels.tolist() == [0, 1, 1] and names == ["a", "b"]


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_a_truncated_or_corrupt_npz_is_one_line_at_every_cut(tmp_path: Path, save: Any) -> None:
    """`dlperf data describe npz` on a .npz cut short was a 61-line zipfile.BadZipFile
    traceback; a flipped byte could raise NotImplementedError (an unknown zip version)."""
    whole = tmp_path / "whole.npz"
    save(whole, images=np.zeros((8, 1, 4, 4), np.uint8), labels=np.arange(8) % 2)
    data = whole.read_bytes()
    broken = tmp_path / "broken.npz"
    cuts = [data[:n] for n in range(0, len(data), 11)]
    flips = [data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :] for i in range(0, len(data), 5)]
    for variant in cuts + flips:
        broken.write_bytes(variant)
        try:
            images, labels, _ = read_npz(broken)
        except UserError as e:
            assert "\n" not in str(e) and str(e).startswith(f"{broken}: ")
        else:  # a flip in a pixel, or in the name "labels" (then read as absent): still arrays
            assert images.shape == (8, 1, 4, 4) and (labels is None or len(labels) == 8)


@pytest.mark.parametrize(("name", "what"), [("none.npz", "no such file"), (".", "a directory")])
def test_a_missing_npz_is_not_asked_to_be_written_again(
    tmp_path: Path, name: str, what: str
) -> None:
    path = tmp_path / name
    with pytest.raises(UserError) as caught:
        read_npz(path)
    assert str(caught.value) == (
        f"{path}: not a readable .npz file ({what}) (set data.root to the path of one)"
    )
