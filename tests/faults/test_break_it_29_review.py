"""Break-it round 29, reviewer 1's findings on the round's data, weights and detect fixes
(fixer H).

C5. An image folder with data.in_memory unset, which data.max_memory_gb put in memory, was
    refused when its decoded images would not fit in the machine's memory ("or data.in_memory
    = false"), though the user never asked for in-memory: it streams now.
C6. The weights file's sha256 was cached for 8 files, keyed by size and mtime: a sweep over 9
    hashed each again, and a same-size file put in its place with the mtime kept (rsync -t,
    tar x) kept the old digest, so the other bytes read as the weights trained before.
C7. SSD weights of the same key names but other anchors per location were "trained for N
    classes", N the ratio of the first head tensor that differs: made up. The count is said
    only where every differing head tensor gives it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from dlperf.config import DataConfig
from dlperf.config.experiment import weights_digest
from dlperf.data import sources
from dlperf.detect.ssd import _held_classes
from tests.faults.test_break_it_29_data import image_folder

# --- C5: in-memory chosen, not asked for ------------------------------------------------------


def test_a_folder_too_large_to_hold_streams_unless_in_memory_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "the 8 images decoded into memory at 8x8 take ... (..., or data.in_memory =
    false)", with data.in_memory unset."""
    root = image_folder(tmp_path / "if")  # 8 images of 8x8
    side = 8
    # one image decoded fits; the 8 held at once (and their stacked copy) do not
    memory = (sources.DECODE_BYTES + 3 * 8) * side * side
    monkeypatch.setattr(sources, "machine_memory", lambda: memory)
    cfg = DataConfig(name="imagefolder", root=str(root), image_size=side)
    data = sources.imagefolder(cfg)
    assert data.train.images is None and data.test.images is None
    assert len(data.test.files) == 4
    with pytest.raises(sources.TooLargeToDecode, match=r"or data\.in_memory = false\)$"):
        sources.imagefolder(cfg.model_copy(update={"in_memory": True}))


# --- C6: the weights digest's cache -------------------------------------------------------------


def test_weights_digests_are_kept_for_any_number_of_files_and_miss_no_replacement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the 9 files were each read again; the replacement kept the old sha256."""
    files = [tmp_path / f"w{i}.pt" for i in range(9)]
    for i, file in enumerate(files):
        file.write_bytes(bytes([i]) * 64)
    first = [weights_digest(str(file)) for file in files]
    assert first == [hashlib.sha256(file.read_bytes()).hexdigest() for file in files]
    made: list[Any] = []
    sha256 = hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda *a: made.append(a) or sha256(*a))
    assert [weights_digest(str(file)) for file in files] == first
    assert made == []
    monkeypatch.undo()
    # rsync -t: other bytes of the same size written beside it, its mtime kept, renamed over
    old = files[0].stat()
    other = tmp_path / ".w0.pt.tmp"
    other.write_bytes(b"\xff" * 64)
    os.utime(other, ns=(old.st_atime_ns, old.st_mtime_ns))
    other.replace(files[0])
    assert files[0].stat().st_mtime_ns == old.st_mtime_ns
    assert weights_digest(str(files[0])) == hashlib.sha256(b"\xff" * 64).hexdigest()


# --- C7: the class count of SSD weights ---------------------------------------------------------


def _head(anchors: list[int], classes: int) -> dict[str, torch.Tensor]:
    """The heads' last convolutions, as an SSD's state dict names them (shapes only):
    anchors x classes channels each, and anchors x 4 for the boxes."""
    state = {}
    for head, channels in (("classification", classes), ("regression", 4)):
        for i, n in enumerate(anchors):
            key = f"head.{head}_head.module_list.{i}"
            state[f"{key}.weight"] = torch.empty(n * channels, 2, 3, 3, device="meta")
            state[f"{key}.bias"] = torch.empty(n * channels, device="meta")
    return state


@pytest.mark.parametrize(
    ("anchors", "classes", "held"),
    [
        ([4, 6], 3, 3),  # other classes, the anchors ours: 3
        ([6, 3], 2, None),  # other anchors: the first reads 3, the second 1
        ([6, 9], 2, None),  # other anchors, each layer's half as many again: both read 3
    ],
)
def test_the_class_count_of_ssd_weights_is_said_only_where_every_head_tensor_agrees(
    anchors: list[int], classes: int, held: int | None
) -> None:
    """Before: weights of 2 classes and other anchors than our 4 and 6 were "trained for 3"."""
    assert _held_classes(_head(anchors, classes), _head([4, 6], 2), 2) == held
