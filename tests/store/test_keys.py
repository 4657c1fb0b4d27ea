"""dlperf.store.keys: per-epoch metrics move onto the global-step axis of per-step ones."""

from __future__ import annotations

from dlperf.store.keys import on_global_steps, per_epoch


def test_per_epoch_keys_are_those_stored_at_the_epoch() -> None:
    assert [per_epoch(k) for k in ("epoch/lr", "val/acc1", "phase/data", "train/loss")] == [
        True, True, True, False,
    ]  # fmt: skip
    assert not per_epoch("validation/acc1")  # a prefix, not a substring


def test_epochs_end_at_their_last_global_step_with_an_epoch_series() -> None:
    series = {
        "train/loss": [(1, 2.0, 10.0), (7, 1.0, 17.0)],
        "val/acc1": [(1, 0.5, 12.0), (2, 0.7, 22.0)],
        "epoch/lr": [(2, 0.01, 21.0), (1, 0.1, 11.0)],  # logged before val/acc1 each epoch
    }
    moved = on_global_steps(series, 4)
    assert moved["train/loss"] == series["train/loss"]  # already per step
    assert moved["val/acc1"] == [(4, 0.5, 12.0), (8, 0.7, 22.0)]
    assert moved["epoch/lr"] == [(8, 0.01, 21.0), (4, 0.1, 11.0)]
    # one point per epoch, at the wall time of the first per-epoch metric logged for it
    # (dict order: val/acc1 comes first)
    assert moved["epoch"] == [(4, 1.0, 12.0), (8, 2.0, 22.0)]
    assert series["val/acc1"] == [(1, 0.5, 12.0), (2, 0.7, 22.0)]  # the input is not changed


def test_fractional_steps_per_epoch_round_to_a_step() -> None:
    moved = on_global_steps({"val/loss": [(1, 1.0, 0.0), (2, 0.5, 1.0), (3, 0.4, 2.0)]}, 2.5)
    assert [s for s, _, _ in moved["val/loss"]] == [2, 5, 8]  # round(2.5) == 2, round(7.5) == 8
    assert [s for s, _, _ in moved["epoch"]] == [2, 5, 8]


def test_without_steps_per_epoch_the_series_stay_as_stored() -> None:
    series = {"val/acc1": [(1, 0.5, 1.0)]}
    for unknown in (None, 0):
        assert on_global_steps(series, unknown) == series
    assert on_global_steps({"train/loss": [(3, 1.0, 0.0)]}, 10) == {"train/loss": [(3, 1.0, 0.0)]}


def test_a_stored_epoch_series_is_kept() -> None:
    series = {"epoch": [(1, 1.0, 5.0)], "val/acc1": [(1, 0.5, 1.0)]}
    assert on_global_steps(series, 10)["epoch"] == [(1, 1.0, 5.0)]
