"""Choosing the pseudo-labelled images from a teacher's scores (Yalniz et al. 2019, sec. 3).

For each class, the K images the teacher scores highest for it, among the images whose P
highest-scored classes include it: an image may be kept for up to P classes, once per class.
Ties are broken by the lower index (class for the top-P, image for the top-K), so the same
scores always give the same set.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Selection:
    """The kept images: `index` into the scored images, `label` the class each was kept for
    (class by class, highest score first), and how many were kept per class."""

    index: torch.Tensor
    label: torch.Tensor
    kept: list[int]

    def __len__(self) -> int:
        return len(self.index)


def _descending(values: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Indices sorting `values` highest first, equal values in their original order."""
    return torch.sort(values, dim=dim, descending=True, stable=True).indices


def select(scores: torch.Tensor, top_k: int, top_p: int) -> Selection:
    """The selection of `scores` (images x classes, e.g. softmax outputs), all finite."""
    n, classes = scores.shape
    if top_k < 1 or not 1 <= top_p <= classes:
        raise ValueError(f"top_k {top_k} must be >= 1 and top_p {top_p} in 1..{classes}")
    # A NaN sorts above every score: an image of NaN scores was kept first, for its first
    # class, unsaid (teacher.score refuses such scores before they come here).
    bad = int((~torch.isfinite(scores)).any(dim=1).sum())
    if bad:
        raise ValueError(f"scores must be finite: {bad} of the {n} images have NaN or inf")
    eligible = torch.zeros(n, classes, dtype=torch.bool, device=scores.device)
    eligible.scatter_(1, _descending(scores, dim=1)[:, :top_p], True)
    index, label, kept = [], [], []
    for c in range(classes):
        candidates = eligible[:, c].nonzero().squeeze(1)
        chosen = candidates[_descending(scores[candidates, c])[:top_k]]
        index.append(chosen)
        label.append(torch.full_like(chosen, c))
        kept.append(len(chosen))
    return Selection(torch.cat(index).cpu(), torch.cat(label).cpu(), kept)


def precision(
    selection: Selection, hidden: torch.Tensor
) -> tuple[float | None, list[float | None]]:
    """The share of kept images whose hidden label is the one they were kept for: over all,
    and per class (None for a class with nothing kept)."""
    right = hidden[selection.index] == selection.label
    per_class = [
        right[selection.label == c].double().mean().item() if kept else None
        for c, kept in enumerate(selection.kept)
    ]
    overall = right.double().mean().item() if len(right) else None
    return overall, per_class
