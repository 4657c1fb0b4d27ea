"""dlperf.config.infer: [infer]'s defaults (top 5; bench at batches 1, 8, 32, 20 calls each)
and its ranges, and that a config's list of batches is its own."""

from __future__ import annotations

import pytest

from dlperf.config.infer import InferConfig, InferJob
from dlperf.config.loading import load_job
from dlperf.errors import UserError


def test_defaults() -> None:
    config = load_job(InferJob, None, []).infer
    assert config == InferConfig()
    assert (config.topk, config.batch, config.repeats) == (5, [1, 8, 32], 20)
    assert (config.threads, config.torch) == (None, None)


def test_each_config_has_its_own_batch_list() -> None:
    first = InferConfig()
    first.batch.append(64)
    assert InferConfig().batch == [1, 8, 32]


def test_torch_contender_is_a_run_id_bare_or_quoted_or_a_name() -> None:
    assert load_job(InferJob, None, ["infer.torch=resnet18"]).infer.torch == "resnet18"
    assert load_job(InferJob, None, ['infer.torch="3"']).infer.torch == "3"
    # --set (and a TOML file) read a bare 3 as an integer: the run ID its help promises
    assert load_job(InferJob, None, ["infer.torch=3"]).infer.torch == "3"
    for wrong in ("true", "1.5", "[3]"):
        with pytest.raises(UserError, match=r"infer\.torch: "):
            load_job(InferJob, None, [f"infer.torch={wrong}"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("infer.topk=0", "infer.topk: must be at least 1 (got 0)"),
        ("infer.batch=[]", "infer.batch: must have 1 or more values (got [])"),
        ("infer.batch=[0]", "infer.batch.0: must be at least 1 (got 0)"),
        ("infer.repeats=0", "infer.repeats: must be at least 1 (got 0)"),
        ("infer.threads=0", "infer.threads: must be at least 1 (got 0)"),
        ("infer.top_k=3", "did you mean 'infer.topk'?"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(UserError) as e:
        load_job(InferJob, None, [override])
    assert message in str(e.value) and "\n" not in str(e.value)
