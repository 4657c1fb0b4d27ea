"""The doctor's rules: one handler per rule in `RULES` (name -> handler), each reading one
stored run through a `RunView` and returning its issues (fvcore's table of handlers).

Thresholds are constants here (untrustworthy-scaling's in dlperf.distributed.scaling, which
`dlperf scale` warns with too), each documented in docs/doctor.md. Fields a rule reads that
the engine does not always record (the rule is silent or falls back without them):
summary["world_size"] (missing-workers; until then the ranks that reported) and
system["visible_gpus"] (cpu-not-gpu under a CPU-only torch build; recorded through NVML
with the `gpu` extra). Runs stored before
summary["data"]["classes"] and summary["transfer"]["expects"] were recorded fall back to the
data set table and the stored transfer warnings.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import stat
import statistics
from datetime import datetime
from typing import Any

from dlperf import traces
from dlperf.contention import CONTENDED, Contention
from dlperf.distributed.scaling import untrustworthy
from dlperf.doctor.view import Figures, Handler, Issue, RunView
from dlperf.engine.divergence import LOOP_FIX, blown_up, diverged_fix, evaluation_fix
from dlperf.errors import UserError
from dlperf.shipped import dataset_table
from dlperf.store.query import tracked
from dlperf.store.record import RunRecord
from dlperf.store.runstore import went_on_in

SEVERITIES = ("info", "warning", "error")

CHANCE_MARGIN = 0.05  # absolute, and at most half of chance itself (1/K)
CHANCE_P = 0.01  # a binomial test's level, on the test images, for above or below chance
RESOLUTION_RATIO = 0.5  # images at most this fraction of the weights' side
MEAN_TOLERANCE = 0.05  # per channel, in [0, 1] pixel units
STD_RATIO = 1.5  # std off by more than this factor either way
DATA_SHARE = 0.20  # data wait over the whole step
LOW_EFFICIENCY = 0.50
EPOCH_SPREAD = 2.0  # max / min of the per-epoch throughputs
LOSS_RISE = 1.10  # last loss / first loss
LOSS_RISE_ABS = 0.02
CPU_BUSY = 0.50  # CPU time / (wall time x threads)
NON_COMPUTE_SHARE = 0.25  # one copy, conversion or synchronisation's self time / the step
# Operators that compute nothing, by what they do instead (matched as name prefixes).
NON_COMPUTE = {
    "copy": ("aten::copy_", "aten::_to_copy", "aten::to", "aten::clone", "Memcpy", "Memset"),
    "format conversion": ("aten::contiguous", "aten::_reshape_alias", "aten::permute"),
    "synchronisation": (
        "aten::item", "aten::_local_scalar_dense", "aten::nonzero", "cudaStreamSynchronize",
        "cudaDeviceSynchronize", "cudaEventSynchronize", "c10d::wait", "aten::wait",
    ),
}  # fmt: skip
NON_COMPUTE_FIX = {
    "copy": "move data to the device once (data in memory, pinned) and keep the step free of "
    ".to()/.cpu() copies",
    "format conversion": "keep inputs and weights in one memory format (run.channels_last for "
    "both) so no layer converts",
    "synchronisation": "keep host reads (.item(), printing, nonzero) out of the step; raise "
    "run.log_every so losses are read in batches",
}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _past(value: float, threshold: float, digits: int) -> str:
    """`value` to `digits` decimals, or to as many more (up to 4) as it takes not to read as
    `threshold` does at as many: evidence quotes a figure beside the threshold it crossed, and
    a spread of 2.04 shown as "x2.0 > x2" read as if it had not."""
    for d in range(digits, 5):
        shown = f"{value:.{d}f}"
        if shown != f"{threshold:.{d}f}":
            return shown
    return repr(value)


def _share(value: float, threshold: float) -> str:
    """A share as a percentage, read apart from its threshold's (`_past`): 20.3%, not 20%."""
    return f"{_past(100 * value, 100 * threshold, 0)}%"


def _nonfinite(values: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return [(s, v) for s, v in values if not math.isfinite(v)]


# --- the device and the host ---------------------------------------------------------


def cpu_not_gpu(run: RunView) -> list[Issue]:
    device = run.device()
    if device is None or not device.startswith("cpu"):
        return []
    gpus, visible = run.system.get("gpus") or [], run.system.get("visible_gpus") or []
    if gpus:
        if tracked(run.run):
            # dlperf.track records the device it was given (the CPU unless told), not the one
            # the user's loop put its model on: that it trained on the CPU is not known.
            return []
        if run.run.kind == "scale":
            fix = 'set scale.backend = "auto" (nccl, one GPU per worker)'
        else:
            fix = f'set run.device = "auto" or "cuda" (now "{run.key("run.device") or "auto"}")'
        return [
            Issue(
                "warning",
                f"trained on {device} while {len(gpus)} GPU(s) were visible to torch: "
                + ", ".join(gpus),
                fix,
                {"device": device, "gpus": gpus},
            )
        ]
    if visible:
        return [
            Issue(
                "warning",
                f"trained on {device}: torch saw no CUDA device (torch {run.system.get('torch')}, "
                f"cuda {run.system.get('cuda')}) but the host shows {len(visible)} GPU(s): "
                + ", ".join(visible),
                "install a CUDA build of torch that matches the driver, then run again",
                {"device": device, "visible_gpus": visible, "cuda": run.system.get("cuda")},
            )
        ]
    return []


def _interval(run: RunRecord) -> tuple[datetime, datetime] | None:
    if not run.ended:
        return None
    return datetime.fromisoformat(run.started), datetime.fromisoformat(run.ended)


def _threads_used(run: RunView) -> int:
    return (run.threads() or 1) * run.workers_per_node()


def _one_at_a_time(run: RunRecord, other: RunRecord) -> bool:
    """Whether `run` and `other` are points of one scale study, which measures its points one
    at a time (round by round, interleaved) yet stores each point's run from its first round
    to its last: their stored times overlap though they never ran at once."""
    study = run.study_id
    return study is not None and other.study_id == study and run.kind == other.kind == "scale"


def _concurrent(run: RunView) -> tuple[int, list[int]]:
    """The most threads that this run and others on its host had running at one moment
    within this run's time, and the IDs of the runs that overlapped it (the other points of
    its own scale study left out: `_one_at_a_time`)."""
    mine = _interval(run.run)
    host = run.system.get("host")
    if mine is None or host is None:
        return _threads_used(run), []
    events, others = [], []
    for other in run.stored.everything():
        span = _interval(other)
        if other.id == run.run.id or span is None or (other.system or {}).get("host") != host:
            continue
        if _one_at_a_time(run.run, other):
            continue
        if span[0] < mine[1] and span[1] > mine[0]:
            view = RunView(run.stored, other)
            others.append(other.id)
            events += [(max(span[0], mine[0]), 1, view), (min(span[1], mine[1]), 0, view)]
    peak = busy = _threads_used(run)
    for _, starts, view in sorted(events, key=lambda e: (e[0], e[1])):
        busy += _threads_used(view) if starts else -_threads_used(view)
        peak = max(peak, busy)
    return peak, sorted(others)


def oversubscribed(run: RunView) -> list[Issue]:
    cores = run.system.get("usable_cores")
    if not cores:
        return []
    issues = []
    threads = run.threads()
    per_node = run.workers_per_node()
    if threads and per_node * threads > cores:
        if run.run.kind == "scale":
            evidence = (
                f"{per_node} workers per node x {threads} threads = {per_node * threads} "
                f"threads on {cores} usable cores"
            )
            fix = (
                f"at most {cores} workers per node, or more nodes; until then these timings "
                "are pessimistic"
            )
        elif tracked(run.run):  # the user's own loop: torch's threads, not run.threads
            evidence = (
                f"{threads} intra-op threads (torch.get_num_threads()) on {cores} usable cores"
            )
            fix = f"call torch.set_num_threads({cores}) (at most the usable cores) before your loop"
        else:
            evidence = f"run.threads {threads} on {cores} usable cores"
            fix = f"set run.threads to at most {cores}, or leave it unset (every usable core)"
        figures = {"workers_per_node": per_node, "threads": threads, "usable_cores": cores}
        issues.append(Issue("warning", evidence, fix, figures))
    peak, others = _concurrent(run)
    if others and peak > cores:
        host = run.system.get("host")
        fix = (
            "run fewer at once, or have each call torch.set_num_threads(usable cores / runs at "
            "once)"
            if tracked(run.run)
            else "run fewer at once (`dlperf sweep --jobs N` splits the cores between its jobs) "
            "or give each run.threads = cores / runs at once"
        )
        issues.append(
            Issue(
                "warning",
                f"run(s) {', '.join(map(str, others))} ran at the same time on host {host}: "
                f"{peak} threads at once on {cores} usable cores",
                fix,
                {"peak_threads": peak, "usable_cores": cores, "concurrent_runs": others},
            )
        )
    return issues


def shared_host(run: RunView) -> list[Issue]:
    """Other work took the run's CPUs: measured (its threads' run delay over the timed
    steps, dlperf.contention), else, for runs stored before it was, inferred from CPU time
    against wall time (which cannot see threads that spin while they wait)."""
    s = run.run.trained
    wait = s.cpu_wait_share
    if wait is not None:
        window = Contention.stored(s.contention) if s.contention else None
        contended = window.contended if window else wait >= CONTENDED
        if not contended or run.run.kind == "scale":  # untrustworthy-scaling says it there
            return []
        measured = (s.contention or {}).get("source") == "schedstat"
        how = "per-thread run delay" if measured else "load average against usable cores"
        return [
            Issue(
                "warning",
                f"its threads waited for a CPU {wait:.0%} of their runnable time over the "
                f"timed steps ({how}; >= {CONTENDED:.0%}){_others(window)}: its timings "
                "describe the neighbours as much as the work",
                'rerun on an idle host, or set run.threads to the cores that are free ("auto")',
                {"cpu_wait_share": wait, "contention": s.contention},
            )
        ]
    cpu, wall, threads = s.cpu_time_s, s.train_time_s, run.threads()
    device = run.device() or ""
    if cpu is None or not wall or not threads or not device.startswith("cpu"):
        return []
    if run.key("data.loader") == "torchvision" and (run.key("data.num_workers") or 0) > 0:
        return []  # loader processes do part of the work, off this process's CPU time
    usable = min(threads, run.system.get("usable_cores") or threads)
    busy = cpu / (wall * usable)
    if busy >= CPU_BUSY:
        return []
    return [
        Issue(
            "warning",
            f"training took {wall:.1f} s of wall time but {cpu:.1f} s of CPU time over "
            f"{usable} threads: they were busy {_share(busy, CPU_BUSY)} of the time "
            f"(< {CPU_BUSY:.0%})",
            "other processes shared its cores, or the host was throttled: rerun on an idle "
            "host, or set run.threads to the cores that are really free",
            {"train_time_s": wall, "cpu_time_s": cpu, "threads": usable, "busy": busy},
        )
    ]


# How to measure again, per kind of run whose summary carries its own mark (`reliable`,
# `reliability_note`: dlperf.contention.judge) instead of a training run's figures.
REMEASURE = {
    "calibrate": "rerun `dlperf calibrate` on an idle host (it replaces the device's entry)",
    "predict": "rerun `dlperf predict --measure` on an idle host",
}


def unreliable_measurement(run: RunView) -> list[Issue]:
    """A measurement that marked itself unreliable as it ran (a calibration, a `predict
    --measure`: the host contended, or the times too spread). `shared-host` reads a training
    run's figures, which these runs' summaries do not have: without this rule the doctor said
    nothing of a calibration whose threads had waited for a CPU 62% of the time."""
    summary = run.run.summary or {}
    if run.run.kind in ("run", "scale") or summary.get("reliable") is not False:
        return []  # a training run's mark: shared-host and unsteady-throughput say it
    note = summary.get("reliability_note") or "no reason stored"
    fix = REMEASURE.get(run.run.kind, "measure it again on an idle host")
    figures = {k: summary.get(k) for k in ("reliable", "reliability_note", "cpu_wait_share")}
    return [Issue("warning", f"it marked its own figures unreliable: {note}", fix, figures)]


def stopped(run: RunView) -> list[Issue]:
    """The process was stopped (SIGSTOP, Ctrl-Z) and continued while it trained: its wall
    time ran on, so its times count the stop as training (dlperf.contention.Stopwatch)."""
    contention = run.run.trained.contention
    if not contention or not contention.get("stopped_in"):
        return []
    window = Contention.stored(contention)
    return [
        Issue(
            "warning",
            window.stop_note(),
            "rerun it without stopping it, or read the figures of the epochs not named",
            {k: contention.get(k) for k in ("stops", "stopped_s", "stopped_in")},
        )
    ]


def _others(window: Contention | None) -> str:
    share = window.others_share if window else None
    return "" if share is None else f" while other processes took {share:.0%} of the cores"


def crowded_threads(run: RunView) -> list[Issue]:
    """More intra-op threads than the cores other processes left free as the run started:
    OpenMP threads that share a core wait on each other at every parallel region. Says how
    much faster the free cores' worth of threads trained, where the store holds such a run
    of the same config."""
    free, threads = run.system.get("free_cores"), run.threads()
    if free is None or not threads or run.run.kind != "run":
        return []
    fit = max(1, round(free))  # one thread on a full host: fewer cannot help, the wait says it
    if threads <= fit or threads > (run.system.get("usable_cores") or threads):
        return []  # more threads than cores at all: `oversubscribed` says so
    figures: dict[str, Any] = {"threads": threads, "free_cores": free, "suggested": fit}
    evidence = (
        f"run.threads {threads}, but only {free:.1f} of {run.system.get('usable_cores')} "
        "usable cores were free as it started"
    )
    mine, same = run.run.trained.throughput, _without_threads(run.experiment)
    for other in run.stored.everything():
        s = other.trained
        faster = (
            other.kind == "run" and other.status == "finished" and s.threads == fit
            and s.throughput and mine and s.reliable is not False
            and _without_threads(other.config or {}) == same
        )  # fmt: skip
        if faster and s.throughput and mine:
            evidence += (
                f"; run {other.id}, the same config with run.threads {fit}, trained "
                f"{s.throughput / mine:.2f}x as fast ({s.throughput:.0f} against {mine:.0f} "
                "samples/s)"
            )
            figures |= {"compared_run": other.id, "speedup": s.throughput / mine}
            break
    fix = f'set run.threads = {fit} (or "auto", which measures the free cores as a run starts)'
    return [Issue("warning", evidence, fix, figures)]


def _without_threads(config: dict[str, Any]) -> dict[str, Any]:
    """A run's config without what does not change the work: its threads and name."""
    run = {k: v for k, v in (config.get("run") or {}).items() if k not in ("threads", "name")}
    return {**config, "run": run}


# --- scaling -------------------------------------------------------------------------


def missing_workers(run: RunView) -> list[Issue]:
    if run.run.kind != "scale":
        return []
    p = run.point_summary
    asked = run.point.get("workers") or (p.workers if p else None)
    if not asked:
        return []
    processes = asked if run.point.get("strategy", "ddp") == "ddp" else 1
    fix = (
        "check every node reached the rendezvous (scale.rdzv, firewalls, the job's node "
        "count) and that each worker started; rerun the point"
    )
    if run.run.status == "failed" and "rendezvous" in (run.run.error or "").lower():
        first = (run.run.error or "").strip().splitlines()[0]
        return [Issue("error", f"{asked} workers asked; the point failed: {first}", fix)]
    if p is None:
        return []
    joined, what = p.world_size, "the process group's world size"
    if joined is None and run.run.status == "finished":
        joined, what = len(p.ranks), "ranks that reported results"
    issues = []
    if joined is not None and joined < processes:
        issues.append(
            Issue(
                "error",
                f"{asked} workers asked ({processes} processes), {joined} joined ({what})",
                fix,
                {"asked": processes, "joined": joined},
            )
        )
    hosts = sorted({r.host for r in p.ranks if r.host})
    if p.nodes > 1 and hosts and len(hosts) < p.nodes:
        issues.append(
            Issue(
                "warning",
                f"{p.nodes} nodes asked, but the ranks ran on {len(hosts)} host(s): "
                + ", ".join(hosts),
                "give each node its own host in the job file, or read the point as one host's",
                {"nodes": p.nodes, "hosts": hosts},
            )
        )
    return issues


def low_efficiency(run: RunView) -> list[Issue]:
    s, base = run.point_summary, run.scale_base()
    if s is None or s.efficiency is None or base is None or base[0] == run.run.id:
        return []
    base_id, b = base
    efficiency = s.efficiency
    if efficiency >= LOW_EFFICIENCY or s.workers <= b.workers:
        return []
    step, compute, comm = s.step_time_s, s.compute_s, s.comm_exposed_s
    head = (
        f"efficiency {efficiency:.2f} at {s.workers} workers against {b.workers} "
        f"(run {base_id}; speedup {s.speedup or 0:.2f})"
    )
    figures: Figures = {"efficiency": efficiency, "workers": s.workers}
    if compute is None or comm is None:
        return [
            Issue(
                "warning",
                f"{head}; no compute/communication split stored",
                "rerun with scale.comm_split = true to see whether compute or communication "
                "costs the time",
                figures,
            )
        ]
    # The step the base point would take at this point's per-worker batch.
    ideal = b.step_time_s * s.per_worker_batch / b.per_worker_batch
    slower = max(0.0, compute - ideal)
    figures |= {"step_time_s": step, "compute_s": compute, "comm_exposed_s": comm, "ideal_s": ideal}
    split = (
        f"; step {_ms(step)} = compute {_ms(compute)} + exposed communication {_ms(comm)}, "
        f"against an ideal {_ms(ideal)} (the base's step at this per-worker batch)"
    )
    if comm >= slower:
        figures["cause"] = "communication"
        cause = f": communication dominates ({_ms(comm)} exposed per step)"
        fix = (
            "raise the per-worker batch (weak scaling), compress gradients (scale.comm = "
            "fp16, bf16 or powersgd), try larger scale.bucket_mb, or a faster interconnect"
        )
    else:
        figures["cause"] = "compute"
        threads = f"{b.threads_per_worker} -> {s.threads_per_worker}"
        cause = f": compute dominates ({_ms(slower)} slower per step than ideal)"
        fix = (
            f"each worker computes more slowly than the base (threads per worker {threads}): "
            "on one host the workers share its cores and memory bandwidth; measure on "
            "separate nodes or GPUs, or compare at equal threads per worker"
        )
    return [Issue("warning", head + split + cause, fix, figures)]


def untrustworthy_scaling(run: RunView) -> list[Issue]:
    """A scale point's: the same check `dlperf scale` warns with as it measures
    (dlperf.distributed.scaling)."""
    if run.run.kind != "scale":
        return []
    base = run.scale_base()
    workers, base_run = (base[1].workers, base[0]) if base else (None, None)
    concerns = untrustworthy(run.point_summary, workers, _slowest_steps(run), base_run)
    return [Issue("warning", c.evidence, c.fix, c.figures) for c in concerns]


def unsteady_throughput(run: RunView) -> list[Issue]:
    """A training run's (not a scale point's: untrustworthy-scaling judges those) epoch
    throughputs spread too wide for its throughput to mean anything."""
    if run.run.kind == "scale":
        return []
    spread = run.run.trained.throughput_spread or {}
    low, high = spread.get("min"), spread.get("max")
    if not (low and high and high / low > EPOCH_SPREAD):
        return []
    return [
        Issue(
            "warning",
            f"epoch throughputs range from {low:.1f} to {high:.1f} samples/s "
            f"(x{_past(high / low, EPOCH_SPREAD, 1)} > x{EPOCH_SPREAD:g}): the throughput "
            "cannot be trusted",
            "rerun on an idle host; check the oversubscribed and shared-host findings",
            {"throughput_min": low, "throughput_max": high},
        )
    ]


def _slowest_steps(run: RunView) -> list[float]:
    """Per step, the slowest rank's time, from the per-rank metrics a scale point stores."""
    keys = [
        k for k in run.stored.metric_keys(run.run.id) if re.fullmatch(r"rank\d+/step_time_s", k)
    ]
    per_rank = [[v for _, v in run.metric(k)] for k in keys]
    if not per_rank or len({len(r) for r in per_rank}) != 1:
        return []
    return [max(step) for step in zip(*per_rank, strict=True)]


# --- the input pipeline and the data -------------------------------------------------


def data_bound(run: RunView) -> list[Issue]:
    phases = run.run.trained.phases or {}
    total = sum(v for v in phases.values() if v)
    wait = phases.get("data")
    if not total or wait is None or wait / total <= DATA_SHARE:
        return []
    loader = run.key("data.loader") or "tensor"
    if tracked(run.run):  # the user's own loop and loader: a phase it named "data"
        fix = (
            "load batches ahead of the step (a torch DataLoader with num_workers > 0 and "
            "pin_memory=True), keep the data in memory, lighten augmentation, or use a larger "
            "batch so the step outweighs the batch's preparation"
        )
    elif loader == "torchvision":
        fix = (
            f'set data.loader = "tensor" (batches augmented on the device) or raise '
            f"data.num_workers (now {run.key('data.num_workers')})"
        )
    else:
        fix = (
            "keep the data in memory (data.in_memory = true), lighten augmentation, or use a "
            "larger batch so the step outweighs the batch's preparation"
        )
    return [
        Issue(
            "warning",
            f"data wait {_ms(wait)} of a {_ms(total)} step ({_share(wait / total, DATA_SHARE)} > "
            f"{DATA_SHARE:.0%}; summary phases: "
            + ", ".join(f"{k} {_ms(v)}" for k, v in phases.items() if v is not None)
            + ")",
            fix,
            {"data_s": wait, "step_s": total, "share": wait / total},
        )
    ]


def trace_non_compute(run: RunView) -> list[Issue]:
    """A profiled step whose largest operator by self time computes nothing."""
    if not traces.has_trace(run.stored.store, run.run.id):
        return []
    try:
        summaries = [traces.summarise(p) for p in traces.run_traces(run.stored.store, run.run.id)]
    except UserError as e:
        return [Issue("info", f"the run's trace cannot be read: {e}", "profile the run again")]
    issues = []
    for s in summaries:
        if not s.operators or not s.step_us:
            continue
        top = s.operators[0]
        kind = next((k for k, names in NON_COMPUTE.items() if top.name.startswith(names)), None)
        share = top.cpu_self_us / s.step_us
        if kind is None or share <= NON_COMPUTE_SHARE:
            continue
        phase = max(top.by_phase_us.items(), key=lambda kv: kv[1])[0]
        issues.append(
            Issue(
                "warning",
                f"{top.name} ({kind}) takes {_share(share, NON_COMPUTE_SHARE)} of each "
                f"profiled step ({s.per_step(top.cpu_self_us):.2f} of "
                f"{s.per_step(s.step_us):.2f} ms, mostly in {phase}; > {NON_COMPUTE_SHARE:.0%}), "
                f"the largest operator in {s.path}",
                NON_COMPUTE_FIX[kind],
                {"operator": top.name, "kind": kind, "share": share, "phase": phase},
            )
        )
    return issues


def _classes(run: RunView) -> int | None:
    seen = (run.run.trained.data or {}).get("classes")
    if seen:
        return int(seen)
    name = run.key("data.name")
    if name == "synthetic":
        return run.key("data.num_classes") or 10
    return dataset_table().get(name or "", {}).get("classes")


def chance_accuracy(run: RunView) -> list[Issue]:
    if run.run.kind == "scale" or _diverged(run):
        return []  # a scale point trains no accuracy; a diverged run has `diverged`
    accuracy, what = run.run.trained.test_accuracy, "test accuracy"
    # A test accuracy that is not a number (a summary edited by hand, or written by another
    # tool) says nothing about chance: read as missing, as non-finite val/acc1 epochs are.
    if accuracy is None or not math.isfinite(accuracy):
        val = [(e, v) for e, v in run.metric("val/acc1") if math.isfinite(v)]
        if not val:
            return []
        at, accuracy = val[-1]
        # A dlperf.track run's val/* rows are at the steps its loop gave, not at epochs.
        what = f"validation accuracy ({'step' if tracked(run.run) else 'epoch'} {at})"
    classes = _classes(run)
    if not classes or classes < 2:
        return []
    chance = 1 / classes
    margin = min(CHANCE_MARGIN, chance / 2)
    # The images the test accuracy is of (a run records them since round 10): chance is judged
    # by a binomial test on them, as 0 of 8 against 100,000 classes is what guessing scores.
    seen = (run.run.trained.data or {}).get("test") if what == "test accuracy" else None
    n = int(seen) if isinstance(seen, int | float) and seen >= 1 else None
    below = accuracy < chance - margin
    counted = ""
    if n is not None:
        from scipy.stats import binomtest

        correct = round(accuracy * n)
        if chance**n >= CHANCE_P and (1 - chance) ** n >= CHANCE_P:
            return []  # too few test images to tell any score from guessing
        if binomtest(correct, n, chance, alternative="greater").pvalue < CHANCE_P:
            return []  # significantly above chance
        below = below and binomtest(correct, n, chance, alternative="less").pvalue < CHANCE_P
        counted = f" ({correct} of {n} test images)"
        if not below and accuracy > chance + margin:
            return []
    elif accuracy > chance + margin:
        return []
    else:
        # Without the count, below chance only by the full margin: of many classes, a score
        # a margin below 1/K is what guessing on a few images does.
        below = below and margin == CHANCE_MARGIN
    lr = run.key("train.lr")  # a dlperf.track run's config need not have it
    rate = "the learning rate" + (f" (train.lr {lr})" if lr is not None else "")
    fix = (
        "the network learned nothing: check that labels match images, that the input is "
        f"normalised, and {rate}; train longer"
    )
    shown = f"{chance:.3f}" if chance >= 0.01 else f"{chance:.2g}"
    where = f"1/{classes} = {shown} ({run.key('data.name')}, {classes} classes)"
    if accuracy < chance - margin or (n is not None and accuracy > chance + margin):
        said = f"{what} {accuracy:.3f}{counted} is not above chance, {where}"
    else:
        said = f"{what} {accuracy:.3f} is within {margin:.3f} of chance, {where}{counted}"
    if below:
        # Far below chance is worse than guessing, which a network that learned nothing does
        # not do: it learned something that the labels it was scored against contradict.
        said = f"{what} {accuracy:.3f} is below chance, {where}, by more than {margin:.3f}"
        said += f"{counted}" if counted else ""
        fix = (
            "worse than guessing: the labels or the scores may be misaligned; check that labels "
            "match images and that the model's output columns are the classes in the labels' "
            f"order, and {rate}"
        )
    if (run.run.trained.transfer or {}).get("warnings"):
        fix += "; see input-below-weights-resolution"
    # A run still training may yet learn: said, but not failed on.
    return [
        Issue(
            "warning" if run.run.status == "running" else "error",
            said,
            fix,
            {"accuracy": accuracy, "chance": chance, "classes": classes},
        )
    ]


def _expected(run: RunView, transfer: dict[str, Any]) -> dict[str, Any]:
    """What the starting weights expect: image_size, mean, std (those known)."""
    expects = dict(transfer.get("expects") or {})
    source = re.fullmatch(r"run (\d+)", str(transfer.get("weights", "")))
    if source:
        origin = run.stored.find(int(source.group(1)))
        data = (origin.trained.data if origin else None) or {}
        if data.get("shape"):
            expects.setdefault("image_size", data["shape"][-1])
        for key in ("mean", "std"):
            if data.get(key):
                expects.setdefault(key, data[key])
    for warning in transfer.get("warnings") or []:
        found = re.search(r"trained at (\d+)x\d+", warning)
        if found:
            expects.setdefault("image_size", int(found.group(1)))
    return expects


def _per_channel(values: list[float], channels: int) -> list[float]:
    return values if len(values) == channels else [sum(values) / len(values)] * channels


def input_below_weights_resolution(run: RunView) -> list[Issue]:
    transfer = run.run.trained.transfer or {}
    data = run.run.trained.data or {}
    if not transfer or not data.get("shape") or run.key("model.transfer") == "scratch":
        return []
    expects, issues = _expected(run, transfer), []
    side, expected, weights = data["shape"][-1], expects.get("image_size"), transfer.get("weights")
    if expected and side <= expected * RESOLUTION_RATIO:
        issues.append(
            Issue(
                "warning",
                f"images {side}x{side} went into weights {weights} trained at "
                f"{expected}x{expected} ({side / expected:.0%} of their side, "
                f"<= {RESOLUTION_RATIO:.0%})",
                f"set data.image_size = {expected}, or pre-train at this resolution",
                {"image_size": side, "weights_image_size": expected},
            )
        )
    channels = data["shape"][0]
    mean, std = data.get("mean"), data.get("std")
    want_mean, want_std = expects.get("mean"), expects.get("std")
    off = []
    if mean and want_mean:
        want = _per_channel(list(want_mean), channels)
        if any(abs(a - b) > MEAN_TOLERANCE for a, b in zip(mean, want, strict=False)):
            off.append(f"mean {_values(mean)} instead of {_values(want)}")
    if std and want_std:
        want = _per_channel(list(want_std), channels)
        if any(max(a / b, b / a) > STD_RATIO for a, b in zip(std, want, strict=False) if a and b):
            off.append(f"std {_values(std)} instead of {_values(want)}")
    if off:
        issues.append(
            Issue(
                "warning",
                f"the images were normalised with {' and '.join(off)}, the statistics "
                f"weights {weights} were trained with",
                "drop data.mean and data.std from the config (the weights' statistics then "
                "apply), or set them to the weights'",
                {"mean": mean, "std": std, "weights_mean": want_mean, "weights_std": want_std},
            )
        )
    return issues


def _values(values: list[float]) -> str:
    return "(" + ", ".join(f"{v:.3f}" for v in values) + ")"


# --- the optimisation ----------------------------------------------------------------

LOSS_KEYS = ("train/loss", "epoch/train_loss", "val/loss")


def _diverged(run: RunView) -> bool:
    error = run.run.error or ""
    return "loss became" in error or any(_nonfinite(run.metric(k)) for k in LOSS_KEYS)


def diverged(run: RunView) -> list[Issue]:
    lr, clip = run.key("train.lr"), run.key("train.grad_clip")
    lr = lr if isinstance(lr, int | float) else None
    clip = clip if isinstance(clip, int | float) else None
    precision = run.key("run.precision") or "fp32"

    def fix(step: int | None) -> str:  # the engine's own advice (dlperf.engine.divergence)
        # A dlperf.track run's loop is the user's: none of the engine's keys is in it.
        return LOOP_FIX if tracked(run.run) else diverged_fix(step, lr, clip, precision)

    error = run.run.error or ""
    if run.run.status == "failed" and "loss became" in error:
        said = error.splitlines()[0].split(";")[0]  # the engine's own advice is in `fix`
        if said.startswith("evaluation loss became"):
            # Stored before the engine told a training that diverged (TrainingDiverged) from
            # a model's eval mode: its stored training loss tells it here.
            losses = [(s, v) for s, v in run.metric("train/loss") if math.isfinite(v)]
            peak = max(losses, key=lambda sv: sv[1]) if losses else None
            rose = blown_up(losses[0], peak, losses[-1]) if peak else None
            if rose is None:
                return [Issue("error", f"the run failed: {said}", evaluation_fix(precision))]
            said = f"{said.split(':')[0]} after train/loss rose {rose}"
            return [Issue("error", f"the run failed: {said}", fix(None))]
        at = re.search(r"at step (\d+)", said)
        return [Issue("error", f"the run failed: {said}", fix(int(at[1]) if at else None))]
    for key in LOSS_KEYS:
        bad = _nonfinite(run.metric(key))
        if bad:
            step, value = bad[0]
            # The engine logs epoch/* and val/* per epoch; a dlperf.track run's keys are all at
            # the steps its loop gave.
            unit = "step" if key.startswith("train/") or tracked(run.run) else "epoch"
            return [
                Issue(
                    "error",
                    f"{key} is {value} at {unit} {step} ({len(bad)} non-finite value(s))",
                    fix(None),  # a stored row's step may not count from the first update
                    {"key": key, unit: step, "nonfinite": len(bad)},
                )
            ]
    return []


def lr_too_high(run: RunView) -> list[Issue]:
    if _diverged(run):
        return []  # `diverged` says it
    epochs = [(e, v) for e, v in run.metric("epoch/train_loss") if math.isfinite(v)]
    if len(epochs) >= 2:
        (first_at, first), (last_at, last) = epochs[0], epochs[-1]
        unit = "step" if tracked(run.run) else "epoch"  # a tracked loop's rows: at its steps
        what = (
            f"epoch/train_loss rose from {first:.4f} ({unit} {first_at}) to {last:.4f} "
            f"({unit} {last_at})"
        )
    else:
        losses = [v for _, v in run.metric("train/loss")]
        if len(losses) < 20:
            return []
        window = max(5, len(losses) // 10)
        first, last = statistics.fmean(losses[:window]), statistics.fmean(losses[-window:])
        what = (
            f"train/loss rose from a mean {first:.4f} over its first {window} steps to "
            f"{last:.4f} over its last {window}"
        )
    if last <= first * LOSS_RISE or last - first <= LOSS_RISE_ABS:
        return []
    lr = run.key("train.lr")
    lr = lr if isinstance(lr, int | float) else None
    if tracked(run.run):  # the user's own loop: it has no train.lr to set
        fix = "lower your loop's learning rate, or warm it up over the first steps"
    else:
        fix = "lower train.lr" + (f" (e.g. {lr / 10:g})" if lr else "")
        fix += ", or warm it up (train.schedule.warmup_epochs)"
    at = f" at train.lr {lr}" if lr is not None else ""  # a tracked run's config may have it
    return [
        Issue(
            "warning",
            f"{what} (x{_past(last / first, LOSS_RISE, 2)} > x{LOSS_RISE:g}){at}",
            fix,
            {"first_loss": first, "last_loss": last, "lr": lr},
        )
    ]


def _checkpoint_gone(run: RunView) -> str | None:
    """What became of the last checkpoint the run recorded, if `dlperf run --resume` could
    no longer read it ("PATH is gone"); None while it is a regular file, or where none was
    recorded. Looked at as engine.checkpoint.run_checkpoint does, which needs torch."""
    paths = [a["path"] for a in run.stored.store.artifacts(run.run.id) if a["kind"] == "checkpoint"]
    if not paths:
        return None
    try:
        mode = os.stat(paths[-1]).st_mode  # through a link, as the resume opens it
    except FileNotFoundError:
        return f"{paths[-1]} is gone"
    except OSError as e:
        return f"{paths[-1]} cannot be read ({e.strerror})"
    return None if stat.S_ISREG(mode) else f"{paths[-1]} is not a regular file"


def unfinished(run: RunView) -> list[Issue]:
    """A run stopped before its last epoch (SIGTERM or Ctrl-C: killed; SIGKILL or a lost
    machine: lost): its figures are those of a partial run, which nothing else says."""
    status = run.run.status
    if run.run.kind != "run" or status not in ("killed", "lost") or _diverged(run):
        return []  # a diverged run's trouble is `diverged`
    if tracked(run.run):  # the user's own loop: no epochs, checkpoint or --resume of dlperf's
        return [_loop_unfinished(run, status)]
    done = len(run.metric("epoch/train_loss"))
    planned = run.key("train.epochs")
    of = f" of {planned}" if isinstance(planned, int) else ""
    if other := run.stored.store.writes_elsewhere(run.run):
        # A copy's row of a run that was training when the store was copied: its process
        # went on in the original, and its checkpoint is that run's (a resume here refused).
        # First: copied in its first epoch, or without a checkpoint, it never stopped.
        fix = went_on_in(other, "run it again")
    elif run.key("run.checkpoint") is False:
        fix = "run it again (it kept no checkpoint: run.checkpoint = false); a sweep reruns it"
    elif not done:
        fix = "run it again: it stopped before its first epoch's checkpoint"
    elif gone := _checkpoint_gone(run):
        fix = f"run it again: its checkpoint {gone}, so it cannot be resumed"
    else:
        resume = shlex.join(["dlperf", *run.stored.db, "run", "--resume", str(run.run.id)])
        fix = f"continue it from its last checkpoint: {resume}"
    said = f"the run was {status} after {done}{of} epoch(s)"
    if other and status == "lost":  # its process ended in the original, where it went on
        said = f"the run was still training when this store was copied, after {done}{of} epoch(s)"
    return [
        Issue(
            "warning",
            f"{said}: its figures are a partial run's",
            fix,
            {"status": status, "epochs_done": done, "epochs": planned},
        )
    ]


def _loop_unfinished(run: RunView, status: str) -> Issue:
    """`unfinished` of a dlperf.track run: how far it got is the last step it logged."""
    stored, run_id = run.stored.store, run.run.id
    steps = [stored.last_step(run_id, key) for key in run.stored.metric_keys(run_id)]
    last = max((s for s in steps if s is not None), default=None)
    after = "before it logged a step" if last is None else f"after step {last} (the last it logged)"
    return Issue(
        "warning",
        f"the run was {status} {after}: its figures are a partial run's",
        "run your loop again (from its own checkpoint, where it saves one): dlperf.track keeps "
        "none to resume",
        {"status": status, "last_step": last},
    )


RULES: dict[str, Handler] = {
    "unfinished": unfinished,
    "cpu-not-gpu": cpu_not_gpu,
    "missing-workers": missing_workers,
    "oversubscribed": oversubscribed,
    "shared-host": shared_host,
    "unreliable-measurement": unreliable_measurement,
    "stopped": stopped,
    "crowded-threads": crowded_threads,
    "chance-accuracy": chance_accuracy,
    "input-below-weights-resolution": input_below_weights_resolution,
    "data-bound": data_bound,
    "trace-non-compute": trace_non_compute,
    "low-efficiency": low_efficiency,
    "untrustworthy-scaling": untrustworthy_scaling,
    "unsteady-throughput": unsteady_throughput,
    "diverged": diverged,
    "lr-too-high": lr_too_high,
}
