"""What `dlperf predict` prints: a PALEO prediction (`results.Prediction`) as tables, in the
order the command shows them, so that a notebook gets the same view with `str()`. Times read
in milliseconds, counts as '1.23 M'; the --json document keeps seconds and exact numbers."""

from __future__ import annotations

from typing import Any

from dlperf.analytic.counting import listed_ops
from dlperf.analytic.results import Basis, FlopsOverPeak, Measured, Prediction, Totals
from dlperf.analytic.tables import si
from dlperf.table import Table

MS = 1e3  # seconds to milliseconds
TIMES = ("compute_s", "memory_s", "overhead_s", "time_s")


def _ppp_text(kinds: dict[str, float]) -> str:
    """'0.62', or one value per operator kind when they differ."""
    if len(set(kinds.values())) == 1:
        return f"{next(iter(kinds.values())):.3g}"
    return "(" + ", ".join(f"{kind} {v:.3g}" for kind, v in kinds.items()) + ")"


def figure(basis: Basis, calls: bool) -> str:
    """What a row's figure is: the peak, or a prediction at a PPP from somewhere, and its
    terms (`calls`: the time has a cost per operator call in it)."""
    if basis.kind == "given ppp":
        what = f"prediction at given PPP {basis.ppp:g}"
    else:
        what = {
            "catalog peak": "peak (PPP=1)",
            "device ppp": "prediction at the device's PPP",
            "calibrated": "prediction from calibration",
        }[basis.kind]
    return f"{what}, compute + memory{' + calls' if calls else ''}"


def _flops_text(f: FlopsOverPeak) -> str:
    counted = f"{si(f.counted_flops_per_image)} counted ({si(f.counted_macs_per_image)} MACs)"
    if f.flops_source == "counted":
        return counted
    return f"{si(f.flops_per_image)} given (--flops); {counted}"


def layer_table(r: Prediction, basis: Basis) -> Table:
    """PALEO's time of each layer: compute, memory and calls."""
    return Table(
        f"{r.model} on {r.device}: {r.precision}, batch {r.batch}"
        f"{', training step' if r.train else ''}, "
        f"PPP {_ppp_text(r.ppp_by_kind)}, PPP_mem {r.ppp_mem:.3g}; {basis.label}",
        ["layer", "type", "FLOPs", "bytes", "calls", "compute ms", "memory ms", "calls ms",
         "time ms"],
        [
            [row.name, row.type, si(row.flops), si(row.bytes, "B"), row.calls,
             *(getattr(row, k) * MS for k in TIMES)]
            for row in r.layers
        ],
    )  # fmt: skip


def _prediction_rows(t: Totals, what: str, basis: Basis, peak_label: str) -> list[list[Any]]:
    rows: list[list[Any]] = [
        [f"{what}: time per batch (ms)", t.time_s * MS],
        ["  compute / memory / calls (ms)",
         " / ".join(f"{getattr(t, k) * MS:.4g}" for k in TIMES[:3])],
        [f"{what}: images/s", t.images_per_s],
        ["  basis", basis.label],
        ["  peak", peak_label],
    ]  # fmt: skip
    if basis.kind != "catalog peak":  # there the figures above are these already
        rows += [
            ["peak (PPP=1), compute + memory: time per image (ms)",
             t.theoretical_time_per_image_s * MS],
            ["peak (PPP=1), compute + memory: images/s", t.theoretical_images_per_s],
        ]  # fmt: skip
    return rows


def _unsupported_rows(unsupported_ops: dict[str, int] | None, f: FlopsOverPeak) -> list[list[Any]]:
    """The operators the count left out, in analyze's words, first: every figure below
    leaves out their work, but FLOPs ÷ peak's from FLOPs given (--flops)."""
    if not unsupported_ops:
        return []
    bounds = (
        "times and FLOPs below are lower bounds, images/s upper bounds"
        if f.flops_source == "counted"
        else "times and counted FLOPs below are lower bounds, images/s upper bounds (not "
        "FLOPs ÷ peak's: they use the given FLOPs)"
    )
    return [["not counted (no handler for these operators)",
             f"{listed_ops(unsupported_ops)}: {bounds}"]]  # fmt: skip


def _measured_rows(m: Measured, what: str) -> list[list[Any]]:
    s, same = m.measured_s, m.same_moment
    assert same is not None  # a measurement always has its same-moment prediction
    return [
        [f"measured on {m.local_device}: median (min-max) ms",
         f"{s['median'] * MS:.4g} ({s['min'] * MS:.4g}-{s['max'] * MS:.4g})"],
        ["measured images/s", m.measured_images_per_s],
        ["CPU wait (share of thread time)", m.cpu_wait_share],
        *([["unreliable", m.reliability_note]] if m.reliable is False else []),
        [f"error of the {what} (%)", m.error_pct],
        [f"same-moment prediction: time per batch (ms), median of {len(same.rounds)} rounds",
         same.predicted_s * MS],
        ["  error (%), median of the rounds' errors", same.error_pct],
        ["  basis", same.basis.label],
        ["PPP that fits the measurement", m.fitted_ppp],
        ["stored as run", m.run_id],
    ]  # fmt: skip


def measured_layer_table(m: Measured, what: str) -> Table:
    """Each layer's predicted forward beside the profiler's time for it."""
    return Table(
        f"forward per layer: {what} vs measured (torch.profiler)",
        ["layer", "type", f"{what.split()[0]} ms", "measured ms", "error %"],
        [[row.name, row.type, row.predicted_s * MS, row.measured_s * MS, row.error_pct]
         for row in m.layers],
    )  # fmt: skip


def prediction_tables(r: Prediction) -> list[Table]:
    """Every table of a prediction with its basis (`paleo.predict_with_basis`), in the order
    the command prints them: per layer, measured per layer (with --measure, a forward),
    totals."""
    assert r.basis is not None and r.peak is not None and r.flops_over_peak is not None
    what = figure(r.basis, r.op_overhead_s > 0)
    f = r.flops_over_peak
    rows = [
        *_unsupported_rows(r.unsupported_ops, f),
        *_prediction_rows(r.totals, what, r.basis, r.peak.label),
        ["FLOPs ÷ peak: time per image (ms)", f.time_per_image_s * MS],
        ["FLOPs ÷ peak: images/s", f.images_per_s],
        ["  FLOPs per image", _flops_text(f)],
    ]
    tables = [layer_table(r, r.basis)]
    m = r.measured
    if m:
        if m.layers:
            tables.append(measured_layer_table(m, what))
        rows += _measured_rows(m, what)
    return [*tables, Table("totals", ["", "value"], rows)]
