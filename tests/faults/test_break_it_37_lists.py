"""Break-it round 37, the config lists whose items are a study's points (fixer F8).

C10. distill.top_k = [5, 5] (or --top-k 5,5) was taken without a word: the study listed one
     student twice and named its figure top-k5-5. scale.workers, its batches and modes were
     deduplicated silently, scale.comm, strategy, allreduce and bucket_mb ran a point twice,
     infer.batch benchmarked a batch twice. Every such list refuses a repeated value now, in
     one line naming key and value (as a sweep axis refuses a repeat), from files, --set and
     the flags alike.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from dlperf.config import DistillConfig, InferConfig, ScaleConfig
from dlperf.config.loading import validation_message
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
EXP = '[model]\nname = "smallcnn"\n[data]\nname = "digits"\n[train]\nepochs = 1\n'


@pytest.mark.parametrize(
    ("model", "key", "value", "said"),
    [
        (DistillConfig, "top_k", [5, 5], "5 is given twice"),
        (DistillConfig, "top_k", [5, 3, 5, 5], "5 is given 3 times"),
        (ScaleConfig, "workers", [2, 1, 2], "2 is given twice"),
        (ScaleConfig, "mode", ["weak", "weak"], "'weak' is given twice"),
        (ScaleConfig, "global_batch", [256, 256], "256 is given twice"),
        (ScaleConfig, "per_worker_batch", [32, 32], "32 is given twice"),
        (ScaleConfig, "comm", ["fp16", "fp16"], "'fp16' is given twice"),
        (ScaleConfig, "strategy", ["ddp", "ddp"], "'ddp' is given twice"),
        (ScaleConfig, "allreduce", ["ring", "ring"], "'ring' is given twice"),
        (ScaleConfig, "bucket_mb", [25, 25.0], "25.0 is given twice"),
        (InferConfig, "batch", [1, 8, 1], "1 is given twice"),
    ],
)
def test_a_repeated_point_is_refused(
    model: type[BaseModel], key: str, value: list[Any], said: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        model.model_validate({key: value})
    line = str(validation_message(caught.value, "exp.toml"))
    assert line.startswith(f"exp.toml: {key}: {said} (got "), line


@pytest.mark.parametrize(
    ("key", "value"),
    [("workers", [1, 2, 4]), ("global_batch", 256), ("global_batch", [128, 256]),
     ("mode", "weak"), ("mode", ["weak", "strong"]), ("bucket_mb", [1, 1.5])],
)  # fmt: skip
def test_distinct_points_are_taken(key: str, value: Any) -> None:
    assert getattr(ScaleConfig.model_validate({key: value}), key) == value


def test_distill_top_k_twice_in_the_file(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "dist.toml"
    path.write_text(EXP + "[distill]\ntop_k = [5, 5]\n")
    # no distill.unlabeled: refused before anything trains, were the repeat let through
    one_line(cli("distill", str(path)), 2, f"{path}: distill.top_k: 5 is given twice")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["distill", "{exp}", "--top-k", "5,5"], "--top-k: distill.top_k: 5"),
        (["scale", "{exp}", "--workers", "2,2"], "--workers: scale.workers: 2"),
        (["scale", "{exp}", "--comm", "fp16,fp16"], "--comm: scale.comm: 'fp16'"),
        (["scale", "{exp}", "--bucket-mb", "4,4"], "--bucket-mb: scale.bucket_mb"),
        (["scale", "{exp}", "--global-batch", "64,64"], "scale.global_batch: 64"),
        (["scale", "{exp}", "--mode", "weak,weak"], "--mode: scale.mode: 'weak'"),
        (["scale", "max-batch", "{exp}", "--workers", "2,2", "--set", "scale.framework=horovod"],
         "--workers: scale.workers: 2"),
        (["scale", "allreduce", "--workers", "2,2", "--sizes", "x"], "--workers: scale.workers: 2"),
        (["infer", "bench", "{tmp}/none.onnx", "--batch", "1,1"], "--batch: infer.batch: 1"),
    ],
)  # fmt: skip
def test_a_flag_that_repeats_a_point_is_refused(
    cli: Cli, tmp_path: Path, args: list[str], said: str
) -> None:
    # Each command is also refused after its config is read (no scale.steps, no ONNX file,
    # ...): a repeat let through ends there, not in a study.
    exp = tmp_path / "exp.toml"
    exp.write_text(EXP)
    given = [a.format(exp=exp, tmp=tmp_path) for a in args]
    one_line(cli(*given), 2, said, " is given twice")
