"""Break-it round 21 (P3, cause C2): `scale` and `distill` make names from run.name (a study
"scale NAME", points "NAME LABEL", stages "NAME-finetune-k10") that the store checked only as
each was written. A scale study with a run.name of 180 characters was recorded, ran its first
round and then failed on its point's run name (229 characters), leaving a study of no runs;
distill trained and scored its teacher before failing on "NAME-select-k10". Either said only
"give a shorter run.name", of a name already under the store's 200 characters.

Now every name the command will make is checked before anything is stored or run, in one
line whose hint is the longest run.name that fits. The commands run whole through the CLI,
torchrun and the training replaced where they would start, against a real SQLite store.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.distributed.contracts import WorkerSpec, write_ranks
from dlperf.distributed.launch import Launch
from dlperf.errors import UserError
from tests.conftest import CliResult, rank_result, write_distill_exp

Cli = Callable[..., CliResult]

STUDY = ["--workers", "1", "--mode", "weak", "--per-worker-batch", "8", "--steps", "10",
         "--warmup-steps", "1", "--repeat", "1", "--no-plots"]  # fmt: skip
TOO_LONG = re.compile(
    r"error: run\.name of (\d+) characters \+ (.+) makes run names of (\d+) characters; the "
    r"run store keeps at most 200 \(give a run\.name of at most (\d+) characters\)"
)


def stored(db: str) -> tuple[list[str], list[str]]:
    """The store's study and run names, read with sqlite3 itself."""
    path = db.removeprefix("sqlite:///")
    if not Path(path).exists():
        return [], []
    with sqlite3.connect(path) as con:
        studies = [row[0] for row in con.execute("select name from studies")]
        runs = [row[0] for row in con.execute("select name from runs")]
    con.close()
    return studies, runs


def refusal(result: CliResult) -> re.Match[str]:
    """The one line a refused name gives, exit 2."""
    assert result.code == 2, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.err, result.err
    found = TOO_LONG.fullmatch(lines[0])
    assert found is not None, lines[0]
    return found


# --- scale ----------------------------------------------------------------------------------


@pytest.fixture
def torchrun(monkeypatch: pytest.MonkeyPatch) -> list[WorkerSpec]:
    """torchrun replaced where the study starts it: each launch is kept, and its ranks report
    10 steps of 0.1 s. Returns the specs launched."""
    from dlperf.distributed import study

    launched: list[WorkerSpec] = []

    def run_torchrun(directory: Path, nproc: int, *args: object, **kwargs: object) -> Launch:
        spec = WorkerSpec.read(directory / "spec.json")
        launched.append(spec)
        ranks = [rank_result(r, [0.1] * 10, None, spec.per_worker_batch, world=nproc)
                 for r in range(nproc)]  # fmt: skip
        write_ranks(directory / "result.json", ranks)
        return Launch(0, [])

    monkeypatch.setattr(study, "run_torchrun", run_torchrun)
    return launched


@pytest.mark.parametrize("letter", ["n", "\N{ROCKET}"])
def test_scale_refuses_a_run_name_its_points_outgrow_before_anything_runs(
    cli: Cli, db: str, tiny_exp: Callable[..., Path], torchrun: list[WorkerSpec], letter: str
) -> None:
    exp = str(tiny_exp())
    result = cli("scale", exp, *STUDY, "--set", f"run.name={letter * 180}")
    given, added, length, most = refusal(result).groups()
    label = "1 workers ddp/allreduce, weak, 8 per worker"
    assert (given, added) == ("180", f"point label {label!r}")
    assert int(length) == 180 + 1 + len(label) and int(most) == 200 - 1 - len(label)
    assert torchrun == [] and stored(db) == ([], [])  # no study, no run, no launch

    # The hint is exact: one character more is refused the same way, and its length runs.
    over = cli("scale", exp, *STUDY, "--set", f"run.name={letter * (int(most) + 1)}")
    assert refusal(over).group(3) == "201"
    assert torchrun == [] and stored(db) == ([], [])
    fits = cli("scale", exp, *STUDY, "--set", f"run.name={letter * int(most)}")
    assert fits.code == 0, fits.err
    assert len(torchrun) == 1
    assert stored(db) == ([f"scale {letter * int(most)}"], [f"{letter * int(most)} {label}"])


def test_scale_max_batch_refuses_it_too(
    cli: Cli, db: str, tiny_exp: Callable[..., Path], torchrun: list[WorkerSpec]
) -> None:
    name = f"run.name={'m' * 190}"
    args = ["--workers", "1", "--memory-cap-gb", "4", "--no-plots", "--set", name]
    result = cli("scale", "max-batch", str(tiny_exp()), *args)
    given, added, length, most = refusal(result).groups()
    assert (given, added) == ("190", "point label '1 workers ddp/allreduce'")
    assert (length, most) == ("214", "176")
    assert torchrun == [] and stored(db) == ([], [])


# --- distill --------------------------------------------------------------------------------


@pytest.fixture
def trained(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Training and the teacher's scoring replaced: each keeps the run's name (the teacher's
    name for scoring) and stops the command. Returns what was started."""
    from dlperf.distill import runner, teacher

    started: list[str] = []

    def run_experiment(exp: Any, *args: object, **kwargs: object) -> None:
        started.append(exp.run.name)
        raise UserError("stopped where training starts")

    def score(given: Any, *args: object, **kwargs: object) -> None:
        started.append(f"scoring {given.run_id}")
        raise UserError("stopped where scoring starts")

    monkeypatch.setattr(runner, "run_experiment", run_experiment)
    monkeypatch.setattr(teacher, "score", score)
    return started


def test_distill_refuses_a_run_name_its_stages_outgrow_before_the_teacher_trains(
    cli: Cli, db: str, tmp_path: Path, trained: list[str]
) -> None:
    exp = str(write_distill_exp(tmp_path))
    args = ["distill", exp, "--unlabeled", "digits:holdout=0.5", "--top-k", "3,10"]
    result = cli(*args, "--set", f"run.name={'d' * 190}")
    given, added, length, most = refusal(result).groups()
    # "-pretrain-k10" and "-finetune-k10" are the longest; the first of them is told
    assert (given, added, length, most) == ("190", "suffix '-pretrain-k10'", "203", "187")
    assert trained == [] and stored(db) == ([], [])

    over = cli(*args, "--set", f"run.name={'d' * 188}")
    assert refusal(over).group(3) == "201"
    assert trained == [] and stored(db) == ([], [])
    # A run.name of 187 characters passes the check and reaches the teacher's training.
    fits = cli(*args, "--set", f"run.name={'d' * 187}")
    assert fits.code == 2 and "stopped where training starts" in fits.err, fits.err
    assert trained == [f"{'d' * 187}-teacher"]
    assert stored(db) == (["d" * 187], [])
