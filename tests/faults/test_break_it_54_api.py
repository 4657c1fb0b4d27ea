"""Break-it round 54, fixer G6: the Python API's `track` block closed by GeneratorExit, and
`analyze` given an empty shape.

- T3 C1: a `with dlperf.track(...)` block held by a generator that was dropped after a
  `break`, or entered by hand and never left before the script ended, was stored `failed`
  with the error `GeneratorExit: ` and its summary's final values dropped. Closing the
  generator is the program ending the loop early, as a `sys.exit(0)` in it: the run is
  `finished`, its summary kept. A block never left when the script ended on an uncaught
  exception is `failed` with that exception, its summary kept too.
- T3 C2: `dlperf.analyze("smallcnn", ())` (or `[]`) counted the default 3x32x32 where the
  command refuses an empty --input: it is the command's `UserError` now.
"""

from __future__ import annotations

import gc
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from torch import nn

import dlperf
from dlperf.errors import UserError


def _tracked(store: str, steps: int) -> Iterator[int]:
    with dlperf.track("gen", store=store) as run:
        for i in range(steps):
            run.log(i, loss=float(i))
            yield i


def test_generator_left_after_break_is_finished_with_its_summary(db: str) -> None:
    for i in _tracked(db, 100):
        if i == 5:
            break
    gc.collect()
    store = dlperf.Store(db)
    (run,) = store.runs()
    assert (run.status, run.error) == ("finished", None)
    assert len(store.metrics(run.id, "loss")) == 6
    assert run.summary is not None and run.summary.get("final") == {"train/loss": 5.0}


def test_generator_closed_by_hand_is_finished(db: str) -> None:
    steps = _tracked(db, 100)
    next(steps)
    steps.close()
    (run,) = dlperf.Store(db).runs()
    assert (run.status, run.error) == ("finished", None)


_NEVER_LEFT = """
import sys, dlperf
cm = dlperf.track("never left", store=sys.argv[1]); run = cm.__enter__()
for i in range(3):
    run.log(i, loss=float(i))
if sys.argv[2] == "raise":
    raise ValueError("boom")
"""
_NOT_LEFT = "the track block was not left before the script ended on"


@pytest.mark.parametrize(
    ("end", "status", "error"),
    [
        ("end", "finished", None),
        ("raise", "failed", f"{_NOT_LEFT} ValueError: boom"),
    ],
)
def test_block_never_left_is_marked_by_how_the_script_ended(
    db: str, tmp_path: Path, end: str, status: str, error: str | None
) -> None:
    ended = subprocess.run(
        [sys.executable, "-c", _NEVER_LEFT, db, end], capture_output=True, text=True, timeout=240
    )
    assert "GeneratorExit" not in ended.stderr and "ignored" not in ended.stderr, ended.stderr
    (run,) = dlperf.Store(db).runs()
    assert (run.status, run.error) == (status, error)
    assert run.summary is not None and run.summary.get("final") == {"train/loss": 2.0}


@pytest.mark.parametrize("empty", [(), []])
def test_analyze_refuses_an_empty_shape_as_the_command_does(empty: list[int]) -> None:
    said = "analyze.input: must have 1 or more values (got [])"
    with pytest.raises(UserError, match=re.escape(said)):
        dlperf.analyze("smallcnn", empty)
    with pytest.raises(UserError, match=r"must have 1 or more values"):
        dlperf.analyze(nn.Linear(2, 2), empty)
