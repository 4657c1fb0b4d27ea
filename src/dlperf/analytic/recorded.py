"""The analytic commands that measure and are recorded as runs: `calibrate` (this machine's
rates, saved to the user catalog) and `predict` (PALEO's prediction, with `--measure` the
model timed here in rounds interleaved with the calibration kernels). They sit above the
counting, the PALEO model (paleo.py), the timing primitives (measure.py) and the
interleaved rounds (interleaved.py), which import none of this.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf import stopping
from dlperf.analytic.counting import Analysis, analyze, kept_note
from dlperf.analytic.devices import (
    Device,
    check_calibrated_name,
    get_device,
    load_catalog,
    save_device,
    user_file,
    writable,
)
from dlperf.analytic.interleaved import (
    build_probes,
    calibrate,
    calibrate_and_measure,
    host_device,
    judged,
    marks,
)
from dlperf.analytic.measure import make_step, profile_leaves
from dlperf.analytic.ops import COMPLEX_COUNTED
from dlperf.analytic.paleo import basis, compare, does_arithmetic, predict_with_basis
from dlperf.analytic.results import Measured, Prediction, SameMomentPrediction
from dlperf.config.base import FIGURE_MAX, FIGURE_MIN, PPP_MIN
from dlperf.config.predict import FLOPS_MAX
from dlperf.errors import UserError
from dlperf.parsing import refuse_given
from dlperf.progress import NullReporter, Reporter
from dlperf.system import pick_device, set_threads, system_info

if TYPE_CHECKING:
    from dlperf.store import RunStore

# predict --measure's rounds when predict.reps is not given.
DEFAULT_REPS = 10


def predict_model(
    model: str,
    device: str | None,
    open_store: Callable[[], RunStore],
    *,
    input_shape: Sequence[int] | None = None,
    batch: int = 1,
    train: bool = False,
    precision: str = "fp32",
    classes: int | None = None,
    ppp: float | None = None,
    peak_tflops: float | None = None,
    flops: float | None = None,
    measure: bool = False,
    reps: int | None = None,
    reporter: Reporter | None = None,
    model_kwargs: dict[str, Any] | None = None,
) -> Prediction:
    """`predict` for a model by name (registry, torchvision, "file.py:factory") built with
    `model_kwargs`, as analyze builds it, on the catalog device `device`, with its basis;
    `peak_tflops` replaces the device's peak at the precision, `flops` (per image) the
    counted FLOPs of FLOPs / peak. With `measure`, the model also runs here in `reps` rounds
    (None: DEFAULT_REPS; refused without `measure`) interleaved with the calibration
    kernels, and the comparison, recorded as a run, goes under "measured"; `device` None then
    means this machine as calibrated in those rounds. Warnings go to the reporter."""
    if device is None and not measure:
        raise UserError(
            "give predict.device, a catalog device",
            "see `dlperf devices`, or measure here with predict.measure",
        )
    # The ends [predict]'s keys hold to (config.base, config.predict), from a notebook too:
    # within them every figure is finite, and peak × PPP never rounds to 0.
    if ppp is not None and not PPP_MIN <= ppp <= 1:
        raise UserError(
            f"predict.ppp must lie in [{PPP_MIN:g}, 1], got {ppp:g}",
            "it is the fraction of the peak reached, e.g. 0.62",
        )
    ends = {"predict.peak_tflops": (peak_tflops, FIGURE_MIN, FIGURE_MAX)}
    ends["predict.flops"] = (flops, 1.0, FLOPS_MAX)
    for option, (value, low, high) in ends.items():
        if value is not None and not low <= value <= high:  # nan too
            raise UserError(f"{option} must lie in [{low:g}, {high:g}], got {value:g}")
    if peak_tflops is not None and device is None:
        raise UserError(
            "predict.peak_tflops needs predict.device", "its memory bandwidth is used too"
        )
    if not measure:  # the rounds are the measurement's; a prediction alone has none
        refuse_given({"predict.reps": reps}, "predict.measure", "--measure runs them")
    reps = DEFAULT_REPS if reps is None else reps
    entry = get_device(device) if device is not None else None
    if reps < 1:
        raise UserError(f"predict.reps must be at least 1, got {reps}")
    reporter = reporter or NullReporter()
    # The model file's notes told as it is built: before a refusal of the count they explain
    a = analyze(
        model, input_shape, batch, train, precision, classes, model_kwargs=model_kwargs,
        command="predict", tell=lambda note: reporter.log(f"warning: {note}"),
    )  # fmt: skip
    if unsupported := a.unsupported_note():
        reporter.log(f"warning: {unsupported}")
    if a.kept is not None:  # as analyze's precision convention says it
        done = "counted and measured" if measure else "counted"
        reporter.log(f"note: {model} {done} as built: {kept_note(a.kept)}")
    if a.complex_dtypes:  # as analyze's conventions say it
        reporter.log(f"note: {model}: {COMPLEX_COUNTED}")
    does_arithmetic(a)
    if not measure:
        assert entry is not None
        return predict_with_basis(a, entry, ppp, peak_tflops=peak_tflops, flops=flops)
    return measure_recorded(
        open_store, model, a, entry, ppp, reps, reporter, peak_tflops=peak_tflops, flops=flops,
        model_kwargs=model_kwargs,
    )  # fmt: skip


def calibrate_recorded(
    open_store: Callable[[], RunStore],
    name: str | None = None,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """`calibrate` this machine's device (CUDA, then MPS, then CPU) with all its threads,
    saved as a device in the user catalog and recorded as a run (marked killed or failed if
    calibration stops). Returns the run id, the file, the device and the rounds' `marks`
    (their CPU wait, and the mark of a contended window, too spread a probe or a constant
    not solved, which `unsolved` lists), which the run's summary carries too."""

    writable(user_file())  # before minutes of measuring, not after
    load_catalog(user_file())  # the file it adds to (missing: made): bad entries refused now
    device = pick_device("auto")
    check_calibrated_name(name or socket.gethostname(), "cpu" if device.type == "cpu" else "gpu")
    threads = set_threads(None)
    store = open_store()
    with store.new_run(
        name=f"calibrate {name or socket.gethostname()}",
        kind="calibrate",
        config={"name": name, "device": str(device)},
        system=system_info(device, threads),
    ) as record:
        same = calibrate(device, name, reporter)
        fitted = same.device
        # The spread is judged on the peaks the device is read by (matmuls, the copy): the
        # tiny kernels behind the per-call constants spread past 10% even on an idle host.
        peaks = {k: v for k, v in same.probe_times.items() if k.startswith("matmul") or k == "copy"}
        marked = marks(same.contention, judged(same.contention, peaks, same.unsolved))
        marked["unsolved"] = same.unsolved
        path = _saved(fitted)
        store.log_metrics(
            record.id,
            [(f"matmul_tflops_{p}", 0, v) for p, v in fitted.peak_tflops.items()]
            + [(f"ppp_{kind}", 0, v) for kind, v in fitted.kind_ppp().items()]
            + [
                ("memory_bandwidth_gbs", 0, fitted.memory_bandwidth_gbs),
                ("ppp_mem", 0, fitted.ppp_mem or 1.0),
                ("op_overhead_us", 0, fitted.op_overhead_us or 0.0),
            ],
        )
        store.add_artifact(record.id, "devices", path)
        record.summary = fitted.model_dump() | marked
    return {"run_id": record.id, "path": path, "device": fitted, "marks": marked}


def _saved(fitted: Device) -> Path:
    """`fitted` saved to the user's devices file, the calibration's outcome settled with it: a
    stop that came before (one a library swallowed, or one that waited in a shielded write)
    leaves the file as it was and the run killed; once the device is in place a stop no longer
    counts, and the run is stored finished with its metrics. A stop raised after the rename
    exited 143 with nothing said and the run killed, the new device saved (as `export`'s
    publish, deploy/export.py)."""
    with stopping.shielded():  # the device saved and the outcome settled, or neither
        if stopping.requested():
            raise KeyboardInterrupt
        path = save_device(fitted)
        stopping.settle()
    return path


def measure_recorded(
    open_store: Callable[[], RunStore],
    model: str,
    analysis: Analysis,
    entry: Device | None,
    ppp: float | None,
    reps: int,
    reporter: Reporter | None = None,
    peak_tflops: float | None = None,
    flops: float | None = None,
    model_kwargs: dict[str, Any] | None = None,
) -> Prediction:
    """`predict --measure`: run the model `model`, built with `model_kwargs` for the classes
    `analysis` counted, on this machine's device with all its threads in `reps` rounds
    interleaved with the calibration kernels (interleaved.calibrate_and_measure), recorded
    as a run (marked killed or failed if it stops). Returns the prediction for `entry`
    (None: this machine as calibrated in those rounds) at `ppp`, with its basis, and under
    "measured" its comparison with the measurement and the same-moment prediction with its
    error, and the rounds' marks (`cpu_wait_share`, `contention`, `reliable`,
    `reliability_note`: the window contended, or the model's times too spread). A CPU entry
    calibrated with other than this run's threads is warned of. `peak_tflops` and `flops` go
    to predict_with_basis."""
    from dlperf.models import create_model
    from dlperf.models.registry import noting, without_automatic

    reporter = reporter or NullReporter()
    device = pick_device("auto")
    threads = set_threads(None)
    if entry is not None and device.type == "cpu" and entry.threads not in (None, threads):
        reporter.log(
            f"warning: {entry.name} was calibrated with {entry.threads} "
            f"threads, this measurement runs {threads}: expect the rates to differ"
        )
    store = open_store()
    a = analysis
    # analyze has checked model_kwargs' num_classes and in_channels against the counted ones
    kwargs = without_automatic(model_kwargs or {})
    with noting() as notes:  # as analyze's build: told, not raised as a RuntimeWarning
        real = create_model(model, num_classes=a.classes, in_channels=a.input[0], **kwargs)
    for note in dict.fromkeys(notes):
        if note not in a.model_notes:  # said once, of the count's build
            reporter.log(f"warning: {note}")
    config = {
        # the layout of an experiment's config, for `runs list`
        "model": {"name": model, **({"kwargs": kwargs} if kwargs else {})},
        "input": a.input,
        "batch": a.batch,
        "train": a.train,
        "precision": a.precision,
        "device": entry.name if entry else "this machine, calibrated in the same rounds",
        "ppp": ppp,
        "reps": reps,
    }
    with store.new_run(
        name=f"predict {model} on {entry.name if entry else 'this machine'}",
        kind="predict",
        config=config,
        system=system_info(device, threads),
    ) as record:
        reporter.task("preparing the calibration kernels and the model")
        probes = build_probes(device, [a.precision], time.perf_counter)
        step = make_step(real, a.input, a.batch, a.train, a.precision, device)
        here = host_device(
            device, None, "dlperf predict --measure: calibrated in the rounds of the measurement"
        )
        same = calibrate_and_measure(
            here, probes, {model: (a, step)}, reps, device, reporter=reporter
        )
        timed = same.models[model]
        layers = {}
        if not a.train:  # the profiler's ranges are the leaves' forwards
            reporter.task("profiling layers")
            layers = profile_leaves(real, step, device, min(reps, 3))
        prediction = predict_with_basis(
            a, entry or same.device, ppp, entry is None, peak_tflops, flops
        )
        store.log_metrics(record.id, [("measured_s", i, t) for i, t in enumerate(timed["times_s"])])
        marked = marks(same.contention, judged(same.contention, {model: timed["times_s"]}))
        comparison = replace(
            compare(prediction, timed["measured_s"], layers),
            basis=prediction.basis,
            same_moment=SameMomentPrediction(
                predicted_s=timed["predicted_s"],
                error_pct=timed["error_pct"],
                rounds=tuple(timed["rounds"]),
                basis=basis(same.device, None, interleaved=True),
            ),
            **marked,
        )
        record.summary = _summary(comparison) | marked
    comparison = replace(comparison, run_id=record.id, local_device=str(device))
    return replace(prediction, measured=comparison)


def _summary(measured: Measured) -> dict[str, Any]:
    """What a `predict --measure` run stores as its summary, beside the rounds' marks."""
    assert measured.basis is not None and measured.same_moment is not None
    return {
        "predicted_s": measured.predicted_s,
        "error_pct": measured.error_pct,
        "fitted_ppp": measured.fitted_ppp,
        "measured_images_per_s": measured.measured_images_per_s,
        "measured_median_s": measured.measured_s["median"],
        "basis": measured.basis.to_dict(),
        "same_moment_predicted_s": measured.same_moment.predicted_s,
        "same_moment_error_pct": measured.same_moment.error_pct,
    }
