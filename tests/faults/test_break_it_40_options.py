"""Break-it round 40, Left list, fixer F1: options that go with another, dropped without a word.

T1 C3. Each of these exited 0 and said nothing of the option it ignored:
- `scale EXP --out job.yaml` (or --image, --gpus-per-node, --role, --instance-type,
  --output-uri) without --emit: the study ran here, and no job file was written where the user
  believed one was. Now: `--out goes with --emit KIND (without it the study runs here: no
  job file is written)`, exit 2, before the experiment is loaded: nothing run, stored or written.
- `--emit slurm --role R --instance-type T --output-uri U` (the cloud platforms' options) and
  `--emit slurm --image I`: a Slurm script holds none of them; so --role in any job but
  SageMaker's, and --gpus-per-node in SageMaker's and Azure ML's (their machines' GPUs come
  with --instance-type). Now each is refused in one line naming the option and the kinds of
  job that take it, exit 2, no job printed or written. What each kind does take is still
  written; --image still defaults to dlperf:latest where it is taken.
- `scale EXP --allreduce nccl` under the torch framework (TensorFlow's option, docs/scale.md):
  the study ran without it. Now `--allreduce goes with --framework tensorflow (torch takes
  --comm and --bucket-mb)`, exit 2, from the flag, --set and a job file alike (Horovod's, said
  before as `--allreduce is TensorFlow's`, now in the same words).
- `predict smallcnn --device K80 --reps 5` without --measure: the prediction printed, the
  rounds of a measurement that never ran dropped. Now `predict.reps goes with predict.measure`,
  exit 2 (from the flag, --set and predict_model alike); --measure still takes 10 by default.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dlperf.analytic.recorded import predict_model
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

EXAMPLE = str(Path(__file__).parents[2] / "examples" / "scale_digits_weak.toml")
ROLE = "arn:aws:iam::123456789012:role/dlperf"
# A study that would run in seconds here; each refusal comes before it starts.
STUDY = ["--workers", "1", "--steps", "1", "--warmup-steps", "0", "--repeat", "1", "--synthetic",
         "--no-plots", "--no-comm-split"]  # fmt: skip
# Two nodes of one worker, as a job file writes them.
JOB = ["--workers", "2", "--steps", "1", "--nnodes", "2"]
# Each platform's own required options, so that only the option under test can refuse it.
NEEDS = {
    "slurm": [],
    "kubernetes": [],
    "sagemaker": ["--output-uri", "s3://bucket/dlperf", "--role", ROLE],
    "vertex": ["--output-uri", "gs://bucket/dlperf"],
    "azureml": ["--output-uri", "azureml://datastores/workspaceblobstore/paths/dlperf"],
}
EMIT_ONLY = "go with --emit KIND (without it the study runs here: no job file is written)"
CLOUD = "--emit sagemaker|vertex|azureml"


# --- C3: scale's job file options without --emit ---------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "job.yaml"], "--out goes with --emit KIND (without it the study runs here: "
                                "no job file is written)"),
        (["--image", "foo:1", "--gpus-per-node", "4"], f"--image and --gpus-per-node {EMIT_ONLY}"),
        (["--role", ROLE], "--role goes with --emit KIND ("),
        (["--out", "job.yaml", "--instance-type", "ml.m5.xlarge", "--output-uri", "s3://b/x"],
         f"--out, --instance-type and --output-uri {EMIT_ONLY}"),
    ],
)  # fmt: skip
def test_a_job_files_option_without_emit_is_refused_and_nothing_runs(
    cli: Cli, store: RunStore, tmp_path: Path, args: list[str], message: str
) -> None:
    """T1's cases: each ran the study here, exit 0; the --out file was never written."""
    r = cli("scale", "run", EXAMPLE, *STUDY, *args)
    one_line(r, 2, message)
    assert r.out == ""
    assert not (tmp_path / "job.yaml").exists()
    assert store.list_runs() == []


def test_the_option_is_refused_before_the_studys_own_checks(cli: Cli) -> None:
    """Before the experiment is loaded: what the command line says of itself comes first."""
    r = cli("scale", "run", EXAMPLE, "--steps", "1", "--epochs", "1", "--out", "job.yaml")
    one_line(r, 2, "--out goes with --emit KIND (")


# --- C3: options a kind of job file has no place for ------------------------------------------


@pytest.mark.parametrize(
    ("kind", "args", "message"),
    [
        ("slurm", ["--image", "foo:1"],
         "--image goes with --emit kubernetes|sagemaker|vertex|azureml (--emit slurm has no "
         "place for it)"),
        ("slurm", ["--instance-type", "ml.m5.xlarge", "--output-uri", "s3://b/x"],
         f"--instance-type and --output-uri go with {CLOUD} (--emit slurm has no place for them)"),
        ("slurm", ["--role", ROLE, "--instance-type", "ml.m5.xlarge", "--output-uri", "s3://b/x"],
         "--instance-type, --output-uri and --role go with other --emit kinds than slurm "
         f"(--instance-type: {CLOUD}; --output-uri: {CLOUD}; --role: --emit sagemaker)"),
        ("kubernetes", ["--role", ROLE],
         "--role goes with --emit sagemaker (--emit kubernetes has no place for it)"),
        ("kubernetes", ["--output-uri", "s3://b/x"], f"--output-uri goes with {CLOUD}"),
        ("vertex", ["--role", ROLE], "--role goes with --emit sagemaker (--emit vertex has"),
        ("azureml", ["--role", ROLE], "--role goes with --emit sagemaker (--emit azureml has"),
        ("sagemaker", ["--gpus-per-node", "1"],
         "--gpus-per-node goes with --emit slurm|kubernetes|vertex (--emit sagemaker has no "
         "place for it)"),
        ("azureml", ["--gpus-per-node", "1"], "--gpus-per-node goes with --emit slurm|kub"),
    ],
)  # fmt: skip
def test_an_option_its_kind_of_job_has_no_place_for_is_refused(
    cli: Cli, tmp_path: Path, kind: str, args: list[str], message: str
) -> None:
    """T1's `--emit slurm --role R --instance-type T --output-uri U` and `--emit slurm --image
    I` wrote a script holding none of them, exit 0: refused, nothing printed or written."""
    out = tmp_path / "job"
    r = cli("scale", "run", EXAMPLE, *JOB, "--emit", kind, *NEEDS[kind], *args, "--out", str(out))
    one_line(r, 2, message)
    assert not out.exists()
    printed = cli("scale", "run", EXAMPLE, *JOB, "--emit", kind, *NEEDS[kind], *args)
    one_line(printed, 2, message)
    assert printed.out == ""


def test_what_each_kind_takes_is_still_written(cli: Cli, tmp_path: Path) -> None:
    """--gpus-per-node in a Slurm script, --image in a PyTorchJob (dlperf:latest when not
    given), --instance-type with the cloud platforms'."""
    r = cli("scale", "run", EXAMPLE, *JOB, "--emit", "slurm", "--gpus-per-node", "2")
    assert r.code == 0, r.err
    assert "#SBATCH --gpus-per-node=2" in r.out.splitlines()
    for image, args in [("dlperf:latest", []), ("me/dl:1", ["--image", "me/dl:1"])]:
        r = cli("scale", "run", EXAMPLE, *JOB, "--emit", "kubernetes", *args)
        assert r.code == 0, r.err
        pods = yaml.safe_load(r.out.split("\n", 3)[3])["spec"]["pytorchReplicaSpecs"]
        assert pods["Master"]["template"]["spec"]["containers"][0]["image"] == image
    for kind in ("sagemaker", "vertex", "azureml"):
        out = tmp_path / f"{kind}.job"
        extra = [*NEEDS[kind], "--instance-type", f"{kind}-type", "--out", str(out)]
        r = cli("scale", "run", EXAMPLE, *JOB, "--emit", kind, *extra)
        assert r.code == 0, r.err
        assert r.err.splitlines()[-1].startswith(f"2 x {kind}-type running dlperf:latest")


def test_an_unknown_kind_is_said_before_its_options(cli: Cli) -> None:
    r = cli("scale", "run", EXAMPLE, *JOB, "--emit", "lsf", "--role", ROLE)
    one_line(r, 2, "unknown --emit 'lsf' (use slurm, kubernetes or sagemaker, vertex, azureml)")


# --- C3: --allreduce outside TensorFlow -------------------------------------------------------

TORCH = "--allreduce goes with --framework tensorflow (torch takes --comm and --bucket-mb)"


@pytest.mark.parametrize(
    "args",
    [["--allreduce", "nccl"], ["--set", 'scale.allreduce=["ring"]'],
     ["--framework", "torch", "--allreduce", "hierarchical"]],
)  # fmt: skip
def test_allreduce_under_torch_is_refused_and_nothing_runs(
    cli: Cli, store: RunStore, args: list[str]
) -> None:
    """T1's `scale EXP --allreduce nccl`: the torch study ran without it, exit 0."""
    r = cli("scale", "run", EXAMPLE, *STUDY, *args)
    one_line(r, 2, TORCH)
    assert r.err.splitlines()[-1] == f"error: {TORCH}"
    assert store.list_runs() == []


def test_allreduce_under_torch_is_refused_in_a_job_file_too(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "job"
    r = cli("scale", "run", EXAMPLE, *JOB, "--allreduce", "ring", "--emit", "slurm", "--out",
            str(out))  # fmt: skip
    one_line(r, 2, TORCH)
    assert not out.exists()


def test_allreduce_under_horovod_is_said_in_the_same_words(cli: Cli) -> None:
    r = cli("scale", "run", EXAMPLE, *STUDY, "--framework", "horovod", "--allreduce", "ring")
    one_line(r, 2, "--allreduce goes with --framework tensorflow (horovod takes --comm and")


# --- C3: predict --reps without --measure -----------------------------------------------------

REPS = "predict.reps goes with predict.measure"


@pytest.mark.parametrize("args", [["--reps", "5"], ["--set", "predict.reps=5"]])
def test_predict_reps_without_measure_is_refused(cli: Cli, args: list[str]) -> None:
    """T1's `predict smallcnn --input 1,8,8 --device K80 --reps 5`: exit 0, nothing measured."""
    r = cli("predict", "smallcnn", "--input", "1,8,8", "--device", "K80", *args)
    one_line(r, 2, REPS, "--measure")
    assert r.out == ""


def test_predict_without_reps_still_predicts(cli: Cli) -> None:
    r = cli("predict", "smallcnn", "--input", "1,8,8", "--device", "K80")
    assert r.code == 0, r.err


def _no_store() -> RunStore:
    raise AssertionError("a prediction without predict.measure opens no store")


def test_predict_model_refuses_reps_without_measure() -> None:
    with pytest.raises(UserError, match=REPS):
        predict_model("smallcnn", "K80", _no_store, input_shape=(1, 8, 8), reps=5)
