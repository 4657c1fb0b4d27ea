"""dlperf.cli.scale: `dlperf scale`'s argument checks and its job files (--emit), none of
which starts a worker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlperf.cli import app
from tests.cli.test_app import one_line_error
from tests.conftest import REPO, CliResult

EXP = str(REPO / "examples" / "scale_digits_weak.toml")


@pytest.mark.parametrize("command", [[], ["run"], ["max-batch"], ["allreduce"]])
def test_help_ends_with_an_example(command: list[str]) -> None:
    done = CliRunner().invoke(app, ["scale", *command, "--help"])
    assert done.exit_code == 0 and "Example: dlperf scale" in done.output


def test_a_file_alone_is_short_for_scale_run(cli: Callable[..., CliResult]) -> None:
    short = cli("scale", EXP, "--emit", "slurm", "--nnodes", "2", "--workers", "2,4")
    long = cli("scale", "run", EXP, "--emit", "slurm", "--nnodes", "2", "--workers", "2,4")
    assert short.code == long.code == 0, short.err
    # The job runs on each node the command line as it was given.
    assert short.out == long.out.replace("dlperf scale run ", "dlperf scale ")


def test_emit_slurm_writes_a_job_that_runs_this_command_on_every_node(
    cli: Callable[..., CliResult],
) -> None:
    result = cli("scale", EXP, "--emit", "slurm", "--nnodes", "2", "--workers", "2")
    assert result.code == 0, result.err
    assert result.out.startswith("#!/bin/bash\n")
    assert "#SBATCH --nodes=2" in result.out
    srun = next(line for line in result.out.splitlines() if line.startswith("srun "))
    # The user's flags kept, --nnodes and each node's rank and rendezvous last (they win).
    assert srun.endswith(
        f"dlperf scale {EXP} --workers 2 --nnodes 2 --node-rank $SLURM_NODEID "
        "--rdzv $head_node:29500'"
    )


def test_emit_out_writes_the_file_and_says_so(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    result = cli(
        "scale", EXP, "--emit", "slurm", "--nnodes", "2", "--workers", "2", "--out", "job.sh"
    )
    assert result.code == 0, result.err
    assert result.out == ""
    assert result.err.splitlines()[0] == "wrote job.sh"
    assert (tmp_path / "job.sh").read_text().startswith("#!/bin/bash\n")


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["run", "--workers", "1"], "give an experiment file (e.g. examples/scale_digits_weak"),
        ([EXP, "--csv", "--json"], "--csv prints a scaling study's tables (not with --json)"),
        (["allreduce", "--iters", "0"], "--iters must be at least 1, got 0"),
        ([EXP, "--workers", "x"], "--workers: scale.workers.0: Input should be a valid integer"),
        ([EXP, "--emit", "nope"], "unknown --emit 'nope'"),
        (["missing.toml"], "missing.toml: no such experiment file"),
        ([EXP, "--steps", "many"], "Invalid value for '--steps'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    cli: Callable[..., CliResult], args: list[str], text: str
) -> None:
    one_line_error(cli("scale", *args), text)
