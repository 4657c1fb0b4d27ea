"""dlperf.distributed.jobfiles and cloudjobs: the Slurm script runs (with stand-in srun and
scontrol), the PyTorchJob manifest has the shape the Kubeflow training operator expects, and
the SageMaker, Vertex AI and Azure ML jobs follow each platform's documented schema (below,
written from each one's reference) and run on each node as the platform starts them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dlperf.distributed.cloudjobs import shared
from dlperf.distributed.jobfiles import render_kubernetes, render_slurm
from dlperf.errors import UserError
from tests.conftest import CliResult

# The fields every cloud job sets, as docs/scale.md tabulates them.
SHARED = ("image", "command", "instance type", "instance count", "environment", "output location")
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


# --- cloud ML platforms: SageMaker, Vertex AI, Azure ML (dlperf.distributed.cloudjobs) -----

CLOUD_ARGS = {
    "sagemaker": [
        "--output-uri",
        "s3://my-bucket/dlperf",
        "--role",
        "arn:aws:iam::123456789012:role/SageMakerRole",
    ],
    "vertex": ["--output-uri", "gs://my-bucket/dlperf"],
    "azureml": ["--output-uri", "azureml://datastores/workspaceblobstore/paths/dlperf"],
}


def _fail(errors: list[str], where: str, message: str) -> None:
    errors.append(f"{where}: {message}")


def _keys(errors: list[str], where: str, obj: object, required: set[str], known: set[str]) -> None:
    """`obj` is an object holding every `required` key and no key outside `known`."""
    if not isinstance(obj, dict):
        _fail(errors, where, f"expected an object, got {type(obj).__name__}")
        return
    for key in sorted(required - set(obj)):
        _fail(errors, where, f"missing required {key}")
    for key in sorted(set(obj) - known):
        _fail(errors, where, f"unknown field {key}")


def _string(errors: list[str], where: str, value: object, most: int, pattern: str = ".*") -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= most:
        _fail(errors, where, f"expected a string of 1..{most} characters, got {value!r}")
    elif not re.fullmatch(pattern, value):
        _fail(errors, where, f"{value!r} does not match {pattern}")


def _strings(errors: list[str], where: str, value: object, items: int, most: int) -> None:
    if not isinstance(value, list) or not 1 <= len(value) <= items:
        _fail(errors, where, f"expected a list of 1..{items} strings")
        return
    for i, item in enumerate(value):
        _string(errors, f"{where}[{i}]", item, most)


def _integer(errors: list[str], where: str, value: object, least: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        _fail(errors, where, f"expected an integer >= {least}, got {value!r}")


def sagemaker_errors(request: dict) -> list[str]:
    """The CreateTrainingJob request syntax (Amazon SageMaker API Reference): required
    members, types, lengths and patterns of what dlperf writes."""
    errors: list[str] = []
    known = {
        "TrainingJobName",
        "RoleArn",
        "AlgorithmSpecification",
        "ResourceConfig",
        "OutputDataConfig",
        "StoppingCondition",
        "Environment",
        "HyperParameters",
        "InputDataConfig",
        "VpcConfig",
        "Tags",
        "CheckpointConfig",
        "EnableNetworkIsolation",
        "EnableManagedSpotTraining",
    }
    required = {
        "TrainingJobName",
        "RoleArn",
        "AlgorithmSpecification",
        "ResourceConfig",
        "OutputDataConfig",
        "StoppingCondition",
    }
    _keys(errors, "request", request, required, known)
    _string(
        errors,
        "TrainingJobName",
        request.get("TrainingJobName"),
        63,
        r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}",
    )
    _string(
        errors,
        "RoleArn",
        request.get("RoleArn"),
        2048,
        r"arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+",
    )
    spec = request.get("AlgorithmSpecification", {})
    _keys(
        errors,
        "AlgorithmSpecification",
        spec,
        {"TrainingInputMode"},
        {
            "TrainingImage",
            "AlgorithmName",
            "TrainingInputMode",
            "MetricDefinitions",
            "ContainerEntrypoint",
            "ContainerArguments",
            "EnableSageMakerMetricsTimeSeries",
        },
    )
    if spec.get("TrainingInputMode") not in ("Pipe", "File", "FastFile"):
        _fail(errors, "TrainingInputMode", "not Pipe, File or FastFile")
    _string(errors, "TrainingImage", spec.get("TrainingImage"), 255)
    _strings(errors, "ContainerEntrypoint", spec.get("ContainerEntrypoint"), 100, 256)
    _strings(errors, "ContainerArguments", spec.get("ContainerArguments"), 100, 256)
    resources = request.get("ResourceConfig", {})
    _keys(
        errors,
        "ResourceConfig",
        resources,
        {"VolumeSizeInGB"},
        {
            "InstanceType",
            "InstanceCount",
            "VolumeSizeInGB",
            "VolumeKmsKeyId",
            "InstanceGroups",
            "KeepAlivePeriodInSeconds",
        },
    )
    _string(errors, "InstanceType", resources.get("InstanceType"), 64, r"ml\.[a-z0-9]+\.\w+")
    _integer(errors, "InstanceCount", resources.get("InstanceCount"), 1)
    _integer(errors, "VolumeSizeInGB", resources.get("VolumeSizeInGB"), 1)
    output = request.get("OutputDataConfig", {})
    _keys(
        errors,
        "OutputDataConfig",
        output,
        {"S3OutputPath"},
        {"S3OutputPath", "KmsKeyId", "CompressionType"},
    )
    _string(errors, "S3OutputPath", output.get("S3OutputPath"), 1024, r"(https|s3)://([^/]+)/?(.*)")
    stop = request.get("StoppingCondition", {})
    _integer(errors, "MaxRuntimeInSeconds", stop.get("MaxRuntimeInSeconds"), 1)
    environment = request.get("Environment", {})
    if not isinstance(environment, dict) or len(environment) > 100:
        _fail(errors, "Environment", "expected a map of at most 100 entries")
    for key, value in environment.items():
        _string(errors, "Environment key", key, 512, r"[a-zA-Z_][a-zA-Z0-9_]*")
        _string(errors, f"Environment[{key}]", value, 512, r"[\S\s]*")
    return errors


ACCELERATORS = {
    "NVIDIA_TESLA_K80",
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_V100",
    "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_L4",
    "NVIDIA_H100_80GB",
    "TPU_V2",
    "TPU_V3",
}


def vertex_errors(job: dict) -> list[str]:
    """The CustomJob REST resource (Vertex AI API v1): CustomJob, CustomJobSpec,
    WorkerPoolSpec, MachineSpec, ContainerSpec, EnvVar, GcsDestination."""
    errors: list[str] = []
    _keys(
        errors,
        "CustomJob",
        job,
        {"displayName", "jobSpec"},
        {"displayName", "jobSpec", "labels", "encryptionSpec"},
    )
    _string(errors, "displayName", job.get("displayName"), 128)
    spec = job.get("jobSpec", {})
    _keys(
        errors,
        "jobSpec",
        spec,
        {"workerPoolSpecs"},
        {
            "workerPoolSpecs",
            "baseOutputDirectory",
            "scheduling",
            "serviceAccount",
            "network",
            "enableWebAccess",
            "tensorboard",
            "persistentResourceId",
        },
    )
    pools = spec.get("workerPoolSpecs")
    if not isinstance(pools, list) or not pools:
        _fail(errors, "workerPoolSpecs", "expected a non-empty list")
        pools = []
    for i, pool in enumerate(pools):
        where = f"workerPoolSpecs[{i}]"
        _keys(
            errors,
            where,
            pool,
            {"machineSpec", "replicaCount"},
            {
                "machineSpec",
                "replicaCount",
                "containerSpec",
                "pythonPackageSpec",
                "diskSpec",
                "nfsMounts",
            },
        )
        _integer(errors, f"{where}.replicaCount", pool.get("replicaCount"), 1)
        machine = pool.get("machineSpec", {})
        _keys(
            errors,
            f"{where}.machineSpec",
            machine,
            {"machineType"},
            {"machineType", "acceleratorType", "acceleratorCount", "tpuTopology"},
        )
        _string(errors, f"{where}.machineType", machine.get("machineType"), 64, r"[a-z0-9-]+")
        if "acceleratorType" in machine:
            if machine["acceleratorType"] not in ACCELERATORS:
                _fail(errors, f"{where}.acceleratorType", f"unknown {machine['acceleratorType']}")
            _integer(errors, f"{where}.acceleratorCount", machine.get("acceleratorCount"), 1)
        container = pool.get("containerSpec", {})
        _keys(
            errors,
            f"{where}.containerSpec",
            container,
            {"imageUri"},
            {"imageUri", "command", "args", "env"},
        )
        _string(errors, f"{where}.imageUri", container.get("imageUri"), 1024)
        for field in ("command", "args"):
            _strings(errors, f"{where}.{field}", container.get(field), 1000, 10_000)
        for var in container.get("env", []):
            _keys(errors, f"{where}.env", var, {"name", "value"}, {"name", "value"})
            _string(errors, f"{where}.env.name", var.get("name"), 1024, r"[A-Za-z_][A-Za-z0-9_]*")
    if len(pools) > 1 and pools[0].get("replicaCount") != 1:
        _fail(errors, "workerPoolSpecs[0]", "the chief pool has one replica")
    output = spec.get("baseOutputDirectory", {})
    _keys(errors, "baseOutputDirectory", output, {"outputUriPrefix"}, {"outputUriPrefix"})
    _string(errors, "outputUriPrefix", output.get("outputUriPrefix"), 1024, r"gs://[^/]+(/.*)?")
    return errors


def azureml_errors(job: dict) -> list[str]:
    """The Azure ML CLI (v2) command job YAML schema: its keys, the inline environment, the
    resources, the PyTorch distribution and the outputs."""
    errors: list[str] = []
    _keys(
        errors,
        "job",
        job,
        {"type", "command", "environment"},
        {
            "$schema",
            "type",
            "name",
            "display_name",
            "experiment_name",
            "description",
            "tags",
            "command",
            "code",
            "environment",
            "environment_variables",
            "distribution",
            "compute",
            "resources",
            "limits",
            "inputs",
            "outputs",
            "identity",
            "services",
            "queue_settings",
        },
    )
    if job.get("type") != "command":
        _fail(errors, "type", "must be command")
    _string(errors, "command", job.get("command"), 100_000)
    environment = job.get("environment")
    if not isinstance(environment, str):
        _keys(
            errors,
            "environment",
            environment,
            set(),
            {"image", "conda_file", "build", "os_type", "inference_config", "description"},
        )
        _string(errors, "environment.image", (environment or {}).get("image"), 1024)
    variables = job.get("environment_variables", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in variables.items()):
        _fail(errors, "environment_variables", "expected a map of strings to strings")
    resources = job.get("resources", {})
    _keys(
        errors,
        "resources",
        resources,
        set(),
        {
            "instance_count",
            "instance_type",
            "properties",
            "shm_size",
            "docker_args",
            "locations",
            "max_instance_count",
        },
    )
    _integer(errors, "resources.instance_count", resources.get("instance_count"), 1)
    _string(errors, "resources.instance_type", resources.get("instance_type"), 128)
    distribution = job.get("distribution", {})
    if distribution.get("type") not in ("pytorch", "mpi", "tensorflow", "ray"):
        _fail(errors, "distribution.type", "not pytorch, mpi, tensorflow or ray")
    _integer(
        errors, "process_count_per_instance", distribution.get("process_count_per_instance"), 1
    )
    for name, output in job.get("outputs", {}).items():
        where = f"outputs.{name}"
        _keys(errors, where, output, {"type"}, {"type", "path", "mode", "name", "version"})
        if output.get("type") not in ("uri_folder", "uri_file", "mlflow_model", "custom_model"):
            _fail(errors, f"{where}.type", "not a known output type")
        if output.get("mode") not in (None, "rw_mount", "upload", "direct"):
            _fail(errors, f"{where}.mode", "not rw_mount, upload or direct")
        if "path" in output:
            _string(
                errors, f"{where}.path", output["path"], 2048, r"(azureml|https|abfss|wasbs)://.+"
            )
    for expression in re.findall(r"\$\{\{([^}]*)\}\}", job.get("command", "")):
        kind, _, name = expression.strip().partition(".")
        if kind != "outputs" or name not in job.get("outputs", {}):
            _fail(errors, "command", f"${{{{{expression}}}}} names no output of the job")
    return errors


def _load(kind: str, text: str) -> dict:
    return yaml.safe_load(text) if kind == "azureml" else json.loads(text)


CHECKS = {"sagemaker": sagemaker_errors, "vertex": vertex_errors, "azureml": azureml_errors}


def _emit(cli: Callable, exp: Path, kind: str, *extra: str) -> CliResult:
    args = ["scale", str(exp), "--workers", "4", "--mode", "weak", "--per-worker-batch", "8"]
    return cli(*args, "--steps", "5", "--nnodes", "2", "--emit", kind, *extra)


@pytest.mark.parametrize("kind", list(CHECKS))
def test_each_cloud_job_follows_its_platforms_documented_schema(
    cli: Callable, tiny_exp: Callable, kind: str
) -> None:
    exp = tiny_exp(name="digits_smallcnn.toml")
    r = _emit(cli, exp, kind, *CLOUD_ARGS[kind], "--image", "registry.example/dlperf:1")
    assert r.code == 0, r.err
    assert CHECKS[kind](_load(kind, r.out)) == []
    # The checks can fail: a job broken as a hand edit would break it is refused.
    broken = _load(kind, r.out)
    del broken[{"sagemaker": "RoleArn", "vertex": "jobSpec", "azureml": "command"}[kind]]
    assert CHECKS[kind](broken)


def test_the_three_cloud_jobs_describe_the_same_study(
    cli: Callable, tiny_exp: Callable, tmp_path: Path
) -> None:
    """The fields they share (the table of docs/scale.md): one image, one command per node,
    2 nodes of the instance type given; each keeps the study's store and figures in its
    output location."""
    exp = tiny_exp(name="digits_smallcnn.toml")
    seen = {}
    for kind in CHECKS:
        out = tmp_path / f"{kind}.job"
        extra = [*CLOUD_ARGS[kind], "--image", "me/dl:2", "--instance-type", f"{kind}-type"]
        r = _emit(cli, exp, kind, *extra, "--out", str(out))
        assert r.code == 0, r.err
        fields = shared(kind, _load(kind, out.read_text()))
        assert set(fields) == set(SHARED)
        assert r.err.splitlines()[-1] == (
            f"2 x {kind}-type running me/dl:2; output: {fields['output location']}"
        )
        seen[kind] = fields
    study = [
        "dlperf",
        "scale",
        str(exp),
        "--workers",
        "4",
        "--mode",
        "weak",
        "--per-worker-batch",
        "8",
        "--steps",
        "5",
    ]
    outs = {
        "sagemaker": "/opt/ml/model",
        "vertex": "/gcs/my-bucket/dlperf",
        "azureml": "${{outputs.results}}",
    }
    for kind, fields in seen.items():
        assert fields["image"] == "me/dl:2" and fields["instance count"] == 2
        assert fields["instance type"] == f"{kind}-type"
        out = outs[kind]
        assert fields["command"] == [
            *study,
            "--set",
            f'run.out_dir="{out}/dlperf_runs"',
            "--nnodes",
            "2",
        ]
        assert fields["environment"]["DLPERF_DB"] == f"{out}/dlperf.db"
        assert fields["output location"] == CLOUD_ARGS[kind][1]


def test_emitting_a_cloud_job_imports_no_torch(db: str, tiny_exp: Callable, tmp_path: Path) -> None:
    """--emit only checks the study's options and writes a file: a fresh interpreter emits
    all three cloud jobs without importing torch (4 CPU-seconds on a CI machine)."""
    exp = tiny_exp(name="digits_smallcnn.toml")
    jobs = {kind: str(tmp_path / f"{kind}.job") for kind in CHECKS}
    probe = (
        "import sys\nfrom dlperf.cli import main\n"
        f"for kind, out in {jobs!r}.items():\n"
        f"    extra = {CLOUD_ARGS!r}[kind]\n"
        f"    sys.argv = ['dlperf', 'scale', {str(exp)!r}, '--workers', '4', '--mode', 'weak',\n"
        "                '--per-worker-batch', '8', '--steps', '5', '--nnodes', '2',\n"
        "                '--emit', kind, '--out', out, *extra]\n"
        "    try:\n        main()\n    except SystemExit as e:\n        assert not e.code, e\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.stdout.splitlines()[-1:] == ["[]"], result.stdout + result.stderr
    for kind, out in jobs.items():  # and the jobs were written
        assert CHECKS[kind](_load(kind, Path(out).read_text())) == []


def _fake_dlperf(directory: Path) -> dict[str, str]:
    """A `dlperf` on PATH that prints its arguments and DLPERF_DB as JSON."""
    program = directory / "dlperf"
    program.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "print(json.dumps([sys.argv[1:], os.environ.get('DLPERF_DB')]))\n"
    )
    program.chmod(0o755)
    return {**os.environ, "PATH": f"{directory}:{os.environ['PATH']}"}


def _node(command: list[str], env: dict[str, str]) -> list:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=True)
    return json.loads(done.stdout)


def test_each_node_of_a_cloud_job_finds_its_rank_and_the_first_node(
    cli: Callable, tiny_exp: Callable, tmp_path: Path
) -> None:
    """Each job's command run as each platform runs it on node 1 of 2, with what the platform
    gives that node (SageMaker's resource config, Vertex's CLUSTER_SPEC, Azure's variables)."""
    exp = tiny_exp(name="digits_smallcnn.toml")
    env = _fake_dlperf(tmp_path)
    tail = ["--nnodes", "2", "--node-rank", "1"]

    config = tmp_path / "resourceconfig.json"
    config.write_text(json.dumps({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}))
    job = json.loads(_emit(cli, exp, "sagemaker", *CLOUD_ARGS["sagemaker"]).out)
    spec = job["AlgorithmSpecification"]
    entry = [
        e.replace("/opt/ml/input/config/resourceconfig.json", str(config))
        for e in spec["ContainerEntrypoint"]
    ]
    argv, db = _node(entry + spec["ContainerArguments"], {**env, **job["Environment"]})
    assert argv[-6:] == [*tail, "--rdzv", "algo-1:29500"] and db == "/opt/ml/model/dlperf.db"

    job = json.loads(_emit(cli, exp, "vertex", *CLOUD_ARGS["vertex"]).out)
    pools = job["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == [1, 1]
    container = pools[1]["containerSpec"]
    cluster = {
        "cluster": {
            "workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
            "workerpool1": ["cmle-training-workerpool1-ab-0:2222"],
        },
        "task": {"type": "workerpool1", "index": 0},
    }
    node_env = {**env, "CLUSTER_SPEC": json.dumps(cluster)}
    node_env |= {v["name"]: v["value"] for v in container["env"]}
    argv, db = _node(container["command"] + container["args"], node_env)
    assert argv[-6:] == [*tail, "--rdzv", "cmle-training-workerpool0-ab-0:29500"]
    assert db == "/gcs/my-bucket/dlperf/dlperf.db"

    job = yaml.safe_load(_emit(cli, exp, "azureml", *CLOUD_ARGS["azureml"]).out)
    command = job["command"].replace("${{outputs.results}}", str(tmp_path / "out"))
    azure = {"NODE_RANK": "1", "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105"}
    argv, db = _node(["bash", "-c", command], {**env, **azure})
    assert argv[-6:] == [*tail, "--rdzv", "10.0.0.4:6105"]
    assert db == f"{tmp_path / 'out'}/dlperf.db"
    assert argv[argv.index("--set") + 1] == f'run.out_dir="{tmp_path / "out"}/dlperf_runs"'


@pytest.mark.parametrize(
    ("kind", "extra", "message"),
    [
        ("sagemaker", ["--role", "arn:aws:iam::123456789012:role/R"], "needs --output-uri s3://"),
        ("sagemaker", ["--output-uri", "s3://b/p"], "needs --role arn:aws:iam::ACCOUNT"),
        ("sagemaker", ["--output-uri", "s3://b/p", "--role", "admin"], "needs --role"),
        ("vertex", ["--output-uri", "s3://b/p"], "needs --output-uri gs://BUCKET/PATH"),
        ("vertex", ["--output-uri", "gs://b", "--gpus-per-node", "1"], "MACHINE:ACCELERATOR"),
        ("azureml", ["--output-uri", "/data"], "needs --output-uri azureml://"),
        ("lambda", [], "use slurm, kubernetes or sagemaker, vertex, azureml"),
    ],
)
def test_a_cloud_job_missing_what_its_platform_needs_exits_2(
    cli: Callable, tiny_exp: Callable, kind: str, extra: list[str], message: str
) -> None:
    r = _emit(cli, tiny_exp(), kind, *extra)
    assert r.code == 2 and message in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1


def test_a_vertex_job_on_gpus_names_its_accelerator(cli: Callable, tiny_exp: Callable) -> None:
    extra = ["--gpus-per-node", "2", "--instance-type", "n1-standard-8:NVIDIA_TESLA_T4"]
    r = _emit(cli, tiny_exp(), "vertex", *CLOUD_ARGS["vertex"], *extra)
    assert r.code == 0, r.err
    job = json.loads(r.out)
    machine = job["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]
    assert machine == {
        "machineType": "n1-standard-8",
        "acceleratorType": "NVIDIA_TESLA_T4",
        "acceleratorCount": 2,
    }
    assert vertex_errors(job) == []


def test_the_sagemaker_request_passes_botocores_own_validation(
    cli: Callable, tiny_exp: Callable
) -> None:
    """With the AWS SDK's service model (botocore, when installed: it is not a dependency),
    the request is validated offline as `create_training_job` would before sending it."""
    session = pytest.importorskip("botocore.session")
    from botocore.validate import validate_parameters

    model = session.get_session().get_service_model("sagemaker")
    shape = model.operation_model("CreateTrainingJob").input_shape
    job = json.loads(_emit(cli, tiny_exp(), "sagemaker", *CLOUD_ARGS["sagemaker"]).out)
    validate_parameters(job, shape)  # raises ParamValidationError on any mismatch
    with pytest.raises(Exception, match="Missing required parameter"):
        validate_parameters({k: v for k, v in job.items() if k != "RoleArn"}, shape)
