"""dlperf.converge.ensemble on the failure modes of issue 40, each reproduced on generated
curves: noise carried forward unchanged, accuracy as a count over a finite validation set,
one family taking all the weight, "cannot tell" too shy, linear progress predicted late."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dlperf.converge import ensemble


def step_decay_curve(seed: int, early: float, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """60 epochs, the learning rate divided by 10 at epoch 20: the accuracy rises again after
    it and its epoch-to-epoch noise drops from `early` to `early / ratio` (as on real
    step-decay logs, where the last quarter is 3-7x quieter than the second)."""
    rng = np.random.default_rng(seed)
    k = np.arange(1.0, 61.0)
    decayed = k > 20
    mean = 0.85 - 0.5 * np.exp(-k / 5) + 0.05 * decayed * (1 - np.exp(-(k - 20) / 15))
    sd = np.where(decayed, early / ratio, early)
    return k, np.clip(mean + sd * rng.standard_normal(k.size), 0.0, 1.0)


def test_late_best_ever_targets_are_not_predicted_too_early() -> None:
    """Twenty step-decay curves seen to epoch 30, each asked for its best accuracy up to epoch
    60: at most 2 of the 90% intervals end before the measured epoch. The noise of the whole
    window, carried forward, had the late "best ever" reached through noise long before it
    was (16 of 21 misses too early in issue 40); the noise is now that of the window's last
    points."""
    too_early = answered = 0
    for seed in range(20):
        k, acc = step_decay_curve(seed, 0.03, 5.0)
        target = float(acc.max())
        if acc[:30].max() >= target:
            continue
        p = ensemble.predict(ensemble.fit(k[:30], 1.0 - acc[:30]), target, "accuracy", k, acc)
        if p.interval is not None and p.actual_step is not None:
            answered += 1
            too_early += p.interval[1] < p.actual_step
    assert answered >= 10 and too_early <= 2


def cosine_curve(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """40 epochs under a cosine schedule, the epoch-to-epoch noise proportional to the
    learning rate (0.022 at the start, 0.002 at the end)."""
    rng = np.random.default_rng(seed)
    k = np.arange(1.0, 41.0)
    lr = 0.5 * (1 + np.cos(np.pi * k / 40))
    acc = 0.9 - 0.5 * np.exp(-k / 5) + rng.normal(0, 1, k.size) * (0.002 + 0.02 * lr)
    return k, np.clip(acc, 0.0, 1.0)


def test_noise_that_fades_gives_no_false_alarm() -> None:
    """Twenty cosine-schedule curves seen to epoch 20, each asked for a target it never
    reaches (half way from its best to 1): at most 4 are given an epoch within the 40
    measured. The noise of epoch 20 carried forward unchanged reached it through noise in 7."""
    alarms = 0
    for seed in range(20):
        k, acc = cosine_curve(seed)
        target = float(acc.max() + 0.5 * (1.0 - acc.max()))
        p = ensemble.predict(ensemble.fit(k[:20], 1.0 - acc[:20]), target, "accuracy")
        alarms += p.predicted_step is not None and p.predicted_step <= 40
    assert alarms <= 4


def counted_curve(n: int, seed: int, plateau: float) -> tuple[np.ndarray, np.ndarray]:
    """30 epochs of an accuracy measured on `n` images: a count over n, below `plateau`."""
    rng = np.random.default_rng(seed)
    k = np.arange(1.0, 31.0)
    acc = plateau - 0.5 * np.exp(-k / 4) + rng.normal(0, 0.01, k.size)
    return k, np.clip(np.round(acc * n), 0, n) / n


@settings(max_examples=10, deadline=None)
@given(n=st.integers(40, 400), seed=st.integers(0, 2**16), share=st.floats(0.001, 1.0))
def test_a_target_only_a_perfect_score_reaches_is_never_given_an_epoch(
    n: int, seed: int, share: float
) -> None:
    """On n validation images there is no accuracy between (n − 1)/n and 1: a target there
    (0.9966 on 144 images) needs n/n. A curve that has not had a perfect score does not say
    when its last image will be learned; Gaussian noise added to a smooth curve said it
    would be, soon (all the false alarms of issue 40 came from small validation sets)."""
    k, acc = counted_curve(n, seed, plateau=1.0 - 2.5 / n)
    target = (n - 1 + share) / n
    if acc.max() >= 1.0:
        return  # a perfect score measured: nothing to predict
    # n is given: val_size(acc) cannot always read it back (50 images' counts, 0.02 apart, are
    # also any values written to two decimals; `converge` then predicts without it)
    p = ensemble.predict(ensemble.fit(k, 1.0 - acc), target, "accuracy", val_size=n)
    assert p.verdict == "cannot tell" and p.predicted_step is None and p.interval is None
    assert p.reason is not None and f"{n}/{n}" in p.reason and "\n" not in p.reason


def test_the_validation_set_size_is_read_from_the_values() -> None:
    _, acc = counted_curve(144, 0, 0.98)
    assert ensemble.val_size(acc) == 144
    assert ensemble.val_size(np.round(acc, 4)) == 144  # as logs round them
    assert ensemble.val_size(np.linspace(0.3, 0.9123457, 30)) is None  # a loss-like float


def test_predict_on_a_144_image_curve_names_no_epoch_for_a_perfect_score(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    k, acc = counted_curve(144, 1, 1.0 - 2.5 / 144)
    assert acc.max() < 1.0
    csv = tmp_path / "val144.csv"
    csv.write_text(
        "epoch,val_acc1\n" + "".join(f"{e:g},{a:.4f}\n" for e, a in zip(k, acc, strict=True))
    )
    args = ["converge", "predict", "--csv", str(csv), "--x", "epoch", "--y", "val_acc1",
            "--metric", "accuracy", "--upto", "0.5", "--target", "0.9966"]  # fmt: skip
    r = cli(*args, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["verdict"] == "cannot tell" and doc["predicted_step"] is None
    assert "144/144" in doc["reason"]
    r = cli(*args)
    assert r.code == 0 and "cannot tell" in r.out
    assert len([line for line in r.err.splitlines() if "144/144" in line]) == 1


def raised_lr_curve(seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """A curve whose learning rate is raised twice (at random epochs): each raise knocks the
    accuracy down for a few epochs. With the window's length."""
    rng = np.random.default_rng(seed)
    epochs = int(rng.integers(20, 50))
    k = np.arange(1.0, epochs + 1.0)
    r1, r2 = sorted(rng.choice(np.arange(5, epochs - 3), 2, replace=False))
    acc = 0.95 - 0.6 * np.exp(-k / rng.uniform(2, 8))
    for raised in (r1, r2):
        acc = acc - rng.uniform(0, 0.15) * np.exp(-(k - raised) / 2) * (k >= raised)
    acc = acc + rng.normal(0, rng.uniform(0.001, 0.02), epochs)
    return k, np.clip(acc, 0.0, 1.0), max(4, int(epochs * rng.choice([0.3, 0.5])))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), multiple=st.sampled_from([1.2, 1.5, 2.0]))
def test_no_family_takes_all_the_weight_and_cannot_tell_only_when_most_curves_miss(
    seed: int, multiple: float
) -> None:
    """A curve whose lr is raised at epochs 10 and 20 got "epoch 14, interval [14, 14]" and
    was reached at 18 (issue 40): the exp family took 98% of the weight. Every family keeps
    its floor, and an interval is never a single step. The verdict "cannot tell" is kept for
    real ignorance: when it says that a share of the curves miss the target, that share is at
    least half (one fit and prediction of each curve serves both checks)."""
    k, acc, n_fit = raised_lr_curve(seed)
    post = ensemble.fit(k[:n_fit], 1.0 - acc[:n_fit])
    assert min(post.family_weight.values()) >= 0.99 * ensemble.FAMILY_FLOOR
    target = float(acc[k <= multiple * k[n_fit - 1]].max())
    p = ensemble.predict(post, target, "accuracy")
    if p.interval is not None:
        assert p.interval[1] > p.interval[0]
    missing = re.match(r"(\d+)% of the curves", p.reason or "")
    if p.verdict == "cannot tell" and missing:
        assert int(missing.group(1)) >= 50


def knocked_back_curve(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """40 epochs; the lr raised at epochs 10 and 20 knocks the accuracy back each time."""
    rng = np.random.default_rng(seed)
    k = np.arange(1.0, 41.0)
    acc = 0.9 - 0.5 * np.exp(-k / 4)
    for raised in (10, 20):
        acc = acc - 0.08 * np.exp(-(k - raised) / 2) * (k >= raised)
    return k, acc + rng.normal(0, 0.01, k.size)


def test_most_curves_reaching_the_target_is_an_answer() -> None:
    """Seen to epoch 12, asked for the best accuracy up to epoch 24: it said "cannot tell"
    where only 9-14% of its curves missed the target by 3x the horizon. Now an answer whose
    interval holds the measured epoch; an open upper end says so."""
    for seed in range(3):
        k, acc = knocked_back_curve(seed)
        target = float(acc[k <= 24].max())
        p = ensemble.predict(ensemble.fit(k[:12], 1.0 - acc[:12]), target, "accuracy", k, acc)
        assert p.verdict == "answer" and p.interval is not None and p.actual_step is not None
        assert p.interval[0] <= p.actual_step <= p.interval[1]
        if math.isinf(p.interval[1]):
            assert p.reason is not None and "not bounded above" in p.reason


def test_linear_progress_is_not_predicted_late() -> None:
    """Accuracy rising in a straight line (gradient clipping, a slow AdamW run), seen to epoch
    30, asked for the best up to epoch 45: the median of five within 5%, 4 of 5 intervals
    holding the measured epoch. Every family decelerated, and one took all the weight: 9-20%
    late (median 20%), and the intervals missed."""
    errors, covered = [], 0
    for seed in range(5):
        rng = np.random.default_rng(seed)
        k = np.arange(1.0, 61.0)
        acc = np.clip(0.2 + 0.012 * k + rng.normal(0, 0.005, k.size), 0.0, 1.0)
        target = float(acc[k <= 45].max())
        p = ensemble.predict(ensemble.fit(k[:30], 1.0 - acc[:30]), target, "accuracy", k, acc)
        assert p.error_pct is not None and p.interval is not None and p.actual_step is not None
        errors.append(abs(p.error_pct))
        covered += p.interval[0] <= p.actual_step <= p.interval[1]
    assert np.median(errors) <= 5 and covered >= 4
