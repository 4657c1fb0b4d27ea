"""dlperf.distributed.jobfiles: the Slurm script runs (with stand-in srun and scontrol) and the
PyTorchJob manifest has the shape the Kubeflow training operator expects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dlperf.distributed.jobfiles import render_kubernetes, render_slurm
from dlperf.errors import UserError

ARGV = ["dlperf", "scale", "exp.toml", "--workers", "1,2", "--mode", "strong"]

# Stand-ins for Slurm: scontrol lists two hosts; srun drops its own options and runs the
# command once per node with that node's SLURM_NODEID, as srun --ntasks-per-node=1 does.
SCONTROL = '#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && printf "gpu-a7\\ngpu-b3\\n"\n'
SRUN = """#!/bin/bash
while [[ $1 == --* ]]; do shift; done
for i in 0 1; do SLURM_NODEID=$i "$@"; done
"""


def test_slurm_script_shape() -> None:
    script = render_slurm(ARGV, nnodes=2, nproc_per_node=4, gpus_per_node=4, job_name="study")
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --job-name=study",
        "#SBATCH --output=study-%j.out",
    ):
        assert line in script.splitlines()
    assert "sbatch" in script  # says how to submit
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1' in script
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert "dlperf scale exp.toml --workers 1,2 --mode strong --nnodes 2" in srun
    assert "--node-rank $SLURM_NODEID" in srun
    assert "--rdzv $head_node:29500" in srun
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    cpu_only = render_slurm(ARGV, 3, 2, 0, "study", port=6000)
    assert "--gpus-per-node" not in cpu_only
    assert "--rdzv $head_node:6000" in cpu_only


def test_slurm_script_gives_each_node_its_rank_and_the_head_node(tmp_path: Path) -> None:
    for name, text in (("scontrol", SCONTROL), ("srun", SRUN)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    # Arguments with spaces and quotes must reach the command intact on every node.
    argv = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
    argv += ["it's a name", "$HOME"]
    job = tmp_path / "job.sbatch"
    job.write_text(render_slurm(argv, 2, 1, 0, "study", port=29555))
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    env["SLURM_JOB_NODELIST"] = "gpu-[a7,b3]"
    proc = subprocess.run(
        ["bash", str(job)], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    per_node = [json.loads(line) for line in proc.stdout.splitlines()]
    rdzv = ["--rdzv", "gpu-a7:29555"]
    assert per_node == [
        ["it's a name", "$HOME", "--nnodes", "2", "--node-rank", str(rank), *rdzv]
        for rank in (0, 1)
    ]


def test_kubernetes_manifest_is_a_pytorchjob() -> None:
    text = render_kubernetes(ARGV, 3, 2, 8, "dlperf-study", image="registry.example/dlperf:1")
    job = yaml.safe_load(text)
    assert text.startswith("#") and "kubectl apply" in text
    assert job["apiVersion"] == "kubeflow.org/v1"
    assert job["kind"] == "PyTorchJob"
    assert job["metadata"]["name"] == "dlperf-study"
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert {k: v["replicas"] for k, v in specs.items()} == {"Master": 1, "Worker": 2}
    for spec in specs.values():
        assert spec["restartPolicy"] == "OnFailure"
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"
        assert container["image"] == "registry.example/dlperf:1"
        assert container["command"] + container["args"] == [
            *ARGV,
            *("--nnodes", "3", "--node-rank", "$(RANK)"),
            *("--rdzv", "$(MASTER_ADDR):$(MASTER_PORT)"),
        ]
        assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 29500}]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert "&id" not in text  # each replica has its own container, no YAML aliases


def test_kubernetes_single_node_cpu_job() -> None:
    job = yaml.safe_load(render_kubernetes(ARGV, 1, 2, 0, "solo", image="img", port=7000))
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert list(specs) == ["Master"]
    (container,) = specs["Master"]["template"]["spec"]["containers"]
    assert "limits" not in container["resources"]
    assert container["resources"]["requests"] == {"cpu": 2}
    assert container["ports"][0]["containerPort"] == 7000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nnodes": 0}, "--nnodes"),
        ({"nproc_per_node": 0}, "processes per node"),
        ({"gpus_per_node": -1}, "GPUs"),
        ({"port": 70000}, "port"),
        ({"argv": []}, "no command"),
        ({"job_name": "Bad_Name"}, "job name"),
        ({"image": " "}, "image"),
    ],
)
def test_bad_input_is_a_user_error(kwargs: dict, message: str) -> None:
    args = {
        "argv": ARGV,
        "nnodes": 2,
        "nproc_per_node": 1,
        "gpus_per_node": 0,
        "job_name": "ok",
        "image": "img",
        **kwargs,
    }
    with pytest.raises(UserError, match=message):
        render_kubernetes(**args)
    if "image" not in kwargs and "job_name" not in kwargs:
        del args["image"]
        with pytest.raises(UserError, match=message):
            render_slurm(**args)


def test_slurm_refuses_a_job_name_with_spaces() -> None:
    with pytest.raises(UserError, match="job name"):
        render_slurm(ARGV, 2, 1, 0, "my study")
