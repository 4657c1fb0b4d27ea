"""`dlperf doctor`: each rule on a run that shows its problem, and silence on healthy runs.

Training runs are real (`run_experiment` on the bundled digits: healthy, diverged, at chance,
a learning rate that makes the loss rise, and a transfer from weights trained at twice the
resolution). What cannot be produced on this 2-core CPU host (a GPU sitting idle, DDP points
that scale badly or where a worker never joined, a data-bound step, a shared host) is stored
through the RunStore API in the shapes the engine writes: the system record of
`dlperf.system.system_info`, a scale point's summary from `dlperf.distributed.summary.summarize`
and `add_relative` over per-rank results, and a real run's summary with figures changed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dlperf import doctor
from dlperf.config import Experiment
from dlperf.contention import Contention
from dlperf.doctor import rules
from dlperf.experiment.run import run_experiment
from dlperf.store import RunStore
from tests.conftest import rank_result

RULE_NAMES = {
    "unfinished",
    "cpu-not-gpu",
    "missing-workers",
    "oversubscribed",
    "shared-host",
    "unreliable-measurement",
    "stopped",
    "crowded-threads",
    "chance-accuracy",
    "input-below-weights-resolution",
    "data-bound",
    "trace-non-compute",
    "low-efficiency",
    "untrustworthy-scaling",
    "unsteady-throughput",
    "diverged",
    "lr-too-high",
}


def _exp(**sections: dict[str, Any]) -> Experiment:
    config: dict[str, Any] = {
        "model": {"name": "smallcnn"},
        "data": {"name": "digits"},
        "train": {"epochs": 2, "batch_size": 32, "lr": 0.05},
        "run": {"threads": 1, "warmup_steps": 2, "checkpoint": False},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    return Experiment.model_validate(config)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunStore, str, dict[str, int]]:
    """A store with real training runs, by name."""
    root = tmp_path_factory.mktemp("lab")
    url = f"sqlite:///{root / 'dlperf.db'}"
    store = RunStore.open(url)
    out = {"out_dir": str(root / "runs")}

    def run(**sections: dict[str, Any]) -> int:
        sections["run"] = {**out, **sections.get("run", {})}
        return int(run_experiment(_exp(**sections), store)["run_id"])

    source = run(
        model={"name": "resnet20"},
        data={"image_size": 16, "limit": 300},
        train={"epochs": 1},
        run={"checkpoint": True},
    )
    runs = {
        "healthy": run(run={"timing": "phases"}),
        "diverged": run(train={"lr": 1e4}),
        "chance": run(train={"lr": 1e-7}),
        "random-labels": run(data={"name": "synthetic", "shape": [1, 8, 8], "size": 512}),
        # lr warms up to 2.0 over three epochs: the loss falls, then climbs back up.
        "lr-high": run(
            train={
                "epochs": 4,
                "lr": 2.0,
                "grad_clip": 1.0,
                "schedule": {"kind": "constant", "warmup_epochs": 3},
            }
        ),
        # Weights trained on 16x16 images, fed 8x8 ones normalised with other statistics.
        "small-input": run(
            model={"name": "resnet20", "weights": f"run:{source}", "transfer": "finetune"},
            data={"image_size": 8, "limit": 300, "mean": [0.9], "std": [0.1]},
            train={"epochs": 1},
        ),
    }
    return store, url, runs


def _rules(findings: list[doctor.Finding]) -> dict[str, list[doctor.Finding]]:
    found: dict[str, list[doctor.Finding]] = {}
    for f in findings:
        found.setdefault(f.rule, []).append(f)
    return found


def _like(store: RunStore, run_id: int, system: dict[str, Any] = {}, **summary: Any) -> int:  # noqa: B006
    """A copy of stored run `run_id` with its system record and summary figures changed, and
    the load figures an idle machine gives (the real run's depend on the tests' neighbours)."""
    run = store.get_run(run_id)
    s = run.summary
    idle = {
        "throughput_spread": {k: s["throughput"] for k in ("min", "median", "max")},
        "cpu_time_s": s["train_time_s"] * s["threads"],
        "cpu_wait_share": 0.0,
        "contention": None,
        "reliable": True,
        "reliability_note": None,
        # a busy host's run can wait 20% of its step on data (data-bound), an idle one not
        "phases": {**s["phases"], "data": 0.0} if s.get("phases") else None,
    }
    free = {"free_cores": float(run.system["usable_cores"])}
    copy = store.create_run(
        run.name, run.kind, run.config, run.config_hash, {**run.system, **free, **system}
    )
    store.finish_run(copy, "finished", summary={**s, **idle, **summary})
    return copy


# --- the rule table ------------------------------------------------------------------


def test_rules_have_stable_names_and_severities() -> None:
    assert set(doctor.RULES) == RULE_NAMES
    assert doctor.SEVERITIES == ("info", "warning", "error")


# What the machine's load alone may show on a healthy run: the tests share their cores.
LOAD_RULES = {"shared-host", "crowded-threads", "unsteady-throughput"}


def _load_findings_are_earned(store: RunStore, run_id: int, findings: list[doctor.Finding]) -> None:
    """The load-dependent findings on a healthy run fire exactly when its stored figures say
    the machine was busy."""
    run = store.get_run(run_id)
    s = run.summary
    spread = s["throughput_spread"]
    expected = {"unsteady-throughput"} if spread["max"] / spread["min"] > 2 else set()
    expected |= {"shared-host"} if Contention.stored(s["contention"]).contended else set()
    # Descheduled while it fetched a batch, a busy host's run can wait 21% of its step on data
    # (seen at a load of 10 on 2 cores): the rule then reads its stored phases rightly.
    phases = {k: v for k, v in s["phases"].items() if v}
    data_share = phases.get("data", 0.0) / sum(phases.values())
    expected |= {"data-bound"} if data_share > rules.DATA_SHARE else set()
    fit = max(1, round(run.system["free_cores"]))
    expected |= {"crowded-threads"} if fit < s["threads"] else set()
    assert {f.rule for f in findings} == expected, findings


def test_a_healthy_run_has_no_findings(lab: tuple[RunStore, str, dict[str, int]]) -> None:
    store, _, runs = lab
    summary = store.get_run(runs["healthy"]).summary
    assert summary["phases"] and summary["test_accuracy"] > 0.5  # every rule had data to read
    assert summary["cpu_time_s"] > 0
    _load_findings_are_earned(store, runs["healthy"], doctor.examine(store, [runs["healthy"]]))


# --- training runs -------------------------------------------------------------------


def test_diverged_run(lab: tuple[RunStore, str, dict[str, int]]) -> None:
    store, _, runs = lab
    findings = doctor.examine(store, [runs["diverged"]])
    assert [(f.rule, f.severity) for f in findings] == [("diverged", "error")]
    assert "loss became nan" in findings[0].evidence
    assert "train.lr (now 10000)" in findings[0].fix
    assert findings[0].evidence == "the run failed: loss became nan at step 3 (epoch 1)"


def test_nan_in_stored_losses_is_divergence(store: RunStore) -> None:
    run = store.create_run("killed", "run", {"train": {"lr": 0.5}})
    store.log_metrics(run, [("train/loss", 1, 2.3), ("train/loss", 2, float("nan"))])
    store.finish_run(run, "killed", error="interrupted")
    (finding,) = doctor.examine(store, [run])
    assert (finding.rule, finding.severity) == ("diverged", "error")
    assert finding.evidence == "train/loss is nan at step 2 (1 non-finite value(s))"


@pytest.mark.parametrize("name", ["chance", "random-labels"])
def test_chance_accuracy(lab: tuple[RunStore, str, dict[str, int]], name: str) -> None:
    store, _, runs = lab
    findings = _rules(doctor.examine(store, [runs[name]]))
    (finding,) = findings["chance-accuracy"]
    accuracy = store.get_run(runs[name]).summary["test_accuracy"]
    assert finding.severity == "error"
    assert finding.figures == {"accuracy": accuracy, "chance": 0.1, "classes": 10}
    assert f"test accuracy {accuracy:.3f} is within 0.050 of chance, 1/10 = 0.100" in (
        finding.evidence
    )


def test_lr_too_high(lab: tuple[RunStore, str, dict[str, int]]) -> None:
    store, _, runs = lab
    losses = [v for _, v in store.metrics(runs["lr-high"], "epoch/train_loss")]
    assert losses[-1] > 1.1 * losses[0]  # the run really did what the rule looks for
    (finding,) = _rules(doctor.examine(store, [runs["lr-high"]]))["lr-too-high"]
    assert finding.severity == "warning"
    assert finding.evidence.startswith(f"epoch/train_loss rose from {losses[0]:.4f} (epoch 1)")
    assert "lower train.lr (e.g. 0.2)" in finding.fix


def test_input_below_weights_resolution(lab: tuple[RunStore, str, dict[str, int]]) -> None:
    store, _, runs = lab
    size, stats = _rules(doctor.examine(store, [runs["small-input"]]))[
        "input-below-weights-resolution"
    ]
    assert size.evidence.startswith("images 8x8 went into weights run 1 trained at 16x16")
    assert size.fix.startswith("set data.image_size = 16")
    assert stats.evidence.startswith("the images were normalised with mean (0.900) instead of")
    assert size.figures == {"image_size": 8, "weights_image_size": 16}


def test_data_bound(lab: tuple[RunStore, str, dict[str, int]]) -> None:
    store, _, runs = lab
    phases = {"data": 0.004, "h2d": 0.0001, "forward": 0.003, "backward": 0.005, "optimizer": 0.001}
    run = _like(store, runs["healthy"], phases=phases)
    (finding,) = doctor.examine(store, [run])
    assert (finding.rule, finding.severity) == ("data-bound", "warning")
    assert finding.evidence.startswith("data wait 4.0 ms of a 13.1 ms step (31% > 20%")
    assert finding.figures["share"] == pytest.approx(0.004 / 0.0131)


def _traced(store: RunStore, run_id: int, path: Path, top: str) -> int:
    """A copy of run `run_id` with a trace whose one 100 µs step spends 60 µs in `top`."""
    copy = _like(store, run_id)
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "dlperf::h2d", "ts": 0, "dur": 70},
        {"ph": "X", "cat": "cpu_op", "name": top, "ts": 5, "dur": 60},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 70, "dur": 20},
    ]
    for e in events:
        e.update(pid=1, tid=1)
    path.write_text(json.dumps({"traceEvents": events}))
    store.add_artifact(copy, "trace", path)
    return copy


def test_trace_non_compute(lab: tuple[RunStore, str, dict[str, int]], tmp_path: Path) -> None:
    store, _, runs = lab
    copying = _traced(store, runs["healthy"], tmp_path / "a.pt.trace.json", "aten::copy_")
    (finding,) = doctor.examine(store, [copying])
    assert (finding.rule, finding.severity) == ("trace-non-compute", "warning")
    assert finding.evidence.startswith(
        "aten::copy_ (copy) takes 60% of each profiled step (0.06 of 0.10 ms, mostly in h2d"
    )
    assert finding.figures == {"operator": "aten::copy_", "kind": "copy", "share": 0.6,
                               "phase": "h2d"}  # fmt: skip
    computing = _traced(store, runs["healthy"], tmp_path / "b.pt.trace.json", "aten::conv2d")
    assert doctor.examine(store, [computing]) == []


def test_shared_host(lab: tuple[RunStore, str, dict[str, int]]) -> None:
    store, _, runs = lab
    wall = store.get_run(runs["healthy"]).summary["train_time_s"]
    # measured: the threads' run delay over the timed steps (issue 39)
    waited = _like(store, runs["healthy"], cpu_wait_share=0.4, cpu_time_s=0.95 * wall)
    (finding,) = doctor.examine(store, [waited])
    assert (finding.rule, finding.severity) == ("shared-host", "warning")
    assert finding.evidence.startswith("its threads waited for a CPU 40% of their runnable")
    # spinning threads burn CPU while they wait: CPU time alone would have said nothing
    assert doctor.examine(store, [_like(store, runs["healthy"], cpu_wait_share=0.02)]) == []
    # runs stored before the wait was measured: CPU time against wall time
    busy = _like(store, runs["healthy"], cpu_wait_share=None, cpu_time_s=0.95 * wall)
    shared = _like(store, runs["healthy"], cpu_wait_share=None, cpu_time_s=0.3 * wall)
    assert doctor.examine(store, [busy]) == []
    (finding,) = doctor.examine(store, [shared])
    assert (finding.rule, finding.severity) == ("shared-host", "warning")
    assert "they were busy 30% of the time" in finding.evidence


def test_more_threads_than_free_cores(
    lab: tuple[RunStore, str, dict[str, int]], store: RunStore
) -> None:
    """run.threads 2 with one core free as it started: the finding, and how much faster the
    same config trained on one thread where the store holds such a run."""
    lab_store, _, runs = lab
    run = lab_store.get_run(runs["healthy"])

    def stored(threads: int, throughput: float, free: float) -> int:
        config = {**run.config, "run": {**run.config["run"], "threads": threads}}
        made = store.create_run(run.name, "run", config, "x", {**run.system, "free_cores": free})
        summary = {**run.summary, "threads": threads, "throughput": throughput, "reliable": True}
        store.finish_run(made, "finished", summary=summary)
        return made

    slow = stored(2, 100.0, 0.9)
    (finding,) = [f for f in doctor.examine(store, [slow]) if f.rule == "crowded-threads"]
    cores = run.system["usable_cores"]
    said = f"run.threads 2, but only 0.9 of {cores} usable cores were free as it started"
    assert finding.evidence == said
    assert finding.fix.startswith('set run.threads = 1 (or "auto"')
    one = stored(1, 250.0, 2.0)
    (finding,) = [f for f in doctor.examine(store, [slow]) if f.rule == "crowded-threads"]
    assert finding.evidence.endswith(
        f"; run {one}, the same config with run.threads 1, trained 2.50x as fast (250 against "
        "100 samples/s)"
    )
    assert finding.figures["compared_run"] == one
    assert [f.rule for f in doctor.examine(store, [one]) if f.rule == "crowded-threads"] == []


# --- the device and the host ---------------------------------------------------------


def test_cpu_while_a_gpu_was_visible(lab: tuple[RunStore, str, dict[str, int]]) -> None:
    store, _, runs = lab
    run = _like(store, runs["healthy"], {"gpus": ["NVIDIA A100-SXM4-40GB"]})
    (finding,) = doctor.examine(store, [run])
    assert (finding.rule, finding.severity) == ("cpu-not-gpu", "warning")
    assert finding.evidence == (
        "trained on cpu while 1 GPU(s) were visible to torch: NVIDIA A100-SXM4-40GB"
    )
    hidden = _like(store, runs["healthy"], {"visible_gpus": ["NVIDIA L4"], "cuda": None})
    (finding,) = doctor.examine(store, [hidden])
    assert "torch saw no CUDA device" in finding.evidence and "CUDA build" in finding.fix


def test_oversubscribed_run_and_runs_at_once(lab: tuple[RunStore, str, dict[str, int]]) -> None:
    store, _, runs = lab
    over = _like(store, runs["healthy"], {"usable_cores": 2}, threads=4)
    (finding,) = doctor.examine(store, [over])
    assert (finding.rule, finding.evidence) == ("oversubscribed", "run.threads 4 on 2 usable cores")
    # Two 2-thread runs on one 2-core host, their times overlapping by a minute.
    a, b = (_like(store, runs["healthy"], {"usable_cores": 2}, threads=2) for _ in range(2))
    start = datetime(2025, 1, 1, 12, 0, 0)
    store.update_run(a, started=start, ended=start + timedelta(minutes=2))
    store.update_run(b, started=start + timedelta(minutes=1), ended=start + timedelta(minutes=3))
    (finding,) = doctor.examine(store, [a])
    assert finding.rule == "oversubscribed"
    assert finding.evidence.endswith(": 4 threads at once on 2 usable cores")
    assert finding.figures["concurrent_runs"] == [b]
    store.update_run(b, started=start + timedelta(minutes=2), ended=start + timedelta(minutes=4))
    assert doctor.examine(store, [a, b]) == []  # one after the other


# --- scaling studies -----------------------------------------------------------------


def _study(
    store: RunStore,
    points: list[tuple[int, float, float | None]],
    ranks: int | None = None,
    batch: int = 32,
    study: int | None = None,
) -> list[int]:
    """A weak-scaling series, `batch` per worker, stored as `dlperf scale` stores one: per
    point (workers, median step s, compute s), 20 steps each, on a 2-core host; in a new
    study, or in `study`."""
    from dlperf.distributed.planning import Point
    from dlperf.distributed.study import rank_metrics
    from dlperf.distributed.summary import add_relative, summarize
    from dlperf.system import system_info

    exp = _exp()
    study = study or store.create_study("scale smallcnn", "scale")
    base, ids = None, []
    for workers, step, compute in points:
        point = Point(workers, batch, batch * workers, "allreduce", "ddp", None, "weak")
        threads = max(1, 2 // workers)
        steps = [step * f for f in (0.98, 1.0, 1.02, 1.0) * 5]
        world = workers if ranks is None else ranks
        per_rank = [
            rank_result(r, steps, [compute] * 20 if compute else None, batch, world=world)
            for r in range(world)
        ]
        system = {**system_info(None, threads), "usable_cores": 2, "backend": "gloo"}
        config = {"experiment": exp.to_dict(), "point": asdict(point)}
        run = store.create_run(f"smallcnn {point.label()}", "scale", config, None, system, study)
        summary = add_relative(summarize(point, per_rank, 1, threads, "gloo", 1437, None), base)
        base = base or summary
        store.log_metrics(run, rank_metrics(per_rank))
        store.finish_run(run, "finished", summary=summary.to_dict())
        ids.append(run)
    return ids


def test_a_healthy_scaling_study_has_no_findings(store: RunStore) -> None:
    ids = _study(store, [(1, 0.100, None), (2, 0.110, 0.100)])
    assert store.get_run(ids[1]).summary["efficiency"] == pytest.approx(0.1 / 0.11)
    assert doctor.examine(store, ids) == []


def test_low_efficiency_blames_communication(store: RunStore) -> None:
    _, two = _study(store, [(1, 0.100, None), (2, 0.250, 0.100)])
    (finding,) = doctor.examine(store, [two])
    assert (finding.rule, finding.severity, finding.figures["cause"]) == (
        "low-efficiency",
        "warning",
        "communication",
    )
    assert finding.evidence.startswith("efficiency 0.40 at 2 workers against 1")
    assert "step 250.0 ms = compute 100.0 ms + exposed communication 150.0 ms" in finding.evidence


def test_low_efficiency_blames_compute(store: RunStore) -> None:
    _, two = _study(store, [(1, 0.100, None), (2, 0.250, 0.230)])
    (finding,) = doctor.examine(store, [two])
    assert finding.figures["cause"] == "compute"
    assert "threads per worker 2 -> 1" in finding.fix


def test_superlinear_and_noisy_scaling_is_untrustworthy(store: RunStore) -> None:
    _, two = _study(store, [(1, 0.100, None), (2, 0.070, 0.065)])
    (finding,) = doctor.examine(store, [two])
    assert (finding.rule, finding.figures) == (
        "untrustworthy-scaling",
        {"efficiency": pytest.approx(0.1 / 0.07)},
    )
    noisy = _study(store, [(1, 0.100, None)])[0]
    store.log_metrics(noisy, [("rank0/step_time_s", i, 0.3) for i in range(1, 21, 2)])
    (finding,) = doctor.examine(store, [noisy])
    assert finding.rule == "untrustworthy-scaling"
    assert "step times of the slowest rank vary by" in finding.evidence


def test_a_point_is_measured_against_its_own_series(store: RunStore) -> None:
    """Two per-worker batches in one study: the 2-worker point at 128 against the 1-worker
    point at 128, not the one at 32 stored first (as `dlperf scale` compares them)."""
    small = _study(store, [(1, 0.100, None), (2, 0.110, 0.100)])
    study = store.get_run(small[0]).study_id
    one, two = _study(store, [(1, 0.400, None), (2, 1.000, 0.400)], batch=128, study=study)
    assert doctor.examine(store, small) == []
    (finding,) = doctor.examine(store, [two])
    assert finding.rule == "low-efficiency"
    assert finding.evidence.startswith(f"efficiency 0.40 at 2 workers against 1 (run {one};")
    assert "against an ideal 400.0 ms" in finding.evidence


def test_missing_workers(store: RunStore) -> None:
    """The process group's world size, as the ranks report it and the study stores it; in
    a summary stored before it was, the ranks that reported."""
    _, short = _study(store, [(1, 0.100, None), (2, 0.110, 0.100)], ranks=1)
    summary = store.get_run(short).summary
    assert summary["world_size"] == 1
    findings = _rules(doctor.examine(store, [short]))
    (finding,) = findings["missing-workers"]
    assert finding.severity == "error"
    assert finding.evidence == (
        "2 workers asked (2 processes), 1 joined (the process group's world size)"
    )
    run = store.get_run(short)
    older = store.create_run("older", "scale", run.config, None, run.system)
    store.finish_run(older, "finished", summary={**summary, "world_size": None})
    (finding,) = _rules(doctor.examine(store, [older]))["missing-workers"]
    assert finding.evidence.endswith("1 joined (ranks that reported results)")
    failed = store.create_run("p", "scale", {"experiment": {}, "point": {"workers": 4}})
    error = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: timed out\nmore"
    store.finish_run(failed, "failed", error=error)
    (finding,) = doctor.examine(store, [failed])
    assert finding.evidence == f"4 workers asked; the point failed: {error.splitlines()[0]}"


def test_oversubscribed_scale_point(store: RunStore) -> None:
    from dlperf.distributed.planning import Point
    from dlperf.distributed.summary import summarize

    point = Point(2, 32, 64, "allreduce", "ddp", None)
    config = {"experiment": _exp().to_dict(), "point": asdict(point)}
    system = {"usable_cores": 2, "threads": 2, "backend": "gloo", "host": "h"}
    run = store.create_run("p", "scale", config, None, system)
    ranks = [rank_result(r, [0.1] * 20, [0.08] * 20, 32, world=2) for r in range(2)]
    store.finish_run(run, summary=summarize(point, ranks, 1, 2, "gloo", 1437, None).to_dict())
    (finding,) = doctor.examine(store, [run])
    assert (finding.rule, finding.evidence) == (
        "oversubscribed",
        "2 workers per node x 2 threads = 4 threads on 2 usable cores",
    )


# --- selection and the command line --------------------------------------------------


def test_select_runs_studies_and_the_newest(store: RunStore) -> None:
    ids = [store.create_run(f"r{i}", "run", {}) for i in range(3)]
    study = store.create_study("s", "sweep")
    inside = store.create_run("in", "run", {}, study_id=study)
    assert doctor.select(store) == [inside]
    assert doctor.select(store, last=2) == [ids[2], inside]
    assert doctor.select(store, [ids[0]], [study]) == [ids[0], inside]


def test_cli_healthy_exits_0(cli: Callable, lab: tuple[RunStore, str, dict[str, int]]) -> None:
    store, url, runs = lab
    healthy = _like(store, runs["healthy"])
    assert doctor.examine(store, [healthy]) == []
    result = cli("--db", url, "doctor", str(healthy))
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        f"run {healthy} smallcnn (run, finished): no findings",
        "1 run(s) examined: 0 errors, 0 warnings, 0 info",
    ]


def test_cli_error_finding_exits_1(
    cli: Callable, lab: tuple[RunStore, str, dict[str, int]]
) -> None:
    store, url, runs = lab
    # Idle copies: the real runs' load figures depend on the tests' neighbours.
    chance, healthy = _like(store, runs["chance"]), _like(store, runs["healthy"])
    result = cli("--db", url, "doctor", str(chance), str(healthy), "--json")
    assert result.code == 1
    assert result.err == "check failed: 1 finding(s) of severity error\n"
    doc = json.loads(result.out)
    assert doc["runs"] == sorted([chance, healthy])
    (finding,) = doc["findings"]
    assert set(finding) == {"run_id", "rule", "severity", "evidence", "fix", "figures"}
    assert (finding["run_id"], finding["rule"]) == (chance, "chance-accuracy")
    human = cli("--db", url, "doctor", str(chance))
    assert human.code == 1
    assert human.out.splitlines()[1].startswith("  error    chance-accuracy: test accuracy")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["doctor", "99"], "error: no run 99 in the store (see `dlperf runs list`)\n"),
        (["doctor", "--study", "7"], "error: no study 7 in the store\n"),
        (["doctor", "--last", "0"], "error: --last must be at least 1, got 0\n"),
        (["doctor"], "error: the run store holds no runs (train one: dlperf run EXP.toml)\n"),
    ],
)
@pytest.mark.usefixtures("store")  # there, and without the run: a store not there says so
def test_cli_bad_input_exits_2(cli: Callable, args: list[str], message: str) -> None:
    result = cli(*args)
    assert (result.code, result.err) == (2, message)


def test_help_ends_with_an_example(cli: Callable) -> None:
    result = cli("doctor", "--help")
    assert result.code == 0
    assert "Example: dlperf doctor --last 5" in result.out


def test_doctor_imports_no_tensor_library(store: RunStore, db: str) -> None:
    run = store.create_run("r", "run", {"data": {"name": "digits"}}, None, {"gpus": []})
    store.finish_run(run, summary={"test_accuracy": 0.9, "phases": {"data": 0.1, "forward": 0.1}})
    probe = (
        "import sys\nfrom dlperf.cli import main\n"
        f"sys.argv = ['dlperf', '--db', {db!r}, 'doctor', '--last', '3']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = {'torch', 'torchvision', 'numpy', 'scipy', 'matplotlib'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.stdout.splitlines()[-1] == "[]", result.stdout + result.stderr
    assert "data-bound" in result.stdout
