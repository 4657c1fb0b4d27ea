"""PALEO's predictions as records, and their base, which the convergence results share: a
`dlperf.records.Record` whose JSON leaves out the keys its command never printed (a
prediction's "measured" without --measure) rather than printing them as null, and writes
nested results through their own `to_dict`, so a nested result leaves out its keys too.
`to_dict()` is the command's --json document, key for key. No torch, no NumPy."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from dlperf.records import Record


def _plain(value: Any) -> Any:
    """`value` as JSON holds it: results through their `to_dict`, tuples as lists."""
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class Result(Record):
    """A frozen dataclass's one codec for `--json` and the store: its fields in order, less
    those `left_out` names."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ()
    """Fields that are absent from the JSON, not null, when they are None."""

    def left_out(self) -> Iterable[str]:
        return (name for name in self.OPTIONAL if getattr(self, name) is None)

    def to_dict(self) -> dict[str, Any]:
        absent = set(self.left_out())
        names = [f.name for f in fields(self)]  # type: ignore[arg-type]  # a dataclass's base
        return {name: _plain(getattr(self, name)) for name in names if name not in absent}


# PALEO's prediction (dlperf.analytic.paleo) and, with `predict --measure`, its measurement.


@dataclass(frozen=True)
class LayerTime(Result):
    """One layer's predicted time: forward, with a training step forward + backward."""

    name: str
    type: str
    flops: float
    bytes: float  # what its operators read and write
    calls: int  # operator calls
    compute_s: float
    memory_s: float
    overhead_s: float  # calls × the per-call overhead
    time_s: float


@dataclass(frozen=True)
class Totals(Result):
    """The layers' sums, and the batch's throughput at PALEO's and at the theoretical time
    (PPP = PPP_mem = 1, no overhead)."""

    flops: float
    flops_by_kind: dict[str, float]  # every kind of devices.KINDS, 0 where none
    bytes: float
    calls: int
    compute_s: float
    memory_s: float
    overhead_s: float
    time_s: float
    images_per_s: float
    theoretical_time_per_image_s: float
    theoretical_images_per_s: float


@dataclass(frozen=True)
class Basis(Result):
    """What a prediction rests on: `kind` "catalog peak" (vendor peaks at PPP 1), "device
    ppp" (an entry's own PPP), "calibrated" (rates measured on `on` at `calibrated_at`) or
    "given ppp" (--ppp); `label` says it in a table's words."""

    kind: str
    device: str
    ppp: float | None
    calibrated_at: str | None
    on: str | None
    interleaved: bool  # calibrated in the same rounds as the measurement it is compared with
    label: str


@dataclass(frozen=True)
class Peak(Result):
    """The peak FLOP/s a prediction divides by, and what it is the peak of."""

    flops_per_s: float
    precision: str
    given: bool  # --peak-tflops, not the device's
    gpus_per_board: int
    label: str


@dataclass(frozen=True)
class FlopsOverPeak(Result):
    """time = FLOPs / peak FLOP/s, the count courses ask for (no memory time)."""

    flops_per_image: float
    flops_source: str  # "counted" or "given (--flops)"
    counted_flops_per_image: float
    counted_macs_per_image: float
    peak_flops: float
    time_per_image_s: float
    time_s: float  # the batch's
    images_per_s: float


@dataclass(frozen=True)
class LayerComparison(Result):
    """A layer's predicted forward against the profiler's time for it."""

    name: str
    type: str
    predicted_s: float
    measured_s: float
    error_pct: float | None  # None where the profiler gave the layer 0 s


@dataclass(frozen=True)
class SameMomentPrediction(Result):
    """The prediction from the calibration of the same rounds as the measurement: medians
    over the rounds, and each round's."""

    predicted_s: float
    error_pct: float
    rounds: tuple[dict[str, float], ...]  # predicted_s, measured_s, error_pct
    basis: Basis


@dataclass(frozen=True)
class Measured(Result):
    """A prediction against the model timed here (`predict --measure`): per layer (forward
    passes only), in total, and the PPP that explains the measured total; with the
    same-moment prediction, the rounds' marks and the run it is stored as."""

    layers: tuple[LayerComparison, ...]
    predicted_s: float
    measured_s: dict[str, float]  # min, median, max over the rounds
    error_pct: float
    measured_images_per_s: float
    fitted_ppp: float | None  # None where memory and calls alone take longer
    basis: Basis | None = None
    same_moment: SameMomentPrediction | None = None
    cpu_wait_share: float | None = None
    contention: dict[str, Any] | None = None  # the window's figures, dlperf.contention
    reliable: bool | None = None
    reliability_note: str | None = None
    run_id: int | None = None
    local_device: str | None = None


@dataclass(frozen=True)
class Prediction(Result):
    """PALEO's prediction of one forward (or training step) at the batch, per layer and in
    total; `predict_with_basis` adds its basis, peak and FLOPs / peak, `predict --measure`
    its measurement, `predict --plot` the figure's path."""

    model: str
    device: str
    precision: str
    batch: int
    train: bool
    ppp: float
    ppp_by_kind: dict[str, float]
    ppp_mem: float
    op_overhead_s: float
    peak_flops: float
    memory_bandwidth: float  # bytes/s
    layers: tuple[LayerTime, ...]
    totals: Totals
    # The count's operators of no handler ({} when none), as `analyze --json` has them: the
    # totals leave their work out, so any makes every time a lower bound. None: not counted
    # here (a prediction built by hand).
    unsupported_ops: dict[str, int] | None = None
    basis: Basis | None = None
    peak: Peak | None = None
    flops_over_peak: FlopsOverPeak | None = None
    measured: Measured | None = None
    plot: str | None = None

    OPTIONAL = ("unsupported_ops", "basis", "peak", "flops_over_peak", "measured", "plot")
