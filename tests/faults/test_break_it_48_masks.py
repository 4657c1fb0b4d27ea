"""Break-it round 48, T1 C2: torch's own mask checks were "not counted".

A TransformerDecoder given the causal `tgt_mask` torch's docs make is counted on real CPU
tensors (torch's `_detect_is_causal_mask` reads the mask), and that check calls `aten.all`,
which had no handler: every such model was warned of an uncounted operator, and `predict`
called its figures lower bounds though every product was counted. `aten.all` and `aten.any`
are now counted as the boolean reductions they are (one compare per element, as `amax`);
`aten._nested_tensor_from_mask_left_aligned` (a padding mask's layout checked) does no
arithmetic and is ignored.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import dlperf


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.dec = nn.TransformerDecoder(layer, 1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q = x.permute(0, 2, 1, 3).reshape(b, h, c * w)
        mask = nn.Transformer.generate_square_subsequent_mask(h, device=x.device)
        return self.fc(self.dec(q, q, tgt_mask=mask).mean(1))


class PaddedEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 1)  # nested tensors on, torch's default
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        s = x.permute(0, 2, 1, 3).reshape(b, h, c * w)
        pad = torch.zeros(b, h, dtype=torch.bool, device=x.device)
        pad[:, -1] = True
        return self.fc(self.enc(s, src_key_padding_mask=pad).mean(1))


REAL = "counted on real CPU tensors"  # the note of a forward that reads values, as documented


def test_a_causal_masks_check_is_counted() -> None:
    with pytest.warns(UserWarning, match=REAL):
        counted = dlperf.analyze(Decoder().eval(), (1, 8, 8))
    assert counted.unsupported_ops == {}  # before: {"aten.all": 1}
    assert counted.totals["macs"] == 8_272  # 2 x 3,072 (two attentions) + 2,048 + 80, by hand


def test_a_padding_masks_layout_check_does_no_arithmetic() -> None:
    with pytest.warns(UserWarning, match=REAL):
        counted = dlperf.analyze(PaddedEncoder().eval(), (1, 8, 8), batch=2)
    assert counted.unsupported_ops == {}  # before: aten._nested_tensor_from_mask_left_aligned
