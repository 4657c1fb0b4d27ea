"""Break-it round 65, Y3 cause 3: distill's teacher deleted while distill scores with it.

Before: a plain `runs delete 1` of the teacher run, made while distill scored the pool with it
(from another terminal), ended distill in "error: no run 1 in the store (see `dlperf runs
list`)", exit 2: the input blamed, though it named no run. Now distill says its teacher was
deleted under it, exit 1, and how to go on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.distill import teacher
from dlperf.store import RunStore
from tests.conftest import TINY, CliResult

EXP = (
    TINY.format(epochs=1)
    + """
[distill]
unlabeled = "digits:holdout=0.8"
top_k = [10]
"""
)


def test_a_teacher_deleted_while_it_scores_is_said(
    cli: Callable[..., CliResult],
    store: RunStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "dist.toml").write_text(EXP)
    real = teacher.score

    def deleted_first(given: teacher.Teacher, *args: Any) -> Any:
        store.delete_runs([given.run_id])  # as `runs delete` from another terminal does
        return real(given, *args)

    monkeypatch.setattr(teacher, "score", deleted_first)
    done = cli("distill", "dist.toml")
    assert done.code == 1, done.err
    assert done.err.splitlines()[-1] == (
        "error: teacher run 1 was deleted (`dlperf runs delete`) while distill scored with it "
        "(run distill again: without --teacher it trains a teacher anew)"
    )
    assert "no run 1" not in done.err
