"""A run's clocks, and the one label each has in every table (`dlperf run`'s summary, the
sweep table, `runs show` and `runs compare`), so that figures of different clocks are never
read as one.

- `elapsed_s`: wall time of the epochs, training steps (the warm-up too) and evaluation.
- `time_to_target_s`: the same clock, read as the first epoch whose validation accuracy
  reached target.accuracy ends: never more than `elapsed_s`.
- `train_time_s`: the training steps after the warm-up only, no evaluation; what throughput
  divides by, so it is usually well under `elapsed_s`.
- `epoch/time_s` (the per-epoch table's column): an epoch's training steps, the warm-up
  included, evaluation not; so the epochs' values sum to less than `elapsed_s`.
"""

from __future__ import annotations

from collections.abc import Iterable

WALL = "train+eval"  # what the wall clock counts, said in its labels
TIME_TO_TARGET = f"wall s to target ({WALL})"
TRAIN_TIME = "train s (steps after warm-up)"
EPOCH_TIME = "train s (all steps)"  # an epoch's epoch/time_s: warm-up included, no evaluation


def elapsed_label(epochs: Iterable[object]) -> str:
    """`elapsed_s`'s label over runs that trained `epochs` (one entry per run): the time for N
    epochs when every run trained N, else the time to each run's last epoch."""
    counts = {n for n in epochs if isinstance(n, int)}
    if len(counts) != 1:
        return f"wall s to last epoch ({WALL})"
    (n,) = counts
    return f"wall s for {n} epoch{'s' if n != 1 else ''} ({WALL})"


def label(key: str, epochs: Iterable[object]) -> str:
    """The label of a summary key in tables: its clock's, for the clocks; the key otherwise."""
    if key == "elapsed_s":
        return elapsed_label(epochs)
    return {"time_to_target_s": TIME_TO_TARGET, "train_time_s": TRAIN_TIME}.get(key, key)
