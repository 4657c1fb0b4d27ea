"""Break-it round 16 (part C, cause D): `analyze --train` counted the memory attention saves
for the backward on the math path: on the meta device torch's scaled_dot_product_attention
always decomposes into bmm, softmax, bmm, which keeps the B·H·L·L probabilities, while the
kernel torch runs on a CPU (aten._scaled_dot_product_flash_attention_for_cpu) saves a B·H·L
logsumexp. A 2-layer TransformerEncoder at a sequence of 20 said 76,128 bytes of saved
activations where a real CPU forward saves 53,728 (+42 %, growing as L²). Attention of
meta tensors is now counted as the kernel torch picks for the same call on a CPU: the fused
one where it would (its memory, its bytes), the math path where a CPU takes that too (with
dropout, say); the saved bytes are those autograd saves on a real CPU forward."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dlperf.analytic.counting import analyze_module
from dlperf.errors import UserError


class Encoder(nn.Module):
    """The tester's transformer_enc: Linear(3,16) -> 2-layer TransformerEncoder (d 16, 2
    heads, ff 32) -> mean -> Linear(16,10), on a C,H,W input read as H·W tokens of C."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=dropout)
        self.e = nn.Linear(3, 16)
        self.t = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.h = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.h(self.t(self.e(x.flatten(2).transpose(1, 2))).mean(1))


class Attention(nn.Module):
    """scaled_dot_product_attention called directly on (N, L, 3·H·E) projections, with the
    call's own arguments."""

    def __init__(self, heads: int, unbatched: bool = False, **sdpa: object) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.heads, self.unbatched, self.sdpa = heads, unbatched, sdpa

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, length, _ = x.shape
        q, k, v = self.qkv(x).view(n, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if self.unbatched:  # (H, L, E): one sample's heads
            q, k, v = q[0], k[0], v[0]
        mask = self.sdpa.get("attn_mask")
        kwargs = {**self.sdpa, "attn_mask": mask(length, x.device) if callable(mask) else mask}
        return F.scaled_dot_product_attention(q, k, v, **kwargs).sum(-1)  # type: ignore[arg-type]


def saved_on_cpu(model: nn.Module, shape: list[int], batch: int) -> int:
    """Bytes of the distinct storages autograd saves in a real CPU training forward,
    parameters and buffers left out (as the tester's cases/saved.py)."""
    model.train()
    weights = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            seen.setdefault(storage.data_ptr(), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(torch.randn(batch, *shape))
    return sum(seen.values())


def saved_counted(model: nn.Module, shape: list[int], batch: int) -> int:
    model.train()
    memory = analyze_module(model, shape, batch=batch, train=True).training_memory
    assert memory is not None
    return int(memory["saved_activations_bytes"])


def bool_mask(length: int, device: torch.device) -> torch.Tensor:
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


CASES: dict[str, tuple[Callable[[], nn.Module], list[int], int]] = {
    # the tester's case: 76,128 counted, 53,728 saved
    "transformer encoder, L 20": (Encoder, [3, 4, 5], 2),
    "transformer encoder, L 64": (Encoder, [3, 8, 8], 2),
    # a CPU takes the math path with dropout: its probabilities and masks are saved there too
    "transformer encoder with dropout": (lambda: Encoder(dropout=0.1), [3, 4, 5], 2),
    "causal": (lambda: Attention(2, is_causal=True), [12, 8], 3),
    "boolean mask": (lambda: Attention(2, attn_mask=bool_mask), [12, 8], 3),
    "unbatched (H, L, E)": (lambda: Attention(4, unbatched=True), [12, 8], 2),
    "scale given": (lambda: Attention(2, scale=0.3), [12, 8], 3),
}


@pytest.mark.parametrize("case", CASES)
def test_saved_activations_of_attention_are_what_a_cpu_saves(case: str) -> None:
    make, shape, batch = CASES[case]
    torch.manual_seed(0)
    assert saved_counted(make(), shape, batch) == saved_on_cpu(make(), shape, batch)


def test_the_tester_encoder_saves_what_it_reported() -> None:
    torch.manual_seed(0)
    assert saved_counted(Encoder(), [3, 4, 5], 2) == saved_on_cpu(Encoder(), [3, 4, 5], 2) == 53728


def test_fused_attention_counts_the_same_macs_and_ends_the_receptive_field() -> None:
    """The fused kernel's products are the math path's (q·kᵀ and p·v); attention over a
    feature map's positions mixes them: the field ends there, as it did on the math path."""

    class OverMap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.after = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)  # (N, 4, 8, 8): 4 "heads" of 8 positions of 8 features
            return self.after(F.scaled_dot_product_attention(y, y, y))

    a = analyze_module(OverMap(), [3, 8, 8], batch=2)
    conv, after, attention = 2 * 64 * 4 * 27, 2 * 64 * 4 * 36, 2 * 4 * (8 * 8 * 8) * 2
    assert a.totals()["macs"] == conv + after + attention
    field = a.receptive_field
    assert not field["defined"]
    assert "positions are mixed" in field["reason"]


def test_a_mask_with_is_causal_is_refused_as_a_cpu_refuses_it() -> None:
    """The fused kernel's meta function checks nothing the CPU kernel checks beyond torch's
    choice of kernel: this pair, which the choice lets through, still fails in one line."""
    mask = torch.zeros(12, 12)
    with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set when is_causal"):
        Attention(2, attn_mask=mask, is_causal=True)(torch.randn(3, 12, 8))
    refused = "Explicit attn_mask should not be set when is_causal=True"
    with pytest.raises(UserError, match=refused):
        analyze_module(Attention(2, attn_mask=mask.to("meta"), is_causal=True), [12, 8], batch=3)
