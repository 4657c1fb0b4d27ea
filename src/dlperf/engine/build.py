"""What a run trains, built and checked before it is recorded: device and threads, the data
at its starting weights' resolution and statistics, the model with those weights.

Everything that can be wrong with the input (data set, model, batch size, device) is
checked here, before the layer above (dlperf.experiment) records the run, so bad input
leaves nothing in the store. `run:ID` weights are read through `StoredRuns`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dlperf import contention
from dlperf.analytic.counting import QUANTIZED, other_dtype
from dlperf.config import Experiment, ModelConfig
from dlperf.data import ImageData, load_data
from dlperf.data.augment import check_augment
from dlperf.engine import checkpoint, pretrained
from dlperf.engine.checks import (
    Grown,
    ReadFailed,
    TooDeep,
    check_batch_fits,
    check_batch_trains,
    check_checkpointable,
    check_classes,
    check_classifier,
    check_finite,
    check_reloadable,
    check_run_batch,
    check_run_form,
    check_scaled_dtypes,
    check_target_measured,
    dry_backward,
    dry_forward,
    eval_remainders,
    misfit,
    no_gradient,
)
from dlperf.engine.profiler import check_fits
from dlperf.engine.step import steps_per_epoch
from dlperf.engine.stored import StoredRuns
from dlperf.errors import MemoryRanOut, MissingDevice, UserError, note_where
from dlperf.formatting import few
from dlperf.models import create_model, transfer
from dlperf.models.registry import (
    check_automatic,
    noting,
    refusing_unregistered,
    seed_generators,
    too_deep,
    without_automatic,
)
from dlperf.models.walk import named_parameters
from dlperf.progress import Reporter
from dlperf.system import auto_threads, crowding, pick_device, set_threads


@dataclass
class Prepared:
    """What a run trains, checked before it is recorded."""

    device: torch.device
    threads: int
    free_cores: float | None  # measured as it started, on a CPU or with run.threads "auto"
    crowded: str | None  # the warning when fewer cores are free than threads: said once the
    # run is checked and about to train, so that a mistake in it still reads as one line
    data: ImageData
    model: torch.nn.Module
    transfer: dict[str, Any] | None  # where the weights came from and what was adapted
    weights_run: int | None = None  # the run `run:` weights were read from (Pretrained.run_id)


def prepare_run(
    exp: Experiment, runs: StoredRuns, reporter: Reporter, fresh: bool = True
) -> Prepared:
    """Device, data and model of `exp`; a `fresh` run starts from model.weights (a resumed
    one from its own checkpoint)."""
    device = pick_device(exp.run.device)
    want = exp.run.threads
    free = contention.free_cores() if device.type == "cpu" or want == "auto" else None
    threads = set_threads(auto_threads(free) if want == "auto" else want)
    crowded = crowding(threads, free) if device.type == "cpu" else None
    start = pretrained.resolve(exp.model, runs)
    # Read (or downloaded) first: a download that fails is over before the data loads.
    weights = start.fetch() if start and fresh and exp.model.transfer != "scratch" else None
    data, warnings = load_run_data(exp, start, reporter)
    for warning in warnings:
        reporter.log(f"warning: {warning}")
    check_batch_fits(exp.train.batch_size, data)
    check_augment(exp.augment, data.shape, exp.train.batch_size, data.name)
    check_target_measured(exp.target.accuracy, exp.data.val_fraction, data)
    check_classes(data, exp.data.limit)
    model = build_checked(exp, data, device, reporter, fresh)
    if start is None:
        return Prepared(device, threads, free, crowded, data, model, None)
    if weights is not None and exp.model.head == "keep":
        check_kept_head(start, data)
    notes = start_weights(model, exp.model, start.source, weights)
    checkpoint.restore_buffers(model, start.buffers)  # a run's, read by fetch: as it left them
    # What the weights expect of the images, for `dlperf doctor` to hold the data against.
    expects = {"image_size": start.image_size, "mean": start.mean, "std": start.std}
    origin: dict[str, Any] = {"weights": start.source, "mode": exp.model.transfer, "notes": notes}
    origin["expects"] = {k: list(v) if isinstance(v, tuple) else v for k, v in expects.items()}
    origin |= {"warnings": warnings}
    return Prepared(device, threads, free, crowded, data, model, origin, start.run_id)


def build_checked(
    exp: Experiment,
    data: ImageData,
    device: torch.device,
    reporter: Reporter | None = None,
    fresh: bool = True,
) -> torch.nn.Module:
    """The experiment's model (`build_model`), put through every check `dlperf run` makes of
    it before recording the run: build_model's dry checks, then the run's own batch size and
    the evaluation splits' last batches. `prepare_run` and a sweep's up-front check
    (`first_refused`) both call this, so that the checks' forwards, in number and order, are
    the same: a model that made a layer at its fifth forward (the batch-size check's) was
    refused by `run` and met by a sweep only inside the point's run, stored as failed."""
    model = build_model(exp, data, device, reporter, fresh)
    name = f"'{exp.model.name}'"
    # The batch size this run trains at, which a scale study's check of the model
    # (build_model) does not know: a forward that breaks at it, refused before the record
    check_run_batch(model, exp.train.batch_size, data.shape, name, device)
    # and the evaluation splits' last batches, which are not dropped: a .squeeze() forward
    # failed at a val split's last image, after its first epoch trained
    splits = {"val": len(data.val.labels), "test": len(data.test.labels)}
    for size, where in eval_remainders(exp.train.batch_size, splits).items():
        check_run_batch(model, size, data.shape, name, device, where)
    return model


def checked_alike(exp: Experiment) -> str:
    """What `build_checked` reads of `exp` besides its data: two experiments of one data set
    and the same key are checked alike, so a sweep builds and checks one model for both.
    The model section, the batch size, and the run settings the dry checks try the model in
    (a sweep over run.channels_last checked every point at the first point's value)."""
    run = exp.run
    settings = [run.seed, run.precision, run.compile, run.channels_last, run.checkpoint]
    return json.dumps([exp.model.model_dump(mode="json"), exp.train.batch_size, settings])


def check_profile_fits(exp: Experiment, data: ImageData, epochs_done: int = 0) -> None:
    """run.profile's window fits the steps a run of `exp` trains on `data` after `epochs_done`
    epochs (a resumed run trains what is left), counted as `train` counts them: checked before
    the run is recorded, so that a window too long stores nothing."""
    per_epoch = steps_per_epoch(len(data.train), exp.train.batch_size)
    check_fits(exp.run, (exp.train.epochs - epochs_done) * per_epoch)


def first_refused(
    exps: Sequence[Experiment],
    runs: StoredRuns,
    reporter: Reporter | None = None,
    named: Callable[[int], str] | None = None,
) -> tuple[int, UserError] | None:
    """The first of `exps` that `prepare_run` would refuse before recording its run (its index
    and the error), None when none would: a sweep checks its points so before the first one
    runs. Weights are resolved, not fetched or loaded; models are built on the CPU.
    Experiments of the same data share one load of it, held only while they are checked, and
    one build of each model on it; `reporter` hears each load (a big image folder's takes
    minutes). What a model itself raises goes on, noted with `named(index)`, its point."""
    groups: dict[str, list[int]] = {}
    for index, exp in enumerate(exps):
        # The weights set the resolution and statistics; torchvision's, by the model's name.
        weights = [exp.model.weights, exp.model.name] if exp.model.weights else None
        data_key = json.dumps([exp.data.model_dump(mode="json"), weights])
        groups.setdefault(data_key, []).append(index)
    first: tuple[int, UserError] | None = None
    for indices in groups.values():
        data: ImageData | None = None
        start: pretrained.Pretrained | None = None  # the group's weights: one model.weights
        built: set[str] = set()
        for index in indices:
            exp = exps[index]
            try:
                if data is None:
                    start = pretrained.resolve(exp.model, runs)
                    data, _ = load_run_data(exp, start, reporter)
                check_unrecorded(exp, data, start, built)
            except UserError as e:
                if first is None or index < first[0]:
                    first = (index, e)
                break  # the group's later points are no earlier than this one
            except Exception as e:  # the model's own error ("the model raised"): whose?
                if named is not None:
                    note_where(e, named(index))
                raise
    return first


def check_unrecorded(
    exp: Experiment, data: ImageData, start: pretrained.Pretrained | None, built: set[str]
) -> None:
    """Refuse `exp` as `prepare_run` would before recording its run, on its `data` (as
    `load_run_data` loads it with the resolved weights `start`): for a command that checks
    every run it will make before it stores anything (a sweep's points, a distill study's
    labelled stages). The model is built and dry-run on the CPU unless `built` holds its
    `checked_alike` key (checked on this data already); the key is added."""
    if start and exp.model.transfer != "scratch" and exp.model.head == "keep":
        check_kept_head(start, data)  # a stopped run's names come with its weights
    check_batch_fits(exp.train.batch_size, data)
    check_augment(exp.augment, data.shape, exp.train.batch_size, data.name)
    check_target_measured(exp.target.accuracy, exp.data.val_fraction, data)
    check_profile_fits(exp, data)
    check_classes(data, exp.data.limit)
    pick_device(exp.run.device)  # a device this host lacks is refused here too
    model_key = checked_alike(exp)
    if model_key not in built:
        # On the CPU: a sweep's parent process holds no accelerator memory that its workers
        # need (what only a device refuses, its memory, fails the run). The run's own
        # checks, each forward of them: see build_checked.
        build_checked(exp, data, torch.device("cpu"))
        built.add(model_key)


def load_run_data(
    exp: Experiment, start: pretrained.Pretrained | None, reporter: Reporter | None = None
) -> tuple[ImageData, list[str]]:
    """The experiment's data as its runs see it: at the resolution and with the statistics of
    its starting weights `start`, where the config does not set them; and warnings (the
    reader's notes on the set's files first)."""
    data = load_data(pretrained.data_config(exp.data, start), reporter)
    return data, [*data.notes, *pretrained.apply_statistics(data, exp.data, start)]


def as_run(
    exp: Experiment, runs: StoredRuns, reporter: Reporter | None = None
) -> tuple[Experiment, ImageData, list[str]]:
    """`exp` with the resolution and statistics its model.weights imply written into its data
    section where the config leaves them unset (so that runs derived from it see the same
    images without the weights: scale workers, which have no store to resolve run:ID with,
    and a distill study's students); its data, loaded once (`reporter` told, as `run` is), and
    warnings."""
    start = pretrained.resolve(exp.model, runs)
    data, warnings = load_run_data(exp, start, reporter)
    if start is None:
        return exp, data, warnings
    update: dict[str, object] = {}
    if exp.data.image_size is None and start.image_size is not None:
        update["image_size"] = data.shape[-1]
    for key in ("mean", "std"):
        if getattr(exp.data, key) is None and getattr(start, key) is not None:
            update[key] = list(getattr(data, key))
    if not update:
        return exp, data, warnings
    config = exp.to_dict()
    config["data"].update(update)
    return Experiment.model_validate(config), data, warnings


def start_weights(
    model: torch.nn.Module, cfg: ModelConfig, source: str, weights: pretrained.StateDict | None
) -> list[str]:
    """Load `weights` (if any) and freeze the backbone for feature extraction; notes on what
    was adapted."""
    keep = cfg.head == "keep"
    notes = transfer.load_weights(model, weights, source, keep) if weights is not None else []
    if cfg.transfer == "feature-extract":
        transfer.freeze_backbone(model)
        notes.append("backbone frozen: only the head trains")
    return notes


def check_kept_head(start: pretrained.Pretrained, data: ImageData) -> None:
    """Refuse a head kept from weights whose classes the data names otherwise, or orders
    otherwise (an npz's classes, a folder renamed): kept by position, each output would stand
    for another class than it was trained on. Compared where both name their classes and
    count as many (another count is told as the head's width, as it loads)."""
    trained, now = start.classes, data.classes
    if not trained or not now or len(trained) != len(now) or trained == now:
        return
    raise UserError(
        f"{start.source}'s head is of classes {few(trained)}; {data.name} has {few(now)}: kept, "
        "its outputs would be taken for other classes than they were trained on",
        f'set model.head = "new" to train a head for these classes, or give the data the '
        f"classes of {start.source} in its order",
    )


def _own_kwargs(kwargs: dict[str, Any], data: ImageData) -> dict[str, Any]:
    """model.kwargs less num_classes and in_channels, which dlperf gives from `data`: a value
    of the user's that disagrees with the data is refused, one that agrees is the same."""
    classes, channels = data.num_classes, data.shape[0]
    hint = "drop model.kwargs.{}: dlperf sizes the model from the data; or change the data"
    said = f"{data.name} has {classes} class{'es' if classes != 1 else ''}"
    check_automatic(kwargs, "num_classes", classes, said, hint.format("num_classes"))
    said = f"{data.name} images have {channels} channel{'s' if channels != 1 else ''}"
    check_automatic(kwargs, "in_channels", channels, said, hint.format("in_channels"))
    return without_automatic(kwargs)


def check_gradients_on(before: bool) -> None:
    """Gradients must be on as a model is built to be trained: a model file that turns them
    off for the whole process (torch.set_grad_enabled(False) at its top level) would fail the
    first step in torch's traceback, and the dry backward, which turns them on for itself,
    cannot see it. `before`: whether they were on before the model was built (off, the caller
    turned them off: dlperf.run inside torch.no_grad()). Inference mode is told first: it keeps
    every tensor out of autograd even with gradients turned on inside it, so the no_grad fix
    (torch.set_grad_enabled(True)) would end at the dry backward blaming the model."""
    if torch.is_inference_mode_enabled():
        raise UserError(
            "torch.inference_mode() is on: dlperf.run trains, which needs autograd",
            "call it outside the inference_mode block",
        )
    if torch.is_grad_enabled():
        return
    if before:
        raise UserError(
            "gradients are off as training starts: the model file turns them off "
            "(torch.set_grad_enabled(False) at import, or in its factory)",
            "remove it or guard it: with torch.no_grad(): ..., or under if __name__ == '__main__':",
        )
    raise UserError(
        "gradients are off as training starts: they were off before the model was built "
        "(torch.set_grad_enabled(False), or a torch.no_grad() block around the call)",
        "train with them on: torch.set_grad_enabled(True)",
    )


# torch's words for a dtype mismatch: "mat1 and mat2 must have the same dtype" (linear, RNN's
# "input dtype"), "Input type (float) and bias type (c10::Half)" (convolution), "expect
# parameter to have scalar type of Float" (norms); not a TypeError's own "TypeError: ...".
_DTYPE_MISMATCH = re.compile(r"dtype|scalar type|type \(")


def not_float32(
    model: torch.nn.Module, name: str, error: str, precision: str | None = "fp32"
) -> UserError | None:
    """The error for model `name`, whose forward of float32 images failed with `error`, when
    its floating parameters are of another dtype: all of them (built with .double() or
    .half()), or some where `error` is torch's of a dtype (a head alone .half(): "mat1 and mat2
    must have the same dtype"), the first odd one named as `dlperf analyze` names it. torch's
    error blamed the images. None otherwise: a model of mixed dtypes may fail for its shapes.
    `precision` (run.precision) is the run's: one in half precision already is told that it
    casts the model, not to be set; None (export, which does not train) says neither."""
    # Complex ones too: a complex64 weight beside float32 ones was blamed on the images. Walked
    # without recursion: called on a failed forward, which may be a model nested too deep for it
    params = (p for _, p in named_parameters(model))
    dtypes = {p.dtype for p in params if p.is_floating_point() or p.is_complex()}
    if not dtypes:
        return None
    if torch.float32 in dtypes:
        odd = other_dtype(model, torch.float32) if _DTYPE_MISMATCH.search(error) else None
        if odd is None:
            return None
        dtype, which = odd
        return UserError(
            f"model {name}: its {which} are {dtype}, but dlperf feeds it float32 images",
            "build every layer in float32 (no .half(), .double() or .to(dtype) on one of "
            "them), or cast to the layer's dtype in forward before it: x.to(layer.weight.dtype)",
        )
    other = sorted(str(d).removeprefix("torch.") for d in dtypes)
    half = ""
    if precision == "fp32":
        half = 'to train in half precision set run.precision = "fp16" or "bf16", which casts '
        half += "as it trains"
    elif precision is not None:
        half = f'run.precision = "{precision}" casts it to half precision as it trains'
    return UserError(
        f"model {name}: its parameters are {' and '.join(other)}, but dlperf feeds it "
        "float32 images",
        "build it in float32 (no .double() or .half(), no torch.set_default_dtype)"
        + (f"; {half}" if half else ""),
    )


def check_not_quantized(model: torch.nn.Module, name: str) -> None:
    """Refuse model `name` when a quantized module (quantize_dynamic's Linear) leaves it
    nothing to train, naming that module as `dlperf analyze` does: its int8 weights are
    packed, no parameters, so the line was "has no parameters to train (give it at least one
    layer with weights (nn.Linear ...))", for a model made of Linear layers."""
    if any(p.requires_grad for p in model.parameters()):
        return  # the float layers train; quantized ones beside them are the model's choice
    for where, module in model.named_modules():
        package = type(module).__module__
        if package.startswith(QUANTIZED) and ".reference" not in package:
            kind = f"{package.partition('.modules')[0]} {type(module).__name__}"
            what = f"its module {where}" if where else "the model itself"
            raise UserError(
                f"model {name}: {what} ({kind}) is a quantized module, which dlperf "
                "cannot train: its int8 weights are packed, no parameters, and the model has "
                "no other parameters to train",
                "train the float model, as built before quantize_dynamic, and quantize it "
                "after training",
            )


def build_model(
    exp: Experiment,
    data: ImageData,
    device: torch.device,
    reporter: Reporter | None = None,
    fresh: bool = True,
) -> torch.nn.Module:
    """The experiment's model, seeded, on `device`, sized for `data` and materialized, for a
    new run (not `fresh`: a stored run's, resumed or exported, whose weights are loaded next).
    A model that changes torch's thread count, the stop signals' handlers or the working
    directory as it is built has them set back (`reporter` told, as of a child process it
    started)."""
    threads = torch.get_num_threads()  # the run's, set by prepare_run (or a worker)
    grad_before = torch.is_grad_enabled()
    try:
        with noting() as notes:  # what a model file changed in the process, put back
            model = create_model(
                exp.model.name,
                num_classes=data.num_classes,
                in_channels=data.shape[0],
                # After a model file's import, which may seed torch itself: run.seed decides
                # the initial weights (of a resumed or exported run's rebuild alike)
                factory_seed=exp.run.seed,
                **_own_kwargs(exp.model.kwargs, data),
            )
        if reporter is not None:
            for note in notes:
                reporter.log(f"warning: {note}")
        check_gradients_on(grad_before)
    except BaseException:
        # The caller's grad mode back, whatever the model file did to it: refused, a file
        # that turned gradients off left them off in the caller's process (a notebook's), and
        # its next sound dlperf.run was refused as "off before the model was built".
        torch.set_grad_enabled(grad_before)
        raise
    if torch.get_num_threads() != threads:  # the model's own torch.set_num_threads
        if reporter is not None:
            reporter.log(
                f"warning: the model set torch's thread count to {torch.get_num_threads()}; "
                f"set back to run.threads ({threads})"
            )
        # Its checks and its training on the count the run records, not the model's.
        torch.set_num_threads(threads)
    name = f"'{exp.model.name}'"
    try:
        with noting() as notes:  # what its forwards changed in the process, put back (Kept)
            try:
                _check_model(model, exp, data, device, reporter, fresh)
            finally:
                if reporter is not None:
                    for note in dict.fromkeys(notes):  # each once: misfit's copies say it too
                        reporter.log(f"warning: {note}")
    except RecursionError:  # walking its modules (.parameters(), .to()) or its forward
        refused = too_deep(model, f"model {name}")
        if refused is None:
            raise
        raise refused from None
    seed_generators(exp.run.seed)  # the dry forward must not shift the training RNG streams
    return model


def _check_model(
    model: torch.nn.Module,
    exp: Experiment,
    data: ImageData,
    device: torch.device,
    reporter: Reporter | None,
    fresh: bool,
) -> None:
    """The dry checks of `build_model` on its `model`, on `device`: one line of what is wrong
    with the model for `data`, before anything is recorded."""
    rejects = f"the model rejects {data.name} images of shape {data.shape}"
    name = f"'{exp.model.name}'"
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        # model.to(device) cannot copy out of tensors that hold no values: a traceback
        raise UserError(
            f"model {name} has its parameters on the meta device: they hold no values",
            "materialise them in the factory, e.g. model.to_empty(device='cpu') and then "
            "initialise them",
        )
    check_not_quantized(model, name)
    # Refused where the forward calls layers kept in a plain list (.to(device) does not move
    # them: on a GPU the forward fails, told as this), warned of where it does not
    with refusing_unregistered(model, f"model {name}") as kept_out:
        try:
            output = dry_forward(
                model.to(device), data.shape, rejects, device, what=f"model {name}"
            )
        # not its dtype, the images' size: out of memory, misfit's forwards at other sizes
        # would only run out again (and copy the model first)
        except (TooDeep, ReadFailed, MissingDevice, Grown, MemoryRanOut):
            raise
        except UserError as e:
            refused = not_float32(model, name, e.message, exp.run.precision) or misfit(
                model, data.shape, data.name, device, exp.data.image_size, data.num_classes
            )
            raise refused or e from None
    for note in kept_out:
        if reporter is not None:
            reporter.log(f"warning: {note}")
    scores = check_classifier(model, output, data.num_classes, name)
    if fresh:  # a stored run's rebuild (export, --resume) has its trained weights loaded next:
        # its initial ones (torch.empty's, whatever memory held) may be NaN, as the run's were not
        check_finite(model, scores, data.shape, name, device)
    # What the training step sees: some models (torchvision's googlenet and inception_v3)
    # return more than their scores in training mode only.
    output = dry_forward(model, data.shape, rejects, device, training=True, what=f"model {name}")
    check_classifier(model, output, data.num_classes, name, "in training mode")
    check_scaled_dtypes(model, name, exp.run.precision)
    unused = dry_backward(model, data.shape, name, device)
    if unused and reporter is not None:  # a DDP worker says its own (find_unused_parameters)
        reporter.log(
            f"warning: {no_gradient(name, unused, 3)}: if no image reaches them, they keep "
            "their initial values (use them in the forward, or freeze them: requires_grad = "
            "False)"
        )
    # A batch of one image, which the two-image checks cannot see (batch norm): here, so that
    # a sweep's up-front check and every trainer refuse it alike.
    check_batch_trains(model, exp.train.batch_size, data.shape, name, device)
    # Another batch size, run.compile and run.channels_last, as the run will give them
    check_run_form(model, data.shape, name, device, exp.run.compile, exp.run.channels_last)
    if exp.run.checkpoint:  # a state the first checkpoint could not be loaded from
        check_checkpointable(model)
        if fresh:  # a stored run's weights are loaded next, by fit_weights, which tells them
            check_reloadable(model, name)
