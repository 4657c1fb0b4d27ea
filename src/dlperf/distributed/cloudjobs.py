"""The same `dlperf scale` study as a job of a cloud ML platform: an AWS SageMaker training job
(the CreateTrainingJob request, JSON), a Google Vertex AI CustomJob (the REST resource, JSON)
and an Azure Machine Learning command job (CLI v2 YAML).

Each starts one container per node from `--image`, and each node runs the study's command
with `--nnodes N --node-rank R --rdzv HEAD:29500` added, as the Slurm and Kubernetes job files
do; only where each platform tells a node its rank and the first node differs:

- SageMaker: /opt/ml/input/config/resourceconfig.json (`hosts`, sorted, and `current_host`);
- Vertex AI: the CLUSTER_SPEC variable (`cluster.workerpool0`, the task's pool and index);
- Azure ML: NODE_RANK, MASTER_ADDR and MASTER_PORT, set by its PyTorch distribution.

Node 0 writes the run store and the figures into the directory the platform keeps as the
job's output (its "output location", docs/scale.md). The field names and limits follow each
platform's reference, cited in docs/scale.md.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

import yaml

from dlperf.errors import UserError

PORT = 29500  # the c10d rendezvous on the first node, as in the Slurm and Kubernetes files
CLOUD = ("sagemaker", "vertex", "azureml")
INSTANCE_TYPE = {  # CPU machines with 4 cores, when --instance-type is not given
    "sagemaker": "ml.m5.xlarge",
    "vertex": "n1-standard-4",
    "azureml": "Standard_D4s_v3",
}

# SageMaker's limits (CreateTrainingJob): each entrypoint string and argument at most 256
# characters, at most 100 of each; the role an IAM role ARN; the output an S3 URI.
_SAGEMAKER_ROLE = re.compile(r"^arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$")
_MAX_ARG = 256

# Each node's rank and the first node's host, from what the platform gives the container,
# printed as "RANK HEAD"; the script then runs the node's command, its "$@".
_SAGEMAKER_RANK = (
    'import json;c=json.load(open("/opt/ml/input/config/resourceconfig.json"));'
    'h=c["hosts"];print(h.index(c["current_host"]),h[0])'
)
_VERTEX_RANK = (
    'import json,os;c=json.loads(os.environ["CLUSTER_SPEC"]);t=c["task"];'
    'print(t["index"]+(t["type"]!="workerpool0"),c["cluster"]["workerpool0"][0].split(":")[0])'
)


def _node_script(rank_program: str) -> str:
    return (
        f"set -eu; read rank head <<< \"$(python3 -c '{rank_program}')\"; "
        f'exec "$@" --node-rank "$rank" --rdzv "$head:{PORT}"'
    )


def _entrypoint(rank_program: str) -> list[str]:
    """bash -c SCRIPT NAME: the container's arguments reach SCRIPT as "$@"."""
    return ["bash", "-c", _node_script(rank_program), "dlperf-node"]


def _node_argv(argv: list[str], nnodes: int, out: str) -> list[str]:
    """The study's command with what every node adds: the figures under the job's output
    directory `out`, and the number of nodes (rank and rendezvous come from the platform)."""
    return [*argv, "--set", f'run.out_dir="{out}/dlperf_runs"', "--nnodes", str(nnodes)]


def _check_uri(uri: str | None, schemes: tuple[str, ...], kind: str) -> str:
    if uri is None or not re.match(rf"^({'|'.join(schemes)})://[^/]+", uri):
        raise UserError(
            f"--emit {kind} needs --output-uri {schemes[0]}://BUCKET/PATH",
            "where the platform keeps the study's run store and figures",
        )
    return uri.rstrip("/")


@dataclass(frozen=True)
class CloudJob:
    """What a platform's job is made of: the command every node runs, the nodes and their
    GPUs, the job's name (an RFC 1123 label, which every platform's name rules accept), the
    container image, and the platform's instance type, output URI and (SageMaker's) role."""

    argv: list[str]
    nnodes: int
    gpus_per_node: int
    name: str
    image: str
    instance_type: str
    output_uri: str | None
    role: str | None


def render_sagemaker(spec: CloudJob) -> str:
    """A CreateTrainingJob request: `aws sagemaker create-training-job --cli-input-json`."""
    uri = _check_uri(spec.output_uri, ("s3", "https"), "sagemaker")
    role = spec.role
    if role is None or not _SAGEMAKER_ROLE.match(role):
        raise UserError(
            "--emit sagemaker needs --role arn:aws:iam::ACCOUNT:role/NAME",
            "the IAM role SageMaker runs the job as",
        )
    args = _node_argv(spec.argv, spec.nnodes, "/opt/ml/model")
    too_long = [a for a in args if len(a) > _MAX_ARG]
    if too_long or len(args) > 100:
        raise UserError(
            "SageMaker takes at most 100 container arguments of at most 256 characters each",
            f"shorten {too_long[0][:40]!r}..." if too_long else "give fewer options",
        )
    request = {
        "TrainingJobName": spec.name,
        "RoleArn": role,
        "AlgorithmSpecification": {
            "TrainingImage": spec.image,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": _entrypoint(_SAGEMAKER_RANK),
            "ContainerArguments": args,
        },
        "ResourceConfig": {
            "InstanceType": spec.instance_type,
            "InstanceCount": spec.nnodes,
            "VolumeSizeInGB": 30,
        },
        # SageMaker uploads /opt/ml/model to this prefix when the job ends.
        "OutputDataConfig": {"S3OutputPath": uri},
        "StoppingCondition": {"MaxRuntimeInSeconds": 24 * 3600},
        "Environment": {"DLPERF_DB": "/opt/ml/model/dlperf.db"},
    }
    return json.dumps(request, indent=2) + "\n"


def _gcs_path(uri: str) -> str:
    """Where Vertex AI mounts gs://BUCKET/PATH in the container (Cloud Storage FUSE)."""
    return "/gcs/" + uri.removeprefix("gs://")


def render_vertex(spec: CloudJob) -> str:
    """A CustomJob: the body of `POST .../locations/REGION/customJobs`; its `jobSpec` is
    what `gcloud ai custom-jobs create --config` reads."""
    uri = _check_uri(spec.output_uri, ("gs",), "vertex")
    machine, _, accelerator = spec.instance_type.partition(":")
    nnodes, gpus_per_node = spec.nnodes, spec.gpus_per_node
    machine_spec: dict[str, Any] = {"machineType": machine}
    if gpus_per_node > 0:
        if not accelerator:
            raise UserError(
                f"--emit vertex with {gpus_per_node} GPU(s) per node needs the accelerator",
                "give --instance-type MACHINE:ACCELERATOR, e.g. n1-standard-8:NVIDIA_TESLA_T4",
            )
        machine_spec |= {"acceleratorType": accelerator, "acceleratorCount": gpus_per_node}
    out = _gcs_path(uri)
    container = {
        "imageUri": spec.image,
        "command": _entrypoint(_VERTEX_RANK),
        "args": _node_argv(spec.argv, nnodes, out),
        "env": [{"name": "DLPERF_DB", "value": f"{out}/dlperf.db"}],
    }
    # Pool 0 is the chief (one replica); pool 1 holds the other nodes.
    pools = [
        {"machineSpec": machine_spec, "replicaCount": count, "containerSpec": container}
        for count in (1, nnodes - 1)
        if count > 0
    ]
    job = {
        "displayName": spec.name,
        "jobSpec": {"workerPoolSpecs": pools, "baseOutputDirectory": {"outputUriPrefix": uri}},
    }
    return json.dumps(job, indent=2) + "\n"


def render_azureml(spec: CloudJob) -> str:
    """A command job: `az ml job create --file THIS_FILE` (serverless compute)."""
    output: dict[str, Any] = {"type": "uri_folder", "mode": "rw_mount"}
    if spec.output_uri is not None:
        schemes = ("azureml", "https", "abfss", "wasbs")
        output["path"] = _check_uri(spec.output_uri, schemes, "azureml")
    out = "${{outputs.results}}"
    per_node = _node_argv(spec.argv, spec.nnodes, out)
    # Azure ML expands ${{outputs.results}} in the command only, so the store's path is set
    # there; its PyTorch distribution sets NODE_RANK, MASTER_ADDR and MASTER_PORT per node.
    command = (
        f"DLPERF_DB={out}/dlperf.db {shlex.join(per_node)} "
        '--node-rank "$NODE_RANK" --rdzv "$MASTER_ADDR:$MASTER_PORT"'
    )
    job = {
        "$schema": "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json",
        "type": "command",
        "display_name": spec.name,
        "experiment_name": "dlperf",
        "command": command,
        "environment": {"image": spec.image},
        "environment_variables": {"PYTHONUNBUFFERED": "1"},
        "resources": {"instance_count": spec.nnodes, "instance_type": spec.instance_type},
        "distribution": {"type": "pytorch", "process_count_per_instance": 1},
        "outputs": {"results": output},
    }
    return str(yaml.safe_dump(job, sort_keys=False, width=2**16))


RENDER = {"sagemaker": render_sagemaker, "vertex": render_vertex, "azureml": render_azureml}


def shared(kind: str, job: dict[str, Any]) -> dict[str, Any]:
    """What a loaded job of `kind` sets for each field the platforms share (the table of
    docs/scale.md): its image, the command a node runs (the study's, without the platform's
    rank script), instance type and count, its environment variables, its output location."""
    if kind == "sagemaker":
        spec, resources = job["AlgorithmSpecification"], job["ResourceConfig"]
        return {
            "image": spec["TrainingImage"],
            "command": spec["ContainerArguments"],
            "instance type": resources["InstanceType"],
            "instance count": resources["InstanceCount"],
            "environment": job["Environment"],
            "output location": job["OutputDataConfig"]["S3OutputPath"],
        }
    if kind == "vertex":
        pools = job["jobSpec"]["workerPoolSpecs"]
        container = pools[0]["containerSpec"]
        return {
            "image": container["imageUri"],
            "command": container["args"],
            "instance type": pools[0]["machineSpec"]["machineType"],
            "instance count": sum(p["replicaCount"] for p in pools),
            "environment": {e["name"]: e["value"] for e in container["env"]},
            "output location": job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"],
        }
    words = shlex.split(job["command"])
    return {
        "image": job["environment"]["image"],
        "command": words[1 : words.index("--node-rank")],  # after DLPERF_DB=...
        "instance type": job["resources"]["instance_type"],
        "instance count": job["resources"]["instance_count"],
        "environment": {**job["environment_variables"], **dict([words[0].split("=", 1)])},
        "output location": job["outputs"]["results"].get("path"),
    }


def described(kind: str, text: str) -> str | None:
    """A cloud job file's `text` in one line, in the fields the platforms share: its
    machines, image and output location; None for a job of a cluster (slurm, kubernetes)."""
    if kind not in CLOUD:
        return None
    fields = shared(kind, json.loads(text) if kind != "azureml" else yaml.safe_load(text))
    return (
        f"{fields['instance count']} x {fields['instance type']} running {fields['image']}; "
        f"output: {fields['output location'] or 'the job default'}"
    )
