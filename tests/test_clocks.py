"""One label per clock (dlperf.clocks): a run's summary shows its time to target beside the
wall clock it is read from, never beside the training-steps clock alone; the sweep table and
`runs compare` show the wall time of the same runs under one label and with one value.
Real runs and a real sweep of tiny digits experiments, through the CLI."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

from dlperf import clocks
from tests.conftest import CliResult

# 128 training images in batches of 32: 4 steps an epoch; a target every point reaches.
BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 128
[train]
epochs = 2
batch_size = 32
lr = 0.05
[target]
accuracy = 0.05
[run]
threads = 1
warmup_steps = 1
checkpoint = false
"""


def cells(out: str, label: str) -> list[str]:
    """The cells after `label` in the one row of a table in `out` that starts with it."""
    rows = [[c.strip() for c in line.split("│")] for line in out.splitlines() if "│" in line]
    found = [row[1:] for row in rows if row[0] == label]
    assert len(found) == 1, f"{label!r} is not one row of\n{out}"
    return found[0]


def column(out: str, header: str) -> list[str]:
    """The cells of the sweep table's column `header`, top to bottom."""
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    at = [c.strip() for c in lines[head].split("┃")].index(header)
    body = itertools.takewhile(lambda line: "│" in line, lines[head + 2 :])
    return [line.split("│")[at].strip() for line in body]


def test_time_to_target_is_shown_beside_the_wall_clock_it_is_read_from(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "exp.toml").write_text(BASE)
    result = cli("run", str(tmp_path / "exp.toml"))
    assert result.code == 0, result.err
    to_target = float(cells(result.out, clocks.TIME_TO_TARGET)[0])
    wall = float(cells(result.out, clocks.elapsed_label([2]))[0])
    train = float(cells(result.out, clocks.TRAIN_TIME)[0])
    assert 0 < to_target <= wall and 0 < train <= wall

    shown = cli("runs", "show", "1", "--json")
    summary = json.loads(shown.out)["summary"]
    assert summary["time_to_target_s"] <= summary["elapsed_s"]
    assert summary["train_time_s"] <= summary["elapsed_s"]
    assert to_target == float(f"{summary['time_to_target_s']:.4g}")


def test_the_sweep_table_and_runs_compare_agree_on_the_wall_clock(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "base.toml").write_text(BASE.replace("epochs = 2", "epochs = 1"))
    (tmp_path / "lr.toml").write_text('base = "base.toml"\n[grid]\n"train.lr" = [0.1, 0.05]\n')
    swept = cli("sweep", str(tmp_path / "lr.toml"))
    assert swept.code == 0, swept.err
    wall = clocks.elapsed_label([1])
    run_ids = [int(c) for c in column(swept.out, "run IDs")]
    in_sweep = dict(zip(run_ids, column(swept.out, wall), strict=True))
    to_target = dict(zip(run_ids, column(swept.out, clocks.TIME_TO_TARGET), strict=True))

    compared = cli("runs", "compare", *map(str, run_ids))
    assert compared.code == 0, compared.err
    in_compare = dict(zip(run_ids, cells(compared.out, wall)[: len(run_ids)], strict=True))
    assert in_compare == in_sweep
    for run_id in run_ids:
        assert 0 < float(to_target[run_id]) <= float(in_sweep[run_id])
    # The training-steps clock is a row of its own, labelled as what it counts.
    train = [float(c) for c in cells(compared.out, clocks.TRAIN_TIME)[: len(run_ids)]]
    assert all(0 < t <= float(in_sweep[i]) for t, i in zip(train, run_ids, strict=True))
