"""Break-it round 55, fixer G1: a scale study's cost and bandwidth figures, and one message.

T1 C1: `scale --price-per-hour 0` (or a catalog device whose price is 0) gave every point a
cost_per_epoch of null (in --json, in the store, "-" in the $/epoch column) and drew no cost
figure: the price was tested for truth, not for being given. A price of 0 now costs 0
(workers x epoch hours x 0), and the cost figure is drawn.

T1 C6: a `--comm noop` point reported an algbw and busbw (the gradient bytes over the time DDP
spent calling a hook that sends nothing: 1.98 GB/s, 42x the real all-reduce on the same
host), which the bandwidth table set beside real figures. A point whose hook does not send
the gradients as they are (noop sends nothing; fp16, bf16 and PowerSGD send compressed ones)
has no algbw or busbw now (null, "-" in the tables); an all-reduce point keeps them.

T1 C5: `--framework tensorflow` without TensorFlow said "--framework tensorflow with
TensorFlow needs TensorFlow": now "--framework tensorflow needs TensorFlow, which is not
installed", as the Horovod line reads.

Through the command, torchrun replaced by ranks made by hand (as tests/distributed's studies
do), so that a whole study takes a second.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.config import ScaleConfig
from dlperf.distributed import planning
from dlperf.distributed.contracts import WorkerSpec, write_ranks
from dlperf.distributed.launch import Launch
from dlperf.distributed.planning import Point, hourly_price
from dlperf.distributed.summary import summarize
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import rank_result

STUDY = ["--workers", "1,2", "--mode", "weak", "--per-worker-batch", "8", "--steps", "4",
         "--warmup-steps", "1", "--allow-oversubscribe"]  # fmt: skip
POINT = Point(workers=2, per_worker_batch=4, global_batch=8, comm="allreduce",
              strategy="ddp", bucket_mb=None, mode="weak")  # fmt: skip
RANKS = [rank_result(r, [0.1, 0.2, 0.3], [0.05, 0.1, 0.2], 4, world=2) for r in range(2)]


@pytest.fixture
def fake_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand in for torchrun: each point's ranks report 10 ms steps (compute 8 ms), 400,000
    gradient bytes and 1 ms of DDP backward communication (tests.conftest.rank_result)."""
    from dlperf.distributed import study

    def run_torchrun(directory: Path, nproc: int, *args: object, **kwargs: object) -> Launch:
        spec = WorkerSpec.read(directory / "spec.json")
        steps = [0.01] * spec.steps
        compute = [0.008] * spec.steps if spec.compute_split else None
        batch = spec.per_worker_batch
        ranks = [rank_result(r, steps, compute, batch, world=nproc) for r in range(nproc)]
        write_ranks(directory / "result.json", ranks)
        return Launch(0, [])

    monkeypatch.setattr(study, "run_torchrun", run_torchrun)


def _study(cli: Callable[..., Any], *args: str) -> dict[str, Any]:
    r = cli(*args, "--json")
    assert r.code == 0, r.err
    return dict(json.loads(r.out))


def _stored(db: str) -> list[dict[str, Any]]:
    store = RunStore.open(db)
    try:
        return [run.summary for run in store.list_runs()]
    finally:
        store.engine.dispose()


def _column(out: str, name: str) -> list[str]:
    """The cells of the first column called `name` of the printed table's 2-worker rows."""
    lines = out.splitlines()
    header = next(line for line in lines if "┃" in line)
    at = [c.strip() for c in header.split("┃")].index(name)
    rows = [[c.strip() for c in line.split("│")] for line in lines if "│" in line]
    return [row[at] for row in rows if row[0] == "2"]


# --- C1: a price of 0 -------------------------------------------------------------------


def test_c1_a_price_of_zero_costs_zero_in_the_summary() -> None:
    common: dict[str, Any] = {"nnodes": 1, "threads": 1, "backend": "gloo", "train_images": 1400}
    assert summarize(POINT, RANKS, **common, price_per_hour=0.0).cost_per_epoch == 0.0
    assert summarize(POINT, RANKS, **common, price_per_hour=None).cost_per_epoch is None


def test_c1_a_price_of_zero_costs_zero_through_the_command(
    cli: Callable[..., Any], db: str, tiny_exp: Callable[..., Path], fake_workers: None
) -> None:
    doc = _study(cli, "scale", str(tiny_exp()), *STUDY, "--price-per-hour", "0")
    assert [row["cost_per_epoch"] for row in doc["rows"]] == [0.0, 0.0]  # was [None, None]
    assert [Path(p).stem for p in doc["artifacts"]][-1] == "cost"  # was: no cost figure
    stored = [s for s in _stored(db) if s and "cost_per_epoch" in s]
    assert [s["cost_per_epoch"] for s in stored] == [0.0, 0.0]
    r = cli("scale", str(tiny_exp()), *STUDY, "--price-per-hour", "0", "--no-plots")
    assert r.code == 0, r.err
    assert set(_column(r.out, "$/epoch")) == {"0"}  # was "-"


def test_c1_a_catalog_device_priced_at_zero_costs_zero(
    cli: Callable[..., Any],
    tiny_exp: Callable[..., Path],
    fake_workers: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    devices = tmp_path / "devices.toml"
    devices.write_text("[K80]\nprice_per_hour_usd = 0.0\n")  # the built-in K80, made free
    monkeypatch.setenv("DLPERF_DEVICES", str(devices))
    assert hourly_price(ScaleConfig(device="K80")) == 0.0
    doc = _study(cli, "scale", str(tiny_exp()), *STUDY, "--device", "K80", "--no-plots")
    assert [row["cost_per_epoch"] for row in doc["rows"]] == [0.0, 0.0]


# --- C6: a hook that sends no gradients as they are ---------------------------------------


@pytest.mark.parametrize("comm", ["noop", "fp16", "bf16", "powersgd"])
def test_c6_a_hook_that_does_not_send_the_gradients_has_no_bandwidth(comm: str) -> None:
    common: dict[str, Any] = {"nnodes": 1, "threads": 1, "backend": "gloo", "train_images": 1400,
                              "price_per_hour": None}  # fmt: skip
    s = summarize(dataclasses.replace(POINT, comm=comm), RANKS, **common)
    assert (s.algbw_gbps, s.busbw_gbps) == (None, None)  # was 0.4 GB/s each
    real = summarize(POINT, RANKS, **common)  # 400,000 bytes in DDP's 1 ms
    assert (real.algbw_gbps, real.busbw_gbps) == pytest.approx((0.4, 0.4))


def test_c6_noop_points_show_no_bandwidth_through_the_command(
    cli: Callable[..., Any], tiny_exp: Callable[..., Path], fake_workers: None
) -> None:
    args = ["scale", str(tiny_exp()), *STUDY, "--comm", "allreduce,noop", "--no-plots"]
    doc = _study(cli, *args)
    two = {row["comm"]: row for row in doc["rows"] if row["workers"] == 2}
    assert two["noop"]["algbw_gbps"] is None and two["noop"]["busbw_gbps"] is None
    assert two["allreduce"]["busbw_gbps"] == pytest.approx(0.4)
    r = cli(*args)
    assert r.code == 0, r.err
    shown = dict(zip(_column(r.out, "comm"), _column(r.out, "busbw"), strict=True))
    assert shown == {"allreduce": "0.4", "noop": "-"}  # the 2-worker points


# --- C5: the TensorFlow line ------------------------------------------------------------


def test_c5_the_tensorflow_line_says_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(
        planning.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorflow" else found(name, *a),
    )
    study = ScaleConfig.model_validate(
        {"framework": "tensorflow", "mode": "weak", "per_worker_batch": 8, "steps": 5}
    )
    with pytest.raises(UserError) as e:
        planning.plan(study, "gloo", "smallcnn")
    assert str(e.value) == (
        "--framework tensorflow needs TensorFlow, which is not installed "
        "(pip install -e '.[tensorflow]')"
    )
