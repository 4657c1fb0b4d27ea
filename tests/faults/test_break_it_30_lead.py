"""Break-it round 30: the lead's causes (and items round 29 left).

C1. (Round 29's Left.) `analyze --csv --json` printed the JSON alone, silently dropping the
    CSV asked for: the two are refused together in one line.
C2. (Fixer M1's note.) `analyze`'s MODEL (and predict's, every command's that takes one) did
    not expand a leading `~`, which model.name and data.root do.
C3. (Fixer R1's note.) The doctor advised as diverged a run stored failed in eval mode whose
    train/loss spiked and came back down (the loop judges by the last loss too).
C4. (Fixer G's note.) A distill stopped after its last stage (while its figure is drawn)
    exited 130 saying nothing: it says the study's stop line, as a sweep now does.
C5. (Fixer T1's note.) `run --resume` took a dlperf.track run whose config holds every
    section of an experiment for an engine run: the TRACKED mark decides there too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_30_doctor import IN_EVAL_MODE, _finding

Cli = Callable[..., CliResult]


def test_analyze_refuses_json_and_csv_together(cli: Cli) -> None:
    done = cli("analyze", "smallcnn", "--input", "1,8,8", "--csv", "--json")
    assert done.code == 2 and done.out == "", done
    assert done.err.strip().splitlines() == [
        "error: give --json (the whole result) or --csv (the per-layer rows), not both"
    ], done.err


def test_analyze_reads_a_model_file_under_a_leading_tilde(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Fixer M1's note.) `analyze '~/net.py:make'` said "model file ~/net.py not found"
    where model.name's `~` is the home directory."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "net.py").write_text(
        "import torch.nn as nn\n"
        "def make(num_classes=10, in_channels=1):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))\n"
    )
    done = cli("analyze", "~/net.py:make", "--input", "1,8,8", "--json")
    assert done.code == 0, done.err
    assert json.loads(done.out)["totals"]["params"] == 64 * 10 + 10


def test_the_doctor_does_not_call_a_spike_that_came_back_down_divergence(
    cli: Cli, store: RunStore
) -> None:
    """(Fixer R1's note.) A run stored failed with "evaluation loss became nan" whose stored
    train/loss spiked past 100 x and came back down was advised as diverged by the doctor,
    where the loop, which judges by the last loss too, blames the model's eval mode."""
    exp = {section: {} for section in ("model", "data", "run")} | {"train": {"lr": 0.1}}
    run = store.create_run("spike", "run", exp)
    losses = [("train/loss", 1, 2.3), ("train/loss", 2, 1e4), ("train/loss", 3, 0.5)]
    store.log_metrics(run, losses)
    store.finish_run(run, "failed", error=IN_EVAL_MODE)
    assert _finding(cli("doctor")) == [
        "error    diverged: the run failed: evaluation loss became nan: the model's scores in "
        "eval mode were not finite",
        "fix: look at what its forward does when not training (model.eval())",
    ]


def test_a_distill_stopped_as_its_figure_is_drawn_says_how_to_continue(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Fixer G's note, the tester's cause 6.) Ctrl-C while the figure is drawn: exit 130 and
    no line. The study's stages are stood in for (run_distill makes the study and returns), the
    figure stopped in-process: the documented line, naming the study this command made. Since
    round 68 a study whose every stage is stored finished is whole and one stop then does not
    count (tests/faults/test_break_it_68_distill_whole.py): the stand-in's study has a stage
    that failed, which continuing it runs again."""
    from dlperf.distill import runner
    from dlperf.distill.summary import DistillResult
    from dlperf.report import distill as figure
    from tests.faults.test_break_it_26_stops import _stop

    def staged(job: Any, store: Any, *args: Any) -> DistillResult:
        study = store.create_study("smallcnn", "distill")
        failed = "teacher run 1 failed: the loss diverged"
        return DistillResult(
            study, "smallcnn", None, None, [], None, [], "digits", str(tmp_path), failed
        )

    monkeypatch.setattr(runner, "run_distill", staged)
    monkeypatch.setattr(figure, "distill_figure", lambda result: _stop())
    exp = tmp_path / "d.toml"
    exp.write_text('[model]\nname = "smallcnn"\n[data]\nname = "digits"\n'
                   '[distill]\nunlabeled = "digits:holdout=0.8"\n')  # fmt: skip
    done = cli("distill", str(exp))
    assert done.code == 130, done.err
    assert done.err.splitlines()[-1].startswith("distill study 1 stopped; "), done.err
    assert "--resume 1" in done.err.splitlines()[-1], done.err


def test_a_tracked_run_holding_an_experiments_sections_is_not_resumed(cli: Cli, db: str) -> None:
    """(Fixer T1's note.) `run --resume` of a killed dlperf.track run whose config holds every
    section of an experiment (a Hydra config) took it for an engine run, as the views did
    before the TRACKED mark: it is refused as a tracked run, in one line."""
    import dlperf

    config = {section: {} for section in ("model", "data", "train", "run")}
    with dlperf.track("hydra", config=config, store=db) as run:
        run.log(1, loss=1.0)
    done = cli("run", "--resume", str(run.id))
    assert done.code == 2, done
    assert done.err.splitlines() == [
        f"error: run {run.id} is a dlperf.track run (a training loop of your own): dlperf "
        "cannot resume it (run your loop again)"
    ], done.err
