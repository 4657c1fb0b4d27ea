"""Break-it round 28, causes L, M, N and O: distill's pretrain split and three of converge's.

C1 (L). distill's pretrain stage, whose split (a tenth for test) drew the one image kept for a
class, was refused by the run, after the teacher had trained, naming data.split_seed and
data.test_fraction: keys of the labelled data that do not reach it (or retrain the teacher on
other splits). Now the split seed is distill's own to choose, one that keeps every class;
where none does, the line names distill's keys.
C2 (M). `converge regress --compare` of a curve that is also a source was reported as a
held-out check (curve error 7e-09 %). Now refused in one line.
C3 (N). Predicted steps were rounded up to a whole unit on a fractional axis (epochs logged
every 0.1): an exact 1.5 read 2 (error 33 %), an axis of 1e-298 steps read 0 (-100 %). Now
rounded up only where the steps are whole numbers.
C4 (O). Speed tables and `--predict` took a global batch below the workers (4 over 16).
Now refused in one line, naming the row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from dlperf.config import DataConfig, DistillConfig
from dlperf.data import load_data
from dlperf.distill import pretrain
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# --- C1 (L): the pretrain split keeps every class it can ---------------------------------------

LABELLED = """
[model]
name = "smallcnn"
[data]
name = "npz"
root = "{root}"
[train]
epochs = 6
batch_size = 16
lr = 0.1
[run]
threads = 1
warmup_steps = 1
out_dir = "{out}"
[distill]
pretrain_epochs = 1
finetune_epochs = 1
"""


def _grey(rng: np.random.Generator, n: int, low: int) -> np.ndarray:
    """`n` 8x8 grey images with pixels in [low, low + 10)."""
    return rng.integers(low, low + 10, (n, 1, 8, 8), dtype=np.uint8)


@pytest.mark.faults  # three trainings: over 10 s under load
def test_a_class_kept_once_keeps_its_training_image(cli: Cli, db: str, tmp_path: Path) -> None:
    """Labelled: dark (class 0), grey (1) and bright (2) images. Pool: 12 dark, 12 grey, 1
    bright; K = 10 keeps 10, 10, then the bright one, the pseudo-labelled file's 21st image,
    which split seed 0 draws for test. Before: "data.test_fraction 0.1 at data.split_seed 0
    leaves class 2 of npz no training image (... set data.split_seed = 1 ...)", after the
    teacher trained. Now pretrain and finetune run, the labelled data split as it was."""
    rng = np.random.default_rng(0)
    labelled = tmp_path / "labelled.npz"
    images = np.concatenate([_grey(rng, 30, low) for low in (0, 120, 245)])
    np.savez(labelled, images=images, labels=np.repeat([0, 1, 2], 30))
    pool = tmp_path / "pool.npz"
    np.savez(pool, images=np.concatenate([_grey(rng, n, low) for n, low in GREYS]))
    exp = tmp_path / "dist.toml"
    exp.write_text(LABELLED.format(root=labelled, out=tmp_path / "dlperf_runs"))
    result = cli("distill", str(exp), "--unlabeled", f"npz:root={pool}", "--top-k", "10")
    assert result.code == 0, result.err
    assert "select K=10: kept 21 images" in result.err, result.err
    runs = {r.tags.get("stage"): r for r in RunStore.open(db).list_runs()}
    assert runs["pretrain"].status == runs["finetune"].status == "finished"
    seeds = {s: runs[s].config["data"]["split_seed"] for s in ("teacher", "pretrain", "finetune")}
    assert seeds["teacher"] == seeds["finetune"] == 0 and seeds["pretrain"] > 0
    kept = load_data(DataConfig.model_validate(runs["pretrain"].config["data"]))
    assert torch.unique(kept.train.labels).tolist() == [0, 1, 2]


GREYS = ((12, 0), (12, 120), (1, 245))  # the pool: (images, lowest pixel)


def _pseudo(path: Path, labels: list[int]) -> DataConfig:
    """A pseudo-labelled file of `labels`, read as distill's pretrain stage reads it."""
    rng = np.random.default_rng(1)
    np.savez(path, images=_grey(rng, len(labels), 0), labels=np.array(labels))
    f = pretrain.FRACTION
    return DataConfig(name="npz", root=str(path), test_fraction=f, val_fraction=f)


def test_no_seed_keeping_every_class_names_distills_keys(tmp_path: Path) -> None:
    """One image of each of 6 classes: a tenth for test leaves 5 training images, so no split
    seed keeps every class. Refused naming distill's keys, not data.split_seed."""
    cfg = _pseudo(tmp_path / "p.npz", list(range(6)))
    data = load_data(cfg)
    assert pretrain.split_seed(data, cfg) == 0
    opts = DistillConfig(unlabeled="npz:root=x.npz", top_k=[1])
    with pytest.raises(UserError) as caught:
        pretrain.check_kept(1, data, [1] * 6, opts, None)
    assert (caught.value.message, caught.value.hint) == (
        "pretrain K=1: the teacher kept 6 images (classes 0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1), "
        "and at none of 100 split seeds does a tenth for test and a tenth of the rest for "
        "validation leave every class a training image (pretrain splits its images itself: "
        "data.test_fraction and data.split_seed are the labelled data's)",
        "raise distill.top_k or distill.top_p, or give a larger, more varied pool (--unlabeled)",
    )


# --- C2 (M): --compare is a held-out run ---------------------------------------------------------


@pytest.fixture
def depths(tmp_path: Path) -> Path:
    """Exact Optimus curves of depth 20, 32 and 44 (the report's), as d20.csv and so on."""
    k = np.arange(10, 410, 10)
    for d in (20, 32, 44):
        b0, b1, b2 = np.exp(-4 - 0.01 * d), np.exp(0.005 * d), np.exp(-2 - 0.02 * d)
        rows = "".join(f"{a},{1 / (b0 * a + b1) + b2}\n" for a in k)
        (tmp_path / f"d{d}.csv").write_text("step,loss\n" + rows)
    return tmp_path


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("d44.csv:depth=44", "d44.csv:depth=44 is both a source and --compare"),
        ("./d44.csv:depth=40", "d44.csv:depth=44 (as ./d44.csv:depth=40) is both a source and "),
    ],
)
def test_compare_that_is_a_source_is_refused(
    cli: Cli, depths: Path, source: str, said: str
) -> None:
    """Before: "compared with d44.csv: curve error % (mean, 40 points) 7.08e-09", in-sample."""
    result = cli("converge", "regress", "d20.csv:depth=20", "d32.csv:depth=32", source,
                 "--features", "depth", "--x", "step", "--y", "loss", "--predict", "depth=44",
                 "--compare", "d44.csv:depth=44", "--target", "0.5")  # fmt: skip
    one_line(result, 2, said, "(leave it out of the sources to measure the prediction on it)")


# --- C3 (N): a fractional step axis is not rounded to whole steps -------------------------------


@pytest.mark.parametrize("form", ["optimus", "ensemble"])
@pytest.mark.parametrize("unit", [0.01, 1e-300])
def test_a_fractional_axis_is_predicted_as_it_is(
    cli: Cli, tmp_path: Path, form: str, unit: float
) -> None:
    """An exact Optimus curve reaching 0.5 at 150 units of `unit`. Before: predicted 2 (error
    33 %) at 0.01, 0 (error -100 %) at 1e-300."""
    path = tmp_path / "c.csv"
    rows = "".join(f"{k * unit!r},{1 / (0.01 * k + 1) + 0.1}\n" for k in range(10, 410, 10))
    path.write_text("step,loss\n" + rows)
    result = cli("converge", "predict", "--csv", str(path), "--x", "step", "--y", "loss",
                 "--target", "0.5", "--form", form, "--json")  # fmt: skip
    assert result.code == 0, result.err
    p = json.loads(result.out)
    assert p["actual_step"] == pytest.approx(150 * unit)
    assert p["predicted_step"] == pytest.approx(150 * unit, rel=1e-6)
    assert abs(p["error_pct"]) < 1e-4


def test_whole_steps_are_still_rounded_up(cli: Cli, tmp_path: Path) -> None:
    """The same curve on whole steps reaching 0.5 at 150.5: the first whole step, 151."""
    path = tmp_path / "c.csv"
    rows = "".join(f"{k},{1 / (0.01 * (k - 0.5) + 1) + 0.1}\n" for k in range(10, 410, 10))
    path.write_text("step,loss\n" + rows)
    result = cli("converge", "predict", "--csv", str(path), "--x", "step", "--y", "loss",
                 "--target", "0.5", "--form", "optimus", "--json")  # fmt: skip
    assert result.code == 0, result.err
    assert json.loads(result.out)["predicted_step"] == 151


# --- C4 (O): a global batch below the workers ----------------------------------------------------


@pytest.fixture
def speed_csv(tmp_path: Path) -> Path:
    """The report's exact optimus-sync table (24 rows), then '16,1,4,0.05' on line 26."""
    th = (1e-4, 0.01, 0.002, 0.001, 0.003)
    rows = [
        f"{w},{p},{m},{th[0] * m / w + th[1] + th[2] * w / p + th[3] * w + th[4] * p!r}\n"
        for w in (1, 2, 4, 8)
        for p in (1, 2, 4)
        for m in (64, 128)
    ]
    path = tmp_path / "speed.csv"
    path.write_text("workers,ps,global_batch,step_time_s\n" + "".join(rows) + "16,1,4,0.05\n")
    return path


LEAST = "(a data-parallel step takes at least one sample a worker: the batch is the global one)"


def test_a_row_with_fewer_samples_than_workers_is_refused(cli: Cli, speed_csv: Path) -> None:
    result = cli("converge", "speed", "fit", "--csv", str(speed_csv), "--model", "optimus-sync")
    one_line(result, 2, f"{speed_csv}:26: global_batch 4 is less than workers 16 {LEAST}")


@pytest.mark.parametrize("batch", ["2", "3.5"])
def test_a_prediction_with_fewer_samples_than_workers_is_refused(
    cli: Cli, speed_csv: Path, batch: str
) -> None:
    lines = speed_csv.read_text().splitlines()[:-1]
    speed_csv.write_text("\n".join(lines) + "\n")
    at = f"workers=4,ps=1,batch={batch}"
    result = cli("converge", "speed", "fit", "--csv", str(speed_csv), "--model", "optimus-sync",
                 "--predict", at)  # fmt: skip
    one_line(result, 2, f"--predict {at}: batch {batch} is less than workers 4 {LEAST}")
