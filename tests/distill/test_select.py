"""dlperf.distill.select: top-K per class among each image's top-P classes (Yalniz et al.
2019), ties broken by the lower index, and the precision of what was kept."""

from __future__ import annotations

import pytest
import torch

from dlperf.distill.select import precision, select

# 5 images x 3 classes; worked by hand below.
SCORES = torch.tensor(
    [
        [0.7, 0.2, 0.1],  # image 0: top-2 classes 0, 1
        [0.1, 0.6, 0.3],  # image 1: 1, 2
        [0.5, 0.4, 0.1],  # image 2: 0, 1
        [0.2, 0.2, 0.6],  # image 3: 2, then 0 and 1 tie: 0 (the lower class)
        [0.3, 0.3, 0.4],  # image 4: 2, then 0 (tie with 1)
    ]
)


def test_top_k_per_class_among_the_top_1() -> None:
    chosen = select(SCORES, top_k=1, top_p=1)
    # class 0: images 0, 2 are theirs: 0 scores higher; class 1: image 1; class 2: 3 (0.6 > 0.4)
    assert chosen.index.tolist() == [0, 1, 3]
    assert chosen.label.tolist() == [0, 1, 2]
    assert chosen.kept == [1, 1, 1] and len(chosen) == 3


def test_an_image_may_be_kept_for_each_of_its_top_p_classes() -> None:
    chosen = select(SCORES, top_k=2, top_p=2)
    # class 0 among 0, 2, 3, 4: 0.7, 0.5, 0.2, 0.3 -> 0, 2
    # class 1 among 0, 1, 2:    0.2, 0.6, 0.4      -> 1, 2
    # class 2 among 1, 3, 4:    0.3, 0.6, 0.4      -> 3, 4
    assert chosen.index.tolist() == [0, 2, 1, 2, 3, 4]
    assert chosen.label.tolist() == [0, 0, 1, 1, 2, 2]
    assert chosen.kept == [2, 2, 2]


def test_a_class_with_fewer_candidates_keeps_fewer() -> None:
    chosen = select(SCORES, top_k=4, top_p=1)
    assert chosen.kept == [2, 1, 2]
    assert chosen.index.tolist() == [0, 2, 1, 3, 4]


def test_ties_go_to_the_lower_index_every_time() -> None:
    flat = torch.full((6, 2), 0.5)
    for _ in range(3):
        chosen = select(flat, top_k=2, top_p=1)  # every image's top class is class 0
        assert (chosen.index.tolist(), chosen.kept) == ([0, 1], [2, 0])


@pytest.mark.parametrize(("k", "p"), [(0, 1), (1, 0), (1, 4)])
def test_k_and_p_out_of_range_are_refused(k: int, p: int) -> None:
    with pytest.raises(ValueError, match=r"top_p \d+ in 1\.\.3"):
        select(SCORES, k, p)


def test_precision_over_all_and_per_class() -> None:
    chosen = select(SCORES, top_k=2, top_p=2)  # images 0 2 | 1 2 | 3 4
    hidden = torch.tensor([0, 1, 1, 2, 0])
    overall, per_class = precision(chosen, hidden)
    # right: 0 yes, 2 no | 1 yes, 2 yes | 3 yes, 4 no
    assert overall == pytest.approx(4 / 6)
    assert per_class == [pytest.approx(0.5), pytest.approx(1.0), pytest.approx(0.5)]
    none_kept = select(torch.tensor([[0.9, 0.1]]), top_k=1, top_p=1)
    assert precision(none_kept, torch.tensor([0]))[1] == [1.0, None]
