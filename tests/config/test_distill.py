"""dlperf.config.distill: [distill]'s defaults (K = 100, P = 1), its ranges, and that a
config's list of K is its own."""

from __future__ import annotations

import pytest

from dlperf.config.distill import DistillConfig, DistillJob
from dlperf.config.loading import load_job
from dlperf.errors import UserError


def test_defaults_train_the_teacher_and_keep_100_images_per_class() -> None:
    config = load_job(DistillJob, None, []).distill
    assert config == DistillConfig()
    assert (config.unlabeled, config.top_k, config.top_p, config.score_batch) == (
        None,
        [100],
        1,
        256,
    )
    assert (config.teacher, config.student, config.finetune_lr) == (None, None, None)
    assert (config.pretrain_epochs, config.finetune_epochs) == (None, None)


def test_each_config_has_its_own_top_k_list() -> None:
    first, second = DistillConfig(), DistillConfig()
    first.top_k.append(5)
    assert second.top_k == [100]
    assert DistillConfig().top_k == [100]


def test_keys_set_with_set_arrive_typed() -> None:
    job = load_job(
        DistillJob,
        None,
        [
            "distill.unlabeled=mnist5k:image_size=8",
            "distill.top_k=[10,50]",
            "distill.top_p=2",
            "distill.finetune_lr=0.01",
        ],
    )
    assert job.distill.unlabeled == "mnist5k:image_size=8"
    assert (job.distill.top_k, job.distill.top_p, job.distill.finetune_lr) == ([10, 50], 2, 0.01)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("distill.top_k=[]", "distill.top_k: must have 1 or more values (got [])"),
        ("distill.top_k=[10,0]", "distill.top_k.1: must be at least 1 (got 0)"),
        ("distill.top_p=0", "distill.top_p: must be at least 1 (got 0)"),
        ("distill.finetune_lr=0", "distill.finetune_lr: must be greater than 0 (got 0)"),
        ("distill.score_batch=0", "distill.score_batch: must be at least 1 (got 0)"),
        ("distill.teacher=0", "distill.teacher: must be at least 1 (got 0)"),
        ("distill.topk=[5]", "unknown key 'distill.topk' (did you mean 'distill.top_k'?)"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(UserError) as e:
        load_job(DistillJob, None, [override])
    assert message in str(e.value) and "\n" not in str(e.value)
