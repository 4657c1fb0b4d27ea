"""dlperf.distributed.cloudjobs called directly: each platform's job carries the study's
command with what every node adds, its machines, image, output and environment; what a
platform needs and lacks (output URI, role, accelerator, SageMaker's argument limits) is
one line; `shared` reads the same fields back from every platform's job, and `described`
says it in one line. (The CLI's --emit and the schemas are in test_jobfiles.py.)"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest
import yaml

from dlperf.distributed.cloudjobs import (
    CLOUD,
    PORT,
    RENDER,
    CloudJob,
    _node_script,
    described,
    render_azureml,
    render_sagemaker,
    render_vertex,
    shared,
)
from dlperf.errors import UserError

ARGV = ["dlperf", "scale", "exp.toml", "--workers", "2"]
ROLE = "arn:aws:iam::123456789012:role/Trainer"


def job(**given: object) -> CloudJob:
    base = CloudJob(ARGV, 3, 0, "study-1", "reg/dlperf:1", "m.large", None, None)
    return replace(base, **given)  # type: ignore[arg-type]


def test_sagemaker_runs_the_command_on_each_instance_and_keeps_its_output() -> None:
    request = json.loads(render_sagemaker(job(output_uri="s3://b/p/", role=ROLE)))
    spec = request["AlgorithmSpecification"]
    assert spec["ContainerArguments"] == [
        *ARGV, "--set", 'run.out_dir="/opt/ml/model/dlperf_runs"', "--nnodes", "3"
    ]  # fmt: skip
    assert spec["ContainerEntrypoint"][:2] == ["bash", "-c"]
    assert f'--rdzv "$head:{PORT}"' in spec["ContainerEntrypoint"][2]
    assert request["ResourceConfig"]["InstanceCount"] == 3
    assert request["OutputDataConfig"] == {"S3OutputPath": "s3://b/p"}  # trailing / dropped
    assert request["Environment"] == {"DLPERF_DB": "/opt/ml/model/dlperf.db"}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"role": ROLE}, r"--emit sagemaker needs --output-uri s3://BUCKET/PATH"),
        ({"output_uri": "gs://b", "role": ROLE}, r"--emit sagemaker needs --output-uri s3://"),
        ({"output_uri": "s3://b"}, r"--emit sagemaker needs --role arn:aws:iam::ACCOUNT:role/NAME"),
        ({"output_uri": "s3://b", "role": "Trainer"}, "needs --role arn:aws:iam"),
        ({"output_uri": "s3://b", "role": ROLE, "argv": ["x" * 257]},
         r"at most 100 container arguments of at most 256 characters each \(shorten 'xxx"),
        ({"output_uri": "s3://b", "role": ROLE, "argv": ["x"] * 97},  # 101 with the 4 added
         r"at most 100 container arguments .* \(give fewer options\)"),
    ],
)  # fmt: skip
def test_what_sagemaker_needs_and_refuses(given: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message):
        render_sagemaker(job(**given))


def test_sagemaker_takes_exactly_100_arguments() -> None:
    request = json.loads(render_sagemaker(job(output_uri="s3://b", role=ROLE, argv=["x"] * 96)))
    assert len(request["AlgorithmSpecification"]["ContainerArguments"]) == 100


def test_vertex_has_a_chief_pool_and_one_of_the_other_nodes() -> None:
    body = json.loads(render_vertex(job(output_uri="gs://bucket/out")))
    pools = body["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == [1, 2]
    container = pools[0]["containerSpec"]
    assert container["args"][-4:] == ["--set", 'run.out_dir="/gcs/bucket/out/dlperf_runs"',
                                      "--nnodes", "3"]  # fmt: skip
    assert container["env"] == [{"name": "DLPERF_DB", "value": "/gcs/bucket/out/dlperf.db"}]
    assert pools[0]["machineSpec"] == {"machineType": "m.large"}
    single = json.loads(render_vertex(job(nnodes=1, output_uri="gs://b")))
    assert len(single["jobSpec"]["workerPoolSpecs"]) == 1


def test_vertex_on_gpus_needs_the_accelerator_named() -> None:
    with pytest.raises(UserError, match=r"with 2 GPU\(s\) per node needs the accelerator"):
        render_vertex(job(gpus_per_node=2, output_uri="gs://b"))
    t4 = "n1-standard-8:NVIDIA_TESLA_T4"
    body = json.loads(render_vertex(job(gpus_per_node=2, output_uri="gs://b", instance_type=t4)))
    assert body["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] == {
        "machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4",
        "acceleratorCount": 2,
    }  # fmt: skip


def test_azureml_sets_the_rank_from_its_distributions_variables() -> None:
    loaded = yaml.safe_load(render_azureml(job()))
    words = shlex.split(loaded["command"])
    assert words[0] == "DLPERF_DB=${{outputs.results}}/dlperf.db"
    assert words[-4:] == ["--node-rank", "$NODE_RANK", "--rdzv", "$MASTER_ADDR:$MASTER_PORT"]
    assert loaded["outputs"]["results"] == {"type": "uri_folder", "mode": "rw_mount"}
    with pytest.raises(UserError, match="--emit azureml needs --output-uri azureml://"):
        render_azureml(job(output_uri="s3://b"))


def test_every_platforms_job_reads_back_as_the_same_study() -> None:
    spec = job(output_uri=None, role=ROLE)
    uris = {"sagemaker": "s3://b/o", "vertex": "gs://b/o", "azureml": "azureml://b/o"}
    for kind in CLOUD:
        text = RENDER[kind](replace(spec, output_uri=uris[kind]))
        loaded = yaml.safe_load(text) if kind == "azureml" else json.loads(text)
        fields = shared(kind, loaded)
        assert fields["image"] == "reg/dlperf:1" and fields["instance count"] == 3
        assert fields["command"][: len(ARGV)] == ARGV and fields["command"][-1] == "3"
        assert fields["output location"] == uris[kind]
        assert "DLPERF_DB" in fields["environment"]
        assert described(kind, text) == f"3 x m.large running reg/dlperf:1; output: {uris[kind]}"


def test_described_says_nothing_of_cluster_jobs_and_default_outputs() -> None:
    assert described("slurm", "#!/bin/bash") is None
    assert described("azureml", render_azureml(job())).endswith("output: the job default")


def test_the_node_script_passes_the_containers_arguments_on() -> None:
    script = _node_script("print(0, 'h')")
    assert script.startswith("set -eu; read rank head <<<")
    assert script.endswith(f'exec "$@" --node-rank "$rank" --rdzv "$head:{PORT}"')
