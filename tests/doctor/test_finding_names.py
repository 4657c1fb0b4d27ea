"""A finding's name fits what was examined: a plain training run whose epoch throughputs
swing is "unsteady-throughput", not "untrustworthy-scaling" (there was no scaling in it);
a scaling study's point keeps "untrustworthy-scaling"."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest

from dlperf import doctor
from dlperf.config import Experiment
from dlperf.store import RunStore
from tests.conftest import CliResult, rank_result


@pytest.fixture
def swinging_run(
    cli: Callable[..., CliResult], store: RunStore, tiny_exp: Callable[..., Path]
) -> int:
    """A real two-epoch run, stored again with epoch throughputs of 10 and 50 samples/s and
    the figures of an idle machine (the real run's load depends on the tests' neighbours)."""
    result = cli("run", str(tiny_exp(epochs=2)), "--set", "data.limit=64", "--set", "run.threads=1")
    assert result.code == 0, result.err
    (run,) = store.list_runs()
    idle = {"cpu_wait_share": 0.0, "contention": None, "reliable": True, "reliability_note": None}
    spread = {"min": 10.0, "median": 30.0, "max": 50.0}
    free = {"free_cores": float(run.system["usable_cores"])}
    copy = store.create_run(run.name, run.kind, run.config, run.config_hash, run.system | free)
    summary = run.summary | idle | {"throughput_spread": spread}
    summary["cpu_time_s"] = summary["train_time_s"] * summary["threads"]
    store.finish_run(copy, "finished", summary=summary)
    return copy


def test_a_plain_runs_swinging_throughput_is_named_for_a_run(
    cli: Callable[..., CliResult], store: RunStore, swinging_run: int
) -> None:
    result = cli("doctor", str(swinging_run), "--json")
    findings = json.loads(result.out)["findings"]
    (finding,) = [f for f in findings if "epoch throughputs" in f["evidence"]]
    assert finding["rule"] == "unsteady-throughput", findings
    assert finding["evidence"].startswith("epoch throughputs range from 10.0 to 50.0 samples/s")
    assert "untrustworthy-scaling" not in {f["rule"] for f in findings}


def _superlinear_study(store: RunStore) -> int:
    """A weak-scaling study stored as `dlperf scale` stores one, its 2-worker point faster
    per step than the 1-worker base (efficiency 0.1 / 0.07 > 1.05); that point's id."""
    from dlperf.distributed.planning import Point
    from dlperf.distributed.study import rank_metrics
    from dlperf.distributed.summary import add_relative, summarize
    from dlperf.system import system_info

    exp = Experiment.model_validate({"model": {"name": "smallcnn"}, "data": {"name": "digits"}})
    study = store.create_study("scale smallcnn", "scale")
    base, run = None, 0
    for workers, step in ((1, 0.100), (2, 0.070)):
        point = Point(workers, 32, 32 * workers, "allreduce", "ddp", None, "weak")
        steps = [step * f for f in (0.98, 1.0, 1.02, 1.0) * 5]
        ranks = [rank_result(r, steps, None, 32, world=workers) for r in range(workers)]
        system = {**system_info(None, 1), "usable_cores": 2, "backend": "gloo"}
        config = {"experiment": exp.to_dict(), "point": asdict(point)}
        run = store.create_run(f"smallcnn {point.label()}", "scale", config, None, system, study)
        summary = add_relative(summarize(point, ranks, 1, 1, "gloo", 1437, None), base)
        base = base or summary
        store.log_metrics(run, rank_metrics(ranks))
        store.finish_run(run, "finished", summary=summary.to_dict())
    return run


def test_a_scaling_point_keeps_its_name(store: RunStore) -> None:
    rules = {f.rule for f in doctor.examine(store, [_superlinear_study(store)])}
    assert rules == {"untrustworthy-scaling"}
