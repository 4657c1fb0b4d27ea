"""Job files that run one `dlperf scale` study across several nodes: a Slurm batch script and
a Kubeflow PyTorchJob manifest (and, through dlperf.distributed.cloudjobs, the jobs of
SageMaker, Vertex AI and Azure ML).

Both start the same dlperf command once per node and append
`--nnodes N --node-rank R --rdzv HOST:PORT`, so each node's dlperf launches one torchrun and
the torchruns meet at a c10d rendezvous hosted on the first node. The flags are shortcuts
for scale.nnodes, scale.node_rank and scale.rdzv that win over the study file and --set.

A TensorFlow study (--framework tensorflow) runs from the same job files: each node's dlperf
starts its MultiWorker processes and builds their TF_CONFIG from the addresses the nodes
trade at the --rdzv store (dlperf.distributed.tf_launch). The Kubernetes manifest stays a
PyTorchJob for it: the operator only starts one pod per node and gives each its rank and the
first pod's address; a TFJob's own TF_CONFIG names one address per pod, where dlperf runs
several workers per node.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dlperf.distributed.cloudjobs import CLOUD, INSTANCE_TYPE, PORT, RENDER, CloudJob
from dlperf.errors import UserError
from dlperf.parsing import refuse_given
from dlperf.paths import check_writable

if TYPE_CHECKING:
    from dlperf.config import ScaleConfig, ScaleJob

# Options that place one node of a multi-node run: a job file adds its own per node.
_PER_NODE = ("--emit", "--out", "--nnodes", "--node-rank", "--rdzv", "--image", "--gpus-per-node",
             "--instance-type", "--output-uri", "--role")  # fmt: skip

# The image of a container job when --image is not given (no registry holds it: docs/scale.md).
DEFAULT_IMAGE = "dlperf:latest"
# The options each kind of job writes into its file (--out, where any kind's goes, aside): one
# it has no place for is refused, not dropped. SageMaker's and Azure ML's machines come with
# their GPUs (--instance-type); a Slurm script runs the nodes' own dlperf, in no container.
JOB_OPTIONS = {
    "slurm": ("--gpus-per-node",),
    "kubernetes": ("--image", "--gpus-per-node"),
    "sagemaker": ("--image", "--instance-type", "--output-uri", "--role"),
    "vertex": ("--image", "--gpus-per-node", "--instance-type", "--output-uri"),
    "azureml": ("--image", "--instance-type", "--output-uri"),
}

# Kubernetes object names are DNS-1123 labels; Slurm takes anything without whitespace.
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def kubernetes_name(name: str) -> str:
    """`name` as an RFC 1123 label: lower case, each run of other characters one '-', at most
    63 characters, starting and ending alphanumeric; "dlperf" when nothing is left."""
    label = re.sub(r"[^a-z0-9]+", "-", name.lower())[:63].strip("-")
    return label or "dlperf"


def slurm_name(name: str) -> str:
    """`name` as a Slurm job name that is also a safe file name (the job's --output)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "dlperf"


def _check(
    argv: list[str], nnodes: int, nproc_per_node: int, gpus_per_node: int, port: int
) -> None:
    if not argv:
        raise UserError("no command to put in the job file")
    if nnodes < 1:
        raise UserError(f"--nnodes must be at least 1, got {nnodes}")
    if nproc_per_node < 1:
        raise UserError(f"processes per node must be at least 1, got {nproc_per_node}")
    if gpus_per_node < 0:
        raise UserError(f"GPUs per node cannot be negative, got {gpus_per_node}")
    if not 1 <= port <= 65535:
        raise UserError(f"rendezvous port {port} is not a TCP port", "use 1..65535")


def render_slurm(
    argv: list[str],
    nnodes: int,
    nproc_per_node: int,
    gpus_per_node: int,
    job_name: str,
    port: int = PORT,
) -> str:
    """An sbatch script: srun starts the command once on each of `nnodes` nodes."""
    _check(argv, nnodes, nproc_per_node, gpus_per_node, port)
    if not job_name or re.search(r"\s", job_name):
        raise UserError(f"bad job name '{job_name}'", "use letters, digits, '-' or '_'")
    # Single quotes keep $SLURM_NODEID for each node's own shell to expand: expanded here,
    # in the batch shell on the first node, every node would claim rank 0.
    per_node = (
        f"{shlex.join(argv)} --nnodes {nnodes} --node-rank $SLURM_NODEID --rdzv $head_node:{port}"
    )
    gpus = [f"#SBATCH --gpus-per-node={gpus_per_node}"] if gpus_per_node > 0 else []
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={nnodes}",
        "#SBATCH --ntasks-per-node=1",
        *gpus,
        # One core per worker process at least; raise it to give workers more threads.
        f"#SBATCH --cpus-per-task={nproc_per_node}",
        f"#SBATCH --output={job_name}-%j.out",
        "#",
        f"# dlperf scale on {nnodes} node(s) x {nproc_per_node} worker(s). srun starts dlperf once",
        "# per node; each starts its workers (torchrun, or TensorFlow's with their TF_CONFIG),",
        "# and they meet at a rendezvous on the first node of the allocation. All nodes need the",
        "# same dlperf install and data, and a shared working directory for the run store (or",
        "# --db naming a shared database server).",
        "#   submit: sbatch THIS_FILE",
        f"#   watch:  squeue --me; tail -f {job_name}-<jobid>.out",
        "",
        "set -eu",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "export head_node",
        # Recent srun no longer inherits --cpus-per-task from sbatch: say it again.
        f"srun --ntasks-per-node=1 --cpus-per-task={nproc_per_node} --kill-on-bad-exit=1"
        f" bash -c {shlex.quote(per_node)}",
        "",
    ]
    return "\n".join(lines)


def render_kubernetes(
    argv: list[str],
    nnodes: int,
    nproc_per_node: int,
    gpus_per_node: int,
    job_name: str,
    image: str,
    port: int = PORT,
) -> str:
    """A Kubeflow PyTorchJob (training operator, kubeflow.org/v1): Master + nnodes−1 Workers."""
    _check(argv, nnodes, nproc_per_node, gpus_per_node, port)
    if not _K8S_NAME.match(job_name):
        raise UserError(
            f"bad job name '{job_name}' for Kubernetes",
            "use at most 63 lower-case letters, digits and '-', starting and ending alphanumeric",
        )
    if not image.strip():
        raise UserError("no container image given", "name an image with dlperf installed")
    resources: dict[str, Any] = {"requests": {"cpu": nproc_per_node}}
    if gpus_per_node > 0:
        resources["limits"] = {"nvidia.com/gpu": gpus_per_node}
    container = {
        # The operator finds the container to configure by this exact name.
        "name": "pytorch",
        "image": image,
        "command": argv[:1],
        # The operator sets RANK (Master 0, Worker i → i+1), MASTER_ADDR (the Master's
        # service) and MASTER_PORT (the port named pytorchjob-port); Kubernetes expands $(VAR).
        "args": [
            *argv[1:],
            *("--nnodes", str(nnodes), "--node-rank", "$(RANK)"),
            *("--rdzv", "$(MASTER_ADDR):$(MASTER_PORT)"),
        ],
        "ports": [{"name": "pytorchjob-port", "containerPort": port}],
        "resources": resources,
    }

    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            # A copy each: yaml would write a shared dict as an anchor and an alias.
            "template": {"spec": {"containers": [copy.deepcopy(container)]}},
        }

    specs = {"Master": replica(1)}
    if nnodes > 1:
        specs["Worker"] = replica(nnodes - 1)
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job_name},
        "spec": {"pytorchReplicaSpecs": specs},
    }
    header = (
        f"# dlperf scale on {nnodes} node(s) x {nproc_per_node} worker(s), one pod per node.\n"
        "# Needs the Kubeflow training operator. Submit: kubectl apply -f THIS_FILE\n"
        f"# Watch: kubectl get pytorchjob {job_name}; "
        f"kubectl logs -f {job_name}-master-0\n"
    )
    return header + str(yaml.safe_dump(manifest, sort_keys=False))


def _unknown(kind: str) -> UserError:
    return UserError(f"unknown --emit '{kind}'", f"use slurm, kubernetes or {', '.join(CLOUD)}")


def _taken_by(flag: str) -> str:
    """The kinds of job that take the option `flag`: '--emit sagemaker|vertex|azureml'."""
    return "--emit " + "|".join(kind for kind, takes in JOB_OPTIONS.items() if flag in takes)


def check_job_options(
    kind: str | None,
    out: Path | None,
    image: str | None,
    gpus_per_node: int | None,
    cloud: Mapping[str, str | None],
) -> None:
    """Refuse, in one line, the options of a job file (each None when not given; `cloud`: the
    instance_type, output_uri and role of job_file) that would do nothing: any of them
    without --emit `kind` (the study then runs here, and no file is written), and those that
    `kind` of job has no place for (JOB_OPTIONS: --role but in SageMaker's, --image in a Slurm
    script). An unknown `kind` too, before its options; then an --out that cannot be written
    (paths.check_writable: a FIFO, a missing folder), before the study file is read."""
    options: dict[str, object] = {"--out": out, "--image": image, "--gpus-per-node": gpus_per_node}
    options |= {"--" + key.replace("_", "-"): value for key, value in cloud.items()}
    if kind is None:
        refuse_given(
            options, "--emit KIND", "without it the study runs here: no job file is written"
        )
        return
    if kind not in JOB_OPTIONS:
        raise _unknown(kind)
    dropped = {
        flag: value
        for flag, value in options.items()
        if value is not None and flag != "--out" and flag not in JOB_OPTIONS[kind]
    }
    takers = {_taken_by(flag) for flag in dropped}
    if len(takers) == 1:  # the same kinds take them all: the line names them
        pronoun = "it" if len(dropped) == 1 else "them"
        refuse_given(dropped, takers.pop(), f"--emit {kind} has no place for {pronoun}")
    elif takers:  # the hint says which kinds take each
        where = "; ".join(f"{flag}: {_taken_by(flag)}" for flag in dropped)
        refuse_given(dropped, f"other --emit kinds than {kind}", where)
    if out is not None:  # a FIFO waited for a reader for ever; a typo'd folder, after the study
        check_writable(out)


def job_argv(argv: list[str]) -> list[str]:
    """The command line every node of a job runs: this one without the per-node options."""
    kept: list[str] = ["dlperf"]
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _PER_NODE:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in _PER_NODE)):
            kept.append(arg)
    return kept


def asks_gpus(opts: ScaleConfig) -> bool:
    """Whether the study's options put its workers on GPUs (a job without --gpus-per-node
    then asks for one per worker)."""
    return opts.backend == "nccl" or "nccl" in opts.allreduce


def job_file(
    kind: str,
    argv: list[str],
    opts: ScaleConfig,
    gpus_per_node: int | None,
    image: str,
    job_name: str,
    cloud: Mapping[str, str | None] | None = None,
) -> str:
    """The `kind` (slurm | kubernetes | sagemaker | vertex | azureml) job that runs
    `dlperf ARGV` once on each node, named after `job_name` in the platform's rules; `cloud`:
    a cloud platform's instance_type, output_uri and role (dlperf.distributed.cloudjobs)."""
    nnodes, workers = opts.nnodes, max(opts.workers)
    if workers % nnodes:
        raise UserError(f"{workers} workers do not split evenly over {nnodes} nodes")
    per_node = workers // nnodes
    gpus = gpus_per_node if gpus_per_node is not None else per_node * asks_gpus(opts)
    if kind == "slurm":
        return render_slurm(job_argv(argv), nnodes, per_node, gpus, slurm_name(job_name))
    if kind == "kubernetes":
        name = kubernetes_name(job_name)
        return render_kubernetes(job_argv(argv), nnodes, per_node, gpus, name, image)
    if kind in CLOUD:
        _check(argv, nnodes, per_node, gpus, PORT)
        extra = cloud or {}
        machine = extra.get("instance_type") or INSTANCE_TYPE[kind]
        name = kubernetes_name(job_name)
        uri, role = extra.get("output_uri"), extra.get("role")
        return RENDER[kind](CloudJob(job_argv(argv), nnodes, gpus, name, image, machine, uri, role))
    raise _unknown(kind)


def study_job(
    kind: str,
    argv: list[str],
    job: ScaleJob,
    gpus_per_node: int | None,
    image: str | None,
    cloud: Mapping[str, str | None] | None = None,
) -> str:
    """`job_file` for the study `job`, named after its run, once it passes the checks its
    nodes would make before their first worker and that need neither this host nor them (a
    job file must not carry a study they would refuse, found only after the queue's wait);
    `image` None: DEFAULT_IMAGE."""
    from dlperf.distributed.planning import check_job  # loaded only when a file is made

    opts = job.scale
    check_job(job, gpus_per_node > 0 if gpus_per_node is not None else asks_gpus(opts))
    name = job.experiment.run.name or "dlperf"
    image = DEFAULT_IMAGE if image is None else image
    return job_file(kind, argv, opts, gpus_per_node, image, name, cloud)
