"""Break-it round of issue 41 on `dlperf distill`: `--top-k 1000000000` against a pool of
1,035 images trained a student on the whole pool and said nothing of it."""

from __future__ import annotations

from dlperf.distill.runner import oversized_k


def test_a_k_not_below_the_pool_is_warned_of() -> None:
    assert oversized_k([10, 1000000000, 1035], 1035) == [
        "K = 1000000000, 1035 is not below the 1035 unlabelled images: every image is kept, "
        "so K selects nothing (give K values below the pool's size)"
    ]


def test_ks_below_the_pool_are_not() -> None:
    assert oversized_k([10, 25, 1034], 1035) == []
