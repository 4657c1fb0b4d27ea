"""Calibrate and measure at the same moment, so that a drift in the machine's speed cancels.

A shared VM's speed drifts by up to 2x within minutes; rates calibrated at one moment then
mispredict a model measured at another by as much as the drift (issue 16: the median error
of `bench_paleo.py` met its goal in 3 runs of 6). Here the calibration's timed work (square
matmuls, a large copy, the KERNELS) and the models' steps run in rounds, each once per
round, in one process on one clock. Each round's calibration predicts that round's models,
so a slow round is slow on both sides of the comparison.

Interleaving cancels a change of the machine's speed, not the cost of sharing it: a round's
threads that wait for a CPU another process holds (an OpenMP operator waits at every
parallel region for its slowest thread) slow the model and the kernels unequally. So the
rounds (the warm-up left out) are one contention window (dlperf.contention), and their
figures carry its marks (`marks`).
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import torch

from dlperf.analytic.counting import Analysis, analyze_module
from dlperf.analytic.devices import Device
from dlperf.analytic.measure import KERNELS, large_copy, make_step, solve, square_matmul
from dlperf.analytic.paleo import CALIBRATED_BY, error_pct, predict
from dlperf.contention import Contention, Reliability, Window, judge
from dlperf.precision import DTYPES
from dlperf.progress import NullReporter, Reporter
from dlperf.timing import Clock, Spread, interleave

Step = Callable[[], Any]


@dataclass(frozen=True)
class Probes:
    """The calibration's timed work, each with what dlperf counts of it."""

    matmul: dict[str, tuple[float, Step]]
    """Precision -> (FLOPs of one call, a square matmul); fp32 is always there: the
    kernels are solved at fp32."""
    copy: tuple[float, Step]
    """(bytes read and written, a copy far larger than the caches)."""
    kernels: list[tuple[Analysis, Step]]
    """One per KERNELS entry, in its order."""

    def steps(self) -> dict[str, Step]:
        """Name -> step, in the order a round runs them (names are fit()'s keys)."""
        return (
            {f"matmul {p}": step for p, (_, step) in self.matmul.items()}
            | {"copy": self.copy[1]}
            | {k.unknown: step for k, (_, step) in zip(KERNELS, self.kernels, strict=True)}
        )


def build_probes(device: torch.device, precisions: Iterable[str], clock: Clock) -> Probes:
    """The real probes on `device`: matmuls sized to take 20 ms at fp32 and each of
    `precisions` this device has a kernel for, the copy, and the KERNELS (16x the batch on
    a GPU)."""
    matmul: dict[str, tuple[float, Step]] = {}
    for precision in dict.fromkeys(["fp32", *precisions]):
        with contextlib.suppress(RuntimeError):  # no matmul kernel for this dtype here
            matmul[precision] = square_matmul(DTYPES[precision], device, clock)
    scale = 1 if device.type == "cpu" else 16
    kernels = []
    for kernel in KERNELS:
        batch = kernel.batch * scale
        analysis = analyze_module(kernel.make(), kernel.shape, batch, kernel.train)
        step = make_step(kernel.make(), kernel.shape, batch, kernel.train, "fp32", device)
        kernels.append((analysis, step))
    return Probes(matmul, large_copy(device), kernels)


def host_device(device: torch.device, name: str | None, source: str) -> Device:
    """This machine as a catalog entry without rates yet: what it is, when, with which
    threads (`fit` adds the rates)."""
    from dlperf.system import system_info

    info = system_info(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        what, memory_gb = props.name, props.total_memory / 1e9
    else:
        what = f"{info['cpu']} ({device.type}), {info['threads']} threads"
        memory_gb = info["memory_gb"]
    # Not validated: its rates are not measured yet (0), and a catalog entry's must be
    # positive; `fit` writes them.
    return Device.model_construct(
        name=name or socket.gethostname(),
        description=f"{what}, torch {torch.__version__}",
        kind="cpu" if device.type == "cpu" else "gpu",
        peak_tflops={},
        memory_bandwidth_gbs=0.0,
        memory_gb=memory_gb,
        threads=torch.get_num_threads() if device.type == "cpu" else None,
        source=source,
        # The time, not only the day: a prediction's basis says when its rates were true.
        date=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def fit(base: Device, probes: Probes, seconds: Mapping[str, float]) -> tuple[Device, list[str]]:
    """`base` with the rates that `seconds` (probe name -> time, as Probes.steps() names
    them) give: peaks and bandwidth directly, then each kernel's unknown in KERNELS order;
    and the unknowns left unset, whose kernel ran faster than the other terms alone
    predict (as a busy host's rounds can make a tiny kernel look)."""
    peaks = {p: flops / seconds[f"matmul {p}"] / 1e12 for p, (flops, _) in probes.matmul.items()}
    clean = {"ppp": None, "ppp_by_kind": None, "ppp_mem": None, "op_overhead_us": None}
    device = base.model_copy(
        update={
            "peak_tflops": peaks,
            "memory_bandwidth_gbs": probes.copy[0] / seconds["copy"] / 1e9,
            **clean,
        }
    )
    missed = []
    for kernel, (analysis, _) in zip(KERNELS, probes.kernels, strict=True):
        solved = solve(kernel, device, seconds[kernel.unknown], analysis)
        if solved is None:
            missed.append(kernel.unknown)
        device = solved or device
    # Each solved kind's PPP was saved beside every other kind's current one (1 for those
    # not solved): a missed kind's 1 is no measurement, and the device's `ppp` applies to it.
    kinds = {k: v for k, v in (device.ppp_by_kind or {}).items() if k not in missed}
    return device.model_copy(update={"ppp_by_kind": kinds or None}), missed


@dataclass(frozen=True)
class SameMoment:
    """What calibrate_and_measure found."""

    device: Device
    """Fitted from each probe's median time over the rounds (what `dlperf calibrate`
    saves)."""
    rounds: list[Device]
    """Fitted from each round's probe times alone."""
    models: dict[str, dict[str, Any]]
    """Name -> `times_s` (one per round), `measured_s` (spread), `rounds` [{`predicted_s`,
    `measured_s`, `error_pct`}], `predicted_s` and `error_pct` (medians over the rounds)."""
    contention: Contention | None = None
    """How long the rounds' threads waited for a CPU (the warm-up left out)."""
    probe_times: dict[str, list[float]] = field(default_factory=dict)
    """Probe name (Probes.steps()) -> its seconds, one per round."""
    unsolved: list[str] = field(default_factory=list)
    """The KERNELS unknowns `device` leaves unset: fit() could not solve them."""


def calibrate_and_measure(
    base: Device,
    probes: Probes,
    models: Mapping[str, tuple[Analysis, Step]],
    rounds: int,
    device: torch.device,
    clock: Clock = time.perf_counter,
    warmup: int = 2,
    reporter: Reporter | None = None,
) -> SameMoment:
    """Time every probe, then every model, once per round for `rounds` rounds (after
    `warmup` untimed calls of each); predict each round's models from that round's fit.
    A model's error is the median over the rounds of its per-round error."""
    reporter = reporter or NullReporter()
    steps = probes.steps()
    # Keyed apart: a model may have a probe's name.
    contenders = {("probe", name): step for name, step in steps.items()} | {
        ("model", name): step for name, (_, step) in models.items()
    }
    reporter.task(f"{rounds} rounds: calibration kernels, then the model", total=rounds)
    interleave(contenders, warmup, 0, device, clock)  # the warm-up, outside the window
    window = Window()
    window.start()
    seconds = interleave(contenders, 0, rounds, device, clock, on_round=reporter.advance)
    waited = window.stop()
    probe_times = {name: seconds["probe", name] for name in steps}
    times = {name: seconds["model", name] for name in models}
    fitted = [
        fit(base, probes, {name: t[i] for name, t in probe_times.items()})[0] for i in range(rounds)
    ]
    results = {}
    for name, (analysis, _) in models.items():
        per_round = [
            {"predicted_s": p, "measured_s": m, "error_pct": error_pct(p, m)}
            for p, m in zip(
                (predict(analysis, d).totals.time_s for d in fitted), times[name], strict=True
            )
        ]
        results[name] = {
            "times_s": times[name],
            "measured_s": Spread.of(times[name]).min_median_max(),
            "rounds": per_round,
            "predicted_s": statistics.median(r["predicted_s"] for r in per_round),
            "error_pct": statistics.median(r["error_pct"] for r in per_round),
        }
    medians = {name: statistics.median(t) for name, t in probe_times.items()}
    median_fit, unsolved = fit(base, probes, medians)
    return SameMoment(median_fit, fitted, results, waited, probe_times, unsolved)


def judged(
    window: Contention | None,
    series: Mapping[str, Sequence[float]],
    unsolved: Sequence[str] = (),
) -> Reliability:
    """The mark of figures that are each a median of rounds: `window` contended, a series
    (name -> its value in each round) too spread to read (the note names the widest one and
    lists the others), or constants a calibration could not solve (`unsolved`)."""

    def spread(values: Sequence[float]) -> float:
        low, _, high = statistics.quantiles(values, n=4)
        return (high - low) / statistics.median(values)

    wide = sorted(
        (name for name, values in series.items() if not judge(None, values).reliable),
        key=lambda name: -spread(series[name]),
    )
    notes = [judge(window).note]
    if wide:
        notes.append(f"{wide[0]}: {judge(None, series[wide[0]]).note}")
    if wide[1:]:
        notes.append(f"also too spread: {', '.join(wide[1:])}")
    if unsolved:
        notes.append(
            f"not solved: {', '.join(unsolved)} (its kernel ran faster than the other terms "
            "alone predict: left out, the default applies)"
        )
    shown = [note for note in notes if note]
    return Reliability(not shown, "; ".join(shown) or None)


def marks(window: Contention | None, mark: Reliability) -> dict[str, Any]:
    """What a measured result carries beside its figures: `cpu_wait_share`, `contention` (the
    window's figures, dlperf.contention.Contention) and the mark (`reliable`,
    `reliability_note`)."""
    return {
        "cpu_wait_share": window.cpu_wait_share if window else None,
        "contention": window.to_dict() if window else None,
        **mark.to_dict(),
    }


def calibrate(
    device: torch.device,
    name: str | None = None,
    reporter: Reporter | None = None,
    reps: int = 5,
    clock: Clock = time.perf_counter,
) -> SameMoment:
    """`dlperf calibrate`: the device's peaks (square matmuls per dtype, a large copy) and
    the time model's other constants, one kernel each (KERNELS), from the medians of
    `reps` rounds that run them all in turn, so that the peaks and the kernels that are
    solved against them are measured at the same moments (`device`; the rounds' contention
    and probe times beside it)."""
    source = (
        f"{CALIBRATED_BY}: medians of {reps} interleaved rounds of square matmuls per dtype, "
        "a large copy and the kernels that fix the per-call overhead, PPP_mem and the PPP of "
        "each operator kind"
    )
    if reporter:
        reporter.task("sizing the matmuls, building the kernels")
    probes = build_probes(device, DTYPES, clock)
    return calibrate_and_measure(
        host_device(device, name, source), probes, {}, reps, device, clock, reporter=reporter
    )
