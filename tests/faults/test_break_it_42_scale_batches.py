"""Break-it round 42, T1's C2 (cases 20, 21): `dlperf scale EXP --mode weak
--per-worker-batch 16 --global-batch 64` ran the weak series alone and said nothing of the 64,
exit 0; `--mode strong --global-batch 32 --per-worker-batch 16` dropped the 16. A user who typed
both batches and forgot `--mode weak,strong` got half the study, told nothing (the missing
batch was refused: `--mode weak needs --per-worker-batch N`; the extra one was not).

Now a batch given on the command line (its flag or `--set scale.KEY=`) for a mode the study
does not run is refused in one line naming both, exit 2, before anything is stored or written
(`planning.load_study`). One the experiment file gives stays a default: a file may hold both
batches and the command line pick the mode.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "scale_digits_weak.toml")
STUDY = ["--workers", "1", "--steps", "1", "--warmup-steps", "0", "--repeat", "1", "--synthetic",
         "--no-plots", "--no-comm-split"]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--mode", "weak", "--per-worker-batch", "16", "--global-batch", "64"],
         "--global-batch goes with --mode strong, and the study's mode is weak"),
        (["--mode", "weak", "--per-worker-batch", "16", "--set", "scale.global_batch=64"],
         "--global-batch goes with --mode strong"),
        (["--mode", "strong", "--global-batch", "32", "--per-worker-batch", "16"],
         "--per-worker-batch goes with --mode weak, and the study's mode is strong"),
    ],
)  # fmt: skip
def test_a_batch_for_a_mode_the_study_does_not_run_is_refused(
    cli: Cli, db: str, args: list[str], said: str
) -> None:
    result = cli("scale", EXAMPLE, *STUDY, *args)
    one_line(result, 2, said, "--mode weak,strong runs both series")
    assert RunStore.open(db).list_runs() == []  # nothing ran


def test_both_batches_with_both_modes_and_a_files_default_still_plan(
    cli: Cli, tmp_path: Path
) -> None:
    both = ["--mode", "weak,strong", "--per-worker-batch", "16", "--global-batch", "32"]
    assert cli("scale", EXAMPLE, *STUDY, *both, "--emit", "slurm").code == 0
    # the file's per_worker_batch (32) is a default the command line's --mode strong leaves
    strong = ["--mode", "strong", "--global-batch", "32", "--emit", "slurm"]
    done = cli("scale", EXAMPLE, *STUDY, *strong)
    assert done.code == 0, done.err
