"""Issue 41's leftover of break-it round 12 (C6): `dlperf run` refuses in one line an [augment]
that blanks every image (a Cutout square covering it wherever it is centred, a crop padding that
lets a crop miss it), but `dlperf scale run` trained its points on such images (exit 0, the
points stored finished), and `dlperf distill` said so only once its teacher was about to train,
with the study already stored. Both now refuse it as `run` does, before anything is stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult, write_distill_exp
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

BLANKING = [("augment.cutout=100", "augment.cutout 100"),
            ("augment.crop_padding=8", "augment.crop_padding 8")]  # fmt: skip

SCALE_EXP = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 96
[train]
lr = 0.05
[run]
threads = 1
out_dir = "{out}"
"""
POINT = ["--workers", "1", "--mode", "weak", "--per-worker-batch", "8", "--steps", "2",
         "--warmup-steps", "1", "--repeat", "1", "--no-plots", "--no-comm-split",
         "--threads-per-worker", "1"]  # fmt: skip


def _nothing_stored(store: RunStore) -> None:
    assert store.list_runs() == []
    with pytest.raises(UserError, match="no study 1 "):  # a fresh store: no study at all
        store.get_study(1)


@pytest.mark.parametrize(("setting", "said"), BLANKING)
def test_scale_run_refuses_points_of_blank_images(
    cli: Cli, store: RunStore, tmp_path: Path, setting: str, said: str
) -> None:
    exp = tmp_path / "blank.toml"
    exp.write_text(SCALE_EXP.format(out=tmp_path / "runs"))
    # before: the point trained on blank images, exit 0, stored finished
    result = cli("scale", "run", str(exp), *POINT, "--set", setting)
    one_line(result, 2, said, "8x8 images of digits")
    _nothing_stored(store)


@pytest.mark.parametrize(("setting", "said"), BLANKING)
def test_distill_refuses_blank_images_before_its_study_is_stored(
    cli: Cli, store: RunStore, tmp_path: Path, setting: str, said: str
) -> None:
    exp = write_distill_exp(tmp_path, '[distill]\nunlabeled = "digits:holdout=0.8"\ntop_k = [2]\n')
    # before: "distill 'dist', study 1: ..." and the teacher's stage refused it, study stored
    result = cli("distill", str(exp), "--set", setting)
    one_line(result, 2, said, "8x8 images of digits")
    assert "study" not in result.err, result.err
    _nothing_stored(store)
