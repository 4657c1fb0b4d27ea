"""Break-it round 39, fixer F4: `dlperf scale run --emit KIND` wrote a job its nodes refuse.

T3 C1. `scale run EXP --mode strong --global-batch 3 --workers 2 --emit slurm --nnodes 2` (and
`--emit kubernetes`) exited 0 with a full job file, whose every node then failed after the
queue wait on what the same study run here refuses up front, in one line, exit 2:
`--global-batch 3 does not split evenly over 2 workers`. --emit ran only the checks of
scale.steps/epochs, mirrored or Horovod on several nodes and the price; not the rest of the
plan's. Also written without a word: --mode strong without --global-batch, a worker count of
the study (not the largest) that does not split over the nodes, --strategy dp on several
nodes, TensorFlow's and Horovod's option checks, and a run.name too long for the store. Now
every job file (slurm, kubernetes, sagemaker, vertex, azureml) is written only once the
study passes every check that needs neither this host nor the job's cluster (this host's
cores, GPUs and installed extras are not the nodes'): each refused in the line the local run
says, exit 2, nothing written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "scale_digits_weak.toml")
ROLE = "arn:aws:iam::123456789012:role/dlperf"
# Each platform's own required options, so that only the study's check can refuse it.
KINDS = {
    "slurm": [],
    "kubernetes": [],
    "sagemaker": ["--output-uri", "s3://bucket/dlperf", "--role", ROLE],
    "vertex": ["--output-uri", "gs://bucket/dlperf"],
    "azureml": ["--output-uri", "azureml://datastores/workspaceblobstore/paths/dlperf"],
}
LOCAL = ["--steps", "1", "--warmup-steps", "0", "--repeat", "1", "--synthetic"]


def refused_everywhere(cli: Cli, tmp_path: Path, args: list[str], message: str) -> None:
    """`scale run EXAMPLE ARGS --emit KIND` of every kind: `message` in one line, exit 2, no
    job printed or written."""
    for kind, extra in KINDS.items():
        out = tmp_path / f"job-{kind}"
        r = cli("scale", "run", EXAMPLE, *args, "--emit", kind, *extra, "--out", str(out))
        one_line(r, 2, message)
        assert r.err.splitlines()[-1] == f"error: {message}", (kind, r.err)
        assert not out.exists(), kind
        printed = cli("scale", "run", EXAMPLE, *args, "--emit", kind, *extra)
        one_line(printed, 2, message)
        assert printed.out == "", (kind, printed.out)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "strong", "--global-batch", "3", "--workers", "2"],
         "--global-batch 3 does not split evenly over 2 workers (give a global batch divisible "
         "by every worker count)"),
        (["--mode", "strong", "--workers", "2"],
         "--mode strong needs --global-batch N (or use --mode weak)"),
        (["--workers", "2", "--set", f"run.name={'x' * 170}"],
         "run.name of 170 characters + point label '2 workers ddp/allreduce, weak, 32 per "
         "worker' makes run names of 215 characters; the run store keeps at most 200 (give a "
         "run.name of at most 155 characters)"),
    ],
)  # fmt: skip
def test_emit_refuses_what_the_study_run_here_refuses(
    cli: Cli, tmp_path: Path, args: list[str], message: str
) -> None:
    """T3's case (strong split over 2 workers, on one node and on two), and the other checks
    of a plan that a node makes before its first worker: the local run's line, word for word."""
    local = cli("scale", "run", EXAMPLE, *args, *LOCAL)
    one_line(local, 2, message)
    assert local.err.splitlines()[-1] == f"error: {message}"
    refused_everywhere(cli, tmp_path, args, message)
    refused_everywhere(cli, tmp_path, [*args, "--nnodes", "2"], message)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Not the largest count: 2 splits over 2 nodes, 1 does not.
        (["--workers", "1,2", "--nnodes", "2"], "1 workers do not split evenly over 2 nodes"),
        (["--strategy", "dp", "--nnodes", "2"],
         "--strategy dp runs in one process on one node (use ddp)"),
        (["--strategy", "dp", "--backend", "gloo"],
         "--strategy dp trains on the GPUs, not with --backend gloo (leave out --backend, or "
         "use ddp)"),
        (["--framework", "tensorflow", "--bucket-mb", "4"],
         "--bucket-mb and --comm are DDP's; TensorFlow takes --allreduce"),
        (["--framework", "tensorflow", "--strategy", "ddp"],
         "--strategy ddp is not a tensorflow strategy (use mirrored | multiworker)"),
        (["--framework", "tensorflow", "--set", "model.name=resnet20"],
         "model 'resnet20' has no TensorFlow version here (use model.name = resnet50 or "
         "smallcnn)"),
        (["--framework", "horovod", "--comm", "powersgd"],
         "--comm powersgd is DDP's (horovod takes allreduce | fp16)"),
    ],
)  # fmt: skip
def test_emit_refuses_the_options_its_nodes_would(
    cli: Cli, tmp_path: Path, args: list[str], message: str
) -> None:
    """Options that need no cluster to refuse: every worker count over the nodes, DataParallel
    on several nodes or under gloo, TensorFlow's and Horovod's own options."""
    refused_everywhere(cli, tmp_path, args, message)


def test_emit_leaves_the_nodes_own_checks_to_them(cli: Cli, tmp_path: Path) -> None:
    """This host's cores, GPUs and extras are not the nodes': 64 workers under NCCL on 8 GPU
    nodes, and a TensorFlow study without TensorFlow here, are still written."""
    for kind, extra in KINDS.items():
        many = ["--workers", "64", "--nnodes", "8", "--backend", "nccl"]
        if kind == "vertex":  # its GPUs are named with the machine
            many += ["--instance-type", "n1-standard-8:NVIDIA_TESLA_T4"]
        r = cli("scale", "run", EXAMPLE, *many, "--emit", kind, *extra)
        assert r.code == 0, (kind, r.err)
        assert "64" in r.out, kind
        tf = ["--framework", "tensorflow", "--strategy", "multiworker", "--workers", "2,4"]
        tf += ["--nnodes", "2"]
        r = cli("scale", "run", EXAMPLE, *tf, "--emit", kind, *extra)
        assert r.code == 0, (kind, r.err)
