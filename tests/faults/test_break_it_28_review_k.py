"""A review of break-it round 28's converge, receptive-field and loader fixes (fixer K).

C1. `--predict workers=256` on a table measured at batch 64 predicted a global batch of 64 over
256 workers (exit 0): the batch-below-workers check ran before the default batch was filled in.
C2. Ops that keep positions ended a receptive field: channel_shuffle, a repeat along channels,
a masked assignment `y[y < 0] = 0` (index_put with a boolean mask of the input's shape).
C3. Every epoch start with data.num_workers > 0 under a finite `ulimit -u` read every
/proc/*/status (0.5-1 s on a node of 3,000-5,000 processes), even where the system's thread
count alone is well under the limit.
C4. A tensor too large for torch was labelled "batch x C x H x W" whatever the input's rank.
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.analytic.counting import analyze_module, refuse_too_large
from dlperf.converge import plan
from dlperf.converge.speed import MEANINGS, SpeedFit
from dlperf.data import loaders
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_break_it_28_counting import Between, reached
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# --- C1: the default batch is checked against the workers too ---------------------------------

LEAST = "(a data-parallel step takes at least one sample a worker: the batch is the global one)"


@pytest.fixture
def speed_csv(tmp_path: Path) -> Path:
    """An optimus-sync table measured at global batch 64 alone."""
    th = (1e-4, 0.01, 0.002, 0.001, 0.003)
    rows = [
        f"{w},{p},64,{th[0] * 64 / w + th[1] + th[2] * w / p + th[3] * w + th[4] * p!r}\n"
        for w in (1, 2, 4, 8)
        for p in (1, 2, 4)
    ]
    path = tmp_path / "speed.csv"
    path.write_text("workers,ps,global_batch,step_time_s\n" + "".join(rows))
    return path


def test_a_prediction_past_the_default_batch_is_refused(cli: Cli, speed_csv: Path) -> None:
    result = cli("converge", "speed", "fit", "--csv", str(speed_csv), "--model", "optimus-sync",
                 "--predict", "workers=256")  # fmt: skip
    told = "--predict workers=256: batch 64, the table's typical batch, is less than workers 256"
    one_line(result, 2, f"{told} {LEAST}")


def test_a_plan_past_the_batch_is_refused_and_the_allocator_stops_at_it() -> None:
    fit = SpeedFit("optimus-sync", dict.fromkeys(MEANINGS["optimus-sync"], 0.1), 0, 0, 8, True, "")
    with pytest.raises(UserError) as e:
        plan.plan(100, fit, [1], [1, 2, 4], batch=2)
    assert str(e.value) == (
        f"--workers 4 is more than the global batch 2: {LEAST[1:-1]} "
        "(give --workers up to 2, or --batch 4 or more)"
    )
    # θ0·M/w dominates: a worker more always helps, until the batch of 2 runs out
    fast = SpeedFit("optimus-sync", {**fit.params, "theta0": 100.0}, 0, 0, 2, True, "")
    (job,) = plan.allocate([plan.Job("a", 100, fast, batch=2)], 8)
    assert (job.workers, job.ps) == (2, 1)  # a 3rd worker would save 33 of 100 s a step


# --- C2: ops that keep positions keep the field -------------------------------------------------


def _zero_negatives(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[y < 0] = 0
    return y


KEEPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "F.channel_shuffle": lambda x: nn.functional.channel_shuffle(x, 2),
    "nn.ChannelShuffle": nn.ChannelShuffle(2),
    "repeat along channels": lambda x: x.chunk(2, 1)[0].repeat(1, 2, 1, 1),
    "masked assignment": _zero_negatives,
    "masked_scatter of a constant": lambda x: x.masked_scatter(
        x < 0, torch.zeros(x.shape, dtype=x.dtype)
    ),
}


@pytest.mark.parametrize("name", KEEPS)
def test_an_op_that_keeps_positions_keeps_the_field(name: str) -> None:
    assert reached(Between(KEEPS[name])) == (list(range(5)), list(range(3, 8)))
    rf = analyze_module(Between(KEEPS[name]), [1, 16, 16]).receptive_field
    assert (rf["last_spatial_layer"], rf["size"], rf["start"]) == ("c2", [5, 5], [2.5, 2.5])


def _put_at_a_column(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[..., torch.tensor([0])] = y[..., torch.tensor([1])]  # column 1 moved to column 0
    return y


ENDS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "index_put": _put_at_a_column,
    # the source's elements fill the masked positions in order: they move
    "masked_scatter": lambda x: x.masked_scatter(x < 0, x.flip(1)),
}


@pytest.mark.parametrize("name", ENDS)
def test_a_put_that_moves_positions_still_ends_the_field(name: str) -> None:
    rf = analyze_module(Between(ENDS[name]), [1, 16, 16]).receptive_field
    assert rf["defined"] is False and rf["reason"].endswith(f"aten.{name} in (model)")


# --- C3: the /proc scan is skipped where the system's threads cannot reach the limit -----------


@pytest.mark.parametrize(("soft", "scanned"), [(10_000, False), (1_000 + 4 * 2 + 1, True)])
def test_the_proc_scan_is_skipped_below_the_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, soft: int, scanned: bool
) -> None:
    """With 1,000 threads on the system, 2 workers need at most 1,010: a soft limit of 10,000
    needs no count of the user's own; one of 1,009 does."""
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.50 0.40 0.30 3/1000 12345\n")
    monkeypatch.setattr(loaders, "LOADAVG", str(loadavg))
    monkeypatch.setattr(resource, "getrlimit", lambda _: (soft, soft))
    monkeypatch.setattr(loaders.os, "getuid", lambda: 1000)
    calls: list[int] = []
    monkeypatch.setattr(loaders, "_user_tasks", lambda: calls.append(1) or 1)
    loaders._room_for_tasks(2)
    assert calls == ([1] if scanned else [])


# --- C4: the label of a tensor too large follows the input's rank -------------------------------


@pytest.mark.parametrize(
    ("shape", "label"),
    [([100], "batch x input = 100000000000000000 x 100"),
     ([1, 4, 25], "batch x C x H x W = 100000000000000000 x 1 x 4 x 25")],
)  # fmt: skip
def test_the_too_large_label_follows_the_rank(shape: list[int], label: str) -> None:
    with pytest.raises(UserError) as e:
        refuse_too_large(10**17, shape, torch.float32, "analyze")
    assert e.value.message.startswith(f"{label} = 10,000,000,000,000,000,000 elements")
