"""How augmentation's random draws reach the device: made on a CPU generator (the same
augmentation on every device), they were copied with a blocking `.to(device)`, which on
CUDA waits for all the device's queued work (a stream synchronisation) two to five times a
step. They go through `host_to_device`: pinned memory and a copy that does not wait."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from dlperf.config import AugmentConfig
from dlperf.data import augment


def test_a_copy_to_cuda_is_made_from_pinned_memory_without_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pinned: list[torch.Tensor] = []
    copies: list[tuple[bool, bool]] = []  # (from pinned memory, non_blocking)
    real_to = torch.Tensor.to

    def pin_memory(self: torch.Tensor, *args: Any) -> torch.Tensor:
        copy = self.clone()
        pinned.append(copy)
        return copy

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        target = args[0] if args else kwargs.get("device")
        if isinstance(target, torch.device) and target.type == "cuda":
            from_pinned = any(self is p for p in pinned)
            copies.append((from_pinned, bool(kwargs.get("non_blocking", False))))
            return self  # stands for the copy on a machine without a GPU
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    drawn = torch.tensor([3, 1, 2])
    out = augment.host_to_device(drawn, torch.device("cuda", 0))
    assert copies == [(True, True)]
    assert torch.equal(out, drawn)


def test_a_copy_elsewhere_is_a_plain_one() -> None:
    drawn = torch.tensor([3, 1, 2])
    out = augment.host_to_device(drawn, torch.device("cpu"))
    assert torch.equal(out, drawn) and not out.is_pinned()


def test_every_draw_of_a_batch_reaches_the_device_through_host_to_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Crop (two offsets), flip (one mask) and Cutout (two centres): five draws, each
    copied through host_to_device, and the batch is the one a plain copy gives."""
    cfg = AugmentConfig(crop_padding=2, flip=True, cutout=3)
    x = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8)
    y = torch.arange(6)
    mean, std = torch.full((3, 1, 1), 0.5), torch.full((3, 1, 1), 0.25)
    expected = augment.augment_batch(x, y, cfg, mean, std, torch.Generator().manual_seed(4))
    sent: list[torch.Size] = []
    real = augment.host_to_device

    def recording(t: torch.Tensor, device: torch.device) -> torch.Tensor:
        sent.append(t.shape)
        return real(t, device)

    monkeypatch.setattr(augment, "host_to_device", recording)
    got = augment.augment_batch(x, y, cfg, mean, std, torch.Generator().manual_seed(4))
    assert sent == [torch.Size([6])] * 5
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_the_tensor_loader_sends_each_epoch_s_order_through_host_to_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dlperf.data import loaders
    from dlperf.data.sources import Split

    split = Split(torch.arange(8), torch.zeros(8, 1, 2, 2, dtype=torch.uint8))
    one, zero = torch.ones(1, 1, 1), torch.zeros(1, 1, 1)
    loader = loaders.TensorLoader(split, 4, torch.device("cpu"), zero, one, AugmentConfig())
    sent: list[torch.Tensor] = []

    def recording(t: torch.Tensor, device: torch.device) -> torch.Tensor:
        sent.append(t)
        return t.to(device)

    monkeypatch.setattr(loaders, "host_to_device", recording, raising=False)
    labels = torch.cat([y for _, y in loader.set_epoch(3)])
    assert len(sent) == 1 and torch.equal(labels, sent[0])  # the epoch's shuffled order
