"""Export a registry model or a stored run to ONNX, check the file, and prove parity.

Parity compares PyTorch eager and ONNX Runtime on the same inputs (a seeded random batch,
and the run's test images when there is a run), each in the chunks of the graph's batch
size, element-wise, with NumPy's `allclose` rule |onnx - torch| <= atol + rtol * |torch|, and
reports top-1 agreement beside it. A batch outside the tolerance is scored by PyTorch again:
a forward that differs from itself (random ops, or state it changes on each call, which is
named) is blamed, not ONNX Runtime.
"""

from __future__ import annotations

import contextlib
import errno
import io
import linecache
import os
import re
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.jit._trace import TracerWarning

from dlperf import stopping
from dlperf.deploy import check_out, runtime
from dlperf.deploy import meta as meta_io
from dlperf.deploy.meta import ModelMeta, Preprocess
from dlperf.deploy.runtime import exported_batch, run_onnx
from dlperf.engine.checks import (
    BEFORE_SOFTMAX,
    PROBABILITIES,
    check_dense,
    check_float,
    dry_forward,
    probabilities,
)
from dlperf.errors import (
    CheckFailed,
    UserError,
    error_text,
    interrupted,
    out_of_memory,
    raised_by_model,
)
from dlperf.formatting import few
from dlperf.parsing import absolute_model_name, is_file_spec, one_line
from dlperf.paths import writing
from dlperf.progress import NullReporter, Reporter
from dlperf.store import RunStore
from dlperf.system import torch_cpp_warnings_quiet, usable_cores

INPUT, OUTPUT = "input", "logits"
IMAGENET_SHAPE = (3, 224, 224)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
RANDOM_BATCH, REAL_IMAGES = 8, 64


@dataclass
class Source:
    """A model to export, its metadata, and real preprocessed images to check it on."""

    model: nn.Module
    meta: ModelMeta
    images: torch.Tensor | None = None  # (N, C, H, W) float, normalised as in training
    warnings: list[str] = field(default_factory=list)  # said by export


def from_registry(
    name: str,
    input_shape: tuple[int, ...] | None = None,
    num_classes: int | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    *,
    from_user: bool = False,
) -> Source:
    """A registry model with random weights, built with `model_kwargs` as analyze builds it.
    Without `input_shape`: ImageNet-style input, 3x224x224 with ImageNet's mean and std; with
    it: mean 0.5 and std 0.5 per channel. `from_user`: the number of classes is the user's
    (export.num_classes or model.kwargs.num_classes), checked as analyze checks it: refused
    for a factory that takes none, warned of where the model's output is of another width.
    Otherwise it is the caller's own (bench's: the exported graph's width), not checked."""
    from dlperf.analytic.counting import (
        ignores_classes,
        other_width,
        refuse_unused_classes,
        unused_classes,
    )
    from dlperf.models import create_model
    from dlperf.models.registry import check_automatic, refusing_unregistered, without_automatic
    from dlperf.models.transfer import uncompiled

    kwargs = model_kwargs or {}
    shape = input_shape or IMAGENET_SHAPE
    # model.kwargs.num_classes sizes the head unless export.num_classes gives another number
    # (check_automatic refuses that, and a non-integer); in_channels must be the input's.
    given = kwargs.get("num_classes")
    from_kwargs = num_classes is None and type(given) is int
    if "num_classes" in kwargs and not from_kwargs:
        said = (
            "not a whole number" if num_classes is None else f"export.num_classes is {num_classes}"
        )
        hint = "give the number of classes once, as export.num_classes or model.kwargs.num_classes"
        check_automatic(kwargs, "num_classes", num_classes or 0, said, hint)
    num_classes = given if from_kwargs else num_classes
    option = "model.kwargs.num_classes" if from_kwargs else "export.num_classes"
    if from_user and num_classes is not None:  # before the build: the factory would drop it
        refuse_unused_classes(name, num_classes, option)
    said = f"the input {list(shape)} has {shape[0]} channel{'s' if shape[0] != 1 else ''}"
    hint = "drop model.kwargs.in_channels: export takes it from export.input (C,H,W)"
    check_automatic(kwargs, "in_channels", shape[0], said, hint)
    mean, std = (IMAGENET_MEAN, IMAGENET_STD) if input_shape is None else ((0.5,) * shape[0],) * 2
    sized = {} if num_classes is None else {"num_classes": num_classes}
    # The same random weights on every export of this name: seeded just before the factory,
    # after a model file's import (a file that seeds torch as it is imported overrode a seed
    # set before, and exported its own weights instead)
    with _compiling_nothing():  # a factory that calls its compiled module: see `from_run`
        model = create_model(
            name, in_channels=shape[0], factory_seed=0, **sized, **without_automatic(kwargs)
        )
    model = uncompiled(model)  # a torch.compile'd one: see `from_run`
    pre = Preprocess(size=(shape[1], shape[2]), channels=shape[0], mean=mean, std=std)
    meta = ModelMeta("classification", name, INPUT, shape, pre)
    _record_build(meta, name, kwargs)
    what = f"model '{name}'"  # in every refusal of the dry forward, not "the model"
    with refusing_unregistered(model, what) as kept_out:  # as a run refuses them
        try:
            output = dry_forward(model, shape, f"{what} rejects input of shape {shape}", what=what)
        except UserError as e:  # a model built in float64 or half: told so, as a run tells it
            from dlperf.engine.build import not_float32

            told = (
                not_float32(model, f"'{name}'", e.message, None) if type(e) is UserError else None
            )
            raise told or e from None
    # The exporter and the parity check take one tensor of scores, as `dlperf infer` reads it.
    if not isinstance(output, torch.Tensor):
        raise UserError(
            f"model '{name}' returns a {type(output).__name__}, not a tensor; an exported "
            "classifier returns one tensor of scores, shape [batch, classes]",
            "return the class scores alone",
        )
    check_dense(output, f"model '{name}' returns", EXPORTED_SCORES)
    unused = None
    if from_user and num_classes is not None:
        width = output.shape[-1] if output.dim() >= 2 else None
        ignored = other_width(width, output.dim(), num_classes) and ignores_classes(
            name, shape, num_classes, width or 0, without_automatic(kwargs)
        )
        unused = unused_classes(width, output.dim(), num_classes, option, ignored)
    return Source(model, meta, warnings=[*kept_out, *([] if unused is None else [unused])])


def _compiling_nothing() -> contextlib.AbstractContextManager[None]:
    """Every torch.compile wrapper run as the module it wraps, compiling nothing, for the
    block (torch's own switch; process-wide, as torch keeps it, and put back after): export
    builds a model to take the module inside, never to run the wrapper's compiled code."""
    return torch.compiler.set_stance("force_eager")  # type: ignore[no-any-return]


# Export trains nothing: a notebook's torch.no_grad() or torch.inference_mode() around it must
# not reach the build's training checks (their lines say "training"), nor make the weights
# inference tensors the exporter cannot trace. Both modes are thread-local.
@torch.inference_mode(False)
@torch.enable_grad()
def from_run(store: RunStore, run_id: int, reporter: Reporter | None = None) -> Source:
    """A stored run's model with its trained weights, its data's preprocessing and labels,
    and up to 64 of its test images; `reporter` hears its data's load (a big image folder's
    takes minutes)."""
    from dlperf.config import stored_experiment
    from dlperf.data.augment import normalize
    from dlperf.data.sources import decode_file
    from dlperf.engine import checkpoint, pretrained
    from dlperf.engine.build import build_model, load_run_data
    from dlperf.experiment.run import model_file_changed, model_file_kept, telling_changed
    from dlperf.models.registry import rebuilding
    from dlperf.models.transfer import uncompiled
    from dlperf.sweep.runner import weights_hint

    record = store.get_run(run_id)
    checkpoint.check_trained(store, record, "to export")
    path = checkpoint.run_checkpoint(
        store,
        run_id,
        "file to export",
        weights_hint(store, record)
        or "train with run.checkpoint = true and let at least one epoch finish",
    )
    # The file must be this run's: a checkpoint copied over it (another store's run 1, say)
    # would export weights that pass parity yet are not the run's.
    owner = checkpoint.Owner(store.id, run_id, record.config_hash)
    saved = checkpoint.load(path, owner)
    weights = saved["model"]
    exp = stored_experiment(record.config, f"run {run_id}")
    data, _ = load_run_data(exp, pretrained.resolve(exp.model, store), reporter)
    # A factory's torch.compile(module) is rebuilt as the run built it, the wrapper that its
    # checkpoint's keys name (`_orig_mod.`), and checked as a run checks it, but compiled for
    # none of those dry forwards: export takes the module inside once its weights are loaded
    # (below). Compiled, inductor's build wrote torch's log line ("No CUDA runtime is found")
    # before dlperf's first on a CPU machine, for a compile nothing used. Rebuilding: its
    # model file gone, the line says to restore it, not "use another".
    # A file edited since that now fails its build, checks or weights: the change is said
    # before the failure, which alone lost it (the warning below is said once it passed).
    told = reporter or NullReporter()
    # What its model file did to the process as the run was rebuilt, put back: the same lines
    # a run of it says, among the source's warnings (export tells them, in --json too)
    kept = _WarningsKept(told)
    with telling_changed(record, lambda said: told.log(warned(said))):
        with rebuilding(f"run {run_id}"), _compiling_nothing(), kept.told_if_failed():
            model = build_model(exp, data, torch.device("cpu"), kept, fresh=False)
        same = model_file_kept(record)  # a factory's own change, not the file's: told so
        checkpoint.fit_weights(model, weights, run_id, exp.model.name, data.num_classes, same)
        # Its non-persistent buffers too, which the state dict leaves out: a forward reading
        # one that training changed exported its starting value, and parity compared with the
        # same.
        checkpoint.restore_buffers(model, saved.get(checkpoint.BUFFERS))
    # The module inside a factory's torch.compile(module), its weights now the run's: the
    # exporters failed on the wrapper with a dynamic batch, in torch's words (its forward takes
    # *args, which dynamic_shapes cannot match; TorchScript cannot trace dynamo's frames), and
    # named its weights `_orig_mod.`; bench races it as "torch eager", as it is.
    model = uncompiled(model)
    test = data.test
    n = min(len(test), REAL_IMAGES)
    if test.images is not None:
        raw = test.images[:n]
    else:
        raw = torch.stack([decode_file(f, data.shape[-1]) for f in test.files[:n]])
    stats = (torch.tensor(data.mean).view(-1, 1, 1), torch.tensor(data.std).view(-1, 1, 1))
    images = normalize(raw, *stats) if n else None
    pre = Preprocess(
        size=(data.shape[1], data.shape[2]), channels=data.shape[0], mean=data.mean, std=data.std
    )
    # The names the run was trained on: an image folder's classes renamed since would shift
    # every label. A stopped run has no summary; its checkpoint keeps them. A run stored
    # before either kept them has the data's names as they are now.
    trained = (record.trained.data or {}).get("class_names") or saved.get("classes")
    labels = trained or list(data.classes)
    meta = ModelMeta("classification", exp.model.name, INPUT, data.shape, pre, labels, run_id)
    meta.run_status, meta.epochs = record.status, exp.train.epochs
    _record_build(meta, exp.model.name, exp.model.kwargs)
    meta.epoch = saved.get("progress", {}).get("epoch")
    changed = model_file_changed(record)
    return Source(model, meta, images, [*([] if changed is None else [changed]), *kept.said])


class _WarningsKept(NullReporter):
    """A stored run's rebuild's reporter: its warning lines kept (without "warning: ") for
    the source's warnings, its other lines passed to `told`."""

    def __init__(self, told: Reporter) -> None:
        self.told = told
        self.said: list[str] = []

    def log(self, message: str) -> None:
        if message.startswith("warning: "):
            self.said.append(message.removeprefix("warning: "))
        else:
            self.told.log(message)

    @contextlib.contextmanager
    def told_if_failed(self) -> Iterator[None]:
        """The lines kept so far told as the block fails: they may explain the failure (the
        file's torch.set_default_dtype), and with it were lost."""
        try:
            yield
        except BaseException:
            for said in dict.fromkeys(self.said):
                self.told.log(warned(said))
            raise


def _record_build(meta: ModelMeta, name: str, kwargs: Mapping[str, Any]) -> None:
    """Keep in `meta` what rebuilds the network (`infer bench` races it): without its kwargs
    the factory's defaults (another width, another output) were timed in its place, and a
    relative model file was looked up in whichever directory bench ran in."""
    meta.model_kwargs = dict(kwargs)
    meta.model_path = absolute_model_name(name) if is_file_spec(name) else None


def unfinished(meta: ModelMeta) -> str | None:
    """What an export of a run that did not finish must say: which epoch's weights it
    ships, and how the run ended (killed, failed, lost, or still running)."""
    if meta.run_id is None or meta.run_status in (None, "finished"):
        return None
    epoch = "" if meta.epoch is None else f", epoch {meta.epoch} of {meta.epochs}"
    return (
        f"run {meta.run_id} did not finish (it is {meta.run_status}): the model holds the "
        f"weights of its last checkpoint{epoch}"
    )


def resolve(
    spec: str,
    open_store: Callable[[], RunStore],
    input_shape: tuple[int, ...] | None = None,
    num_classes: int | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    reporter: Reporter | None = None,
) -> Source:
    """RUN_ID (all digits) or a registry name built with `model_kwargs`; the store is opened
    only for a run, whose data's load `reporter` hears. What a model file did to the process
    as it was built, put back, is among the source's warnings (`export` tells them)."""
    from dlperf.models.registry import noting

    if spec.isdigit():
        if input_shape is not None or num_classes is not None:
            raise UserError(
                "export.input and export.num_classes apply to registry models",
                "a run's input and classes come from its data",
            )
        return from_run(open_store(), int(spec), reporter)
    # Collected, not warned: a RuntimeWarning raised inside the factory's call (python -W
    # error) failed it as "factory ... failed", for a change dlperf had already put back
    with noting() as notes:
        try:
            source = from_registry(spec, input_shape, num_classes, model_kwargs, from_user=True)
        except Exception:
            # Told before the failure, which they may explain (float64 weights from the
            # file's torch.set_default_dtype): among the warnings `export` tells, they were
            # lost with it
            for said in dict.fromkeys(notes):
                (reporter or NullReporter()).log(warned(said))
            raise
    source.warnings[:0] = dict.fromkeys(notes)
    return source


def warned(said: str) -> str:
    """How export tells a warning: one line, "warning: ..."."""
    return one_line(f"warning: {said}")


def check_model(path: Path) -> None:
    """`onnx.checker` with full shape inference; an invalid file is bad input."""
    import onnx

    meta_io.regular_file(path, "give an ONNX file (`dlperf export` writes one)")
    if not path.is_file():
        raise UserError(f"no model file {path}")
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as e:  # ValidationError, InferenceError, DecodeError for a non-ONNX file
        raise UserError(f"{path} fails the ONNX checker: {_first_line(e)}") from None


def _bfloat16_ops(proto: Any) -> list[str]:
    """The operator types, in graph order, that take bfloat16 tensors cast for them or held
    as weights in bfloat16: what torch.autocast(dtype=torch.bfloat16) in a forward leaves in
    the graph (Cast to bfloat16 before each Conv and Gemm), or a .bfloat16() layer. ONNX
    defines some of them for float types other than bfloat16 alone (Conv)."""
    import onnx

    bf16 = onnx.TensorProto.BFLOAT16
    names = {t.name for t in proto.graph.initializer if t.data_type == bf16}
    for node in proto.graph.node:
        if node.op_type == "Cast" and any(a.name == "to" and a.i == bf16 for a in node.attribute):
            names.update(node.output)
    ops: list[str] = []
    for node in proto.graph.node:
        if node.op_type != "Cast" and names.intersection(node.input) and node.op_type not in ops:
            ops.append(node.op_type)
    return ops


EXPORTED_SCORES = "an exported classifier's scores, one dense tensor of shape [batch, classes]"
"""What an exported model is to return, in a refusal of scores of another layout."""


def check_scores(output: object, name: str, batch: int) -> torch.Tensor:
    """What model `name` returned in eval mode for `batch` images must be what `dlperf infer`
    and `dlperf serve` rank as probabilities: one tensor of float scores, a row per image, on
    the CPU the export runs on; the rule `dlperf run` holds a classifier to, in its words.
    Returns the scores."""
    returns = f"model '{name}' returns in eval mode"
    if not isinstance(output, torch.Tensor):
        raise UserError(
            f"{returns} a {type(output).__name__}, not a tensor; an exported classifier "
            "returns one tensor of scores, shape [batch, classes]",
            "return the class scores alone",
        )
    check_dense(output, returns, EXPORTED_SCORES)  # before its shape is read
    if output.dim() == 0:  # no row per image: nothing for `dlperf infer` to rank
        raise UserError(
            f"{returns} a single number (shape []); an exported classifier returns one "
            "tensor of scores, shape [batch, classes]",
            "return the scores of each image, not their sum or mean",
        )
    runtime.check_logits(list(output.shape), returns, batch)  # as infer and serve hold a file
    if output.device.type != "cpu":
        raise UserError(
            f"{returns} its scores on the {output.device} device; export runs the model on "
            "the CPU and compares its scores with ONNX Runtime's there",
            "return them on the input's device (x.device)",
        )
    check_float(output, returns)
    if output.dtype == torch.bfloat16:
        raise UserError(
            f"{returns} torch.bfloat16 scores, which ONNX Runtime cannot hand to Python "
            "(NumPy has no bfloat16): neither the parity check nor `dlperf infer` could read them",
            "return them as float32 (y.float())",
        )
    return output


# What makes a forward's batch a constant of the graph, in the refusal and in the parity
# check's hint alike (two copies of it had drifted apart: one without len(x))
BATCH_MADE_CONSTANT = (
    "x.shape[0] turned into a Python number (len(x), float(), int(), math or NumPy of it, "
    "x.new_tensor(x.shape[0])), a branch on it, or a batch size written as a number "
    "(x.view(2, -1), torch.zeros(2, ...))"
)


def onnx_failure(error: Exception, batch: int, inputs: str, exported_at: int | None) -> str:
    """The line for an exported graph that ONNX Runtime fails to run in the parity check, on
    `batch` rows of `inputs`; `exported_at`: the example's batch where the batch is dynamic."""
    # ORT's reason may go on over lines ("... for the following indices" / "index: 0 Got: 1
    # Expected: 2"): all of them, on one, less its closing advice, which the hint replaces
    lines = [line.strip() for line in str(error).strip().splitlines()]
    text = " ".join(line for line in lines if line and not line.startswith("Please fix"))
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text) or type(error).__name__
    text = re.sub(r"/onnxruntime_src/\S+ ", "", text)  # ORT's own source file and line
    said = f"the exported graph fails in ONNX Runtime at batch {batch} ({inputs}): {text}"
    if exported_at is not None and batch != exported_at:
        said += (
            f"; the likely cause: a batch size baked into the graph (exported at batch "
            f"{exported_at}: {BATCH_MADE_CONSTANT}): export without --dynamic-batch, or use "
            "x.shape[0] as it is in tensor operations"
        )
    return said


def fixed_batch(proto: Any) -> int | None:
    """The batch size the exported graph `proto` takes only; None where its batch is dynamic
    (a named dimension), or where the graph says nothing of it."""
    inputs = [i for i in proto.graph.input if i.name == INPUT]
    dims = inputs[0].type.tensor_type.shape.dim if inputs else []
    return dims[0].dim_value if dims and dims[0].HasField("dim_value") else None


def check_batch_dynamic(proto: Any, batch: int, name: str) -> None:
    """Refuse the graph `proto` of an export asked for a dynamic batch, at example batch `batch`,
    where its input takes one batch size only. The dynamo exporter does not fail for a forward
    that makes the batch a constant (a guard on it): it fixes the input's batch at the
    example's, silently, and the parity check at batch 1 met it as ONNX Runtime's refusal."""
    fixed = fixed_batch(proto)
    if fixed is None:
        return
    example = " (the example input's)" if fixed == batch else ""
    raise _batch_made_constant(name, f"the exported graph takes batches of {fixed} only{example}")


def _batch_made_constant(name: str, so: str) -> UserError:
    """The refusal of an export asked for a dynamic batch whose graph keeps one: `so` says
    how the graph shows it."""
    return UserError(
        f"model '{name}' cannot be exported with --dynamic-batch: its forward makes the batch "
        f"a constant, so {so}: {BATCH_MADE_CONSTANT}",
        "use x.shape[0] as it is in tensor operations: y * x.shape[0], torch.tensor(x.shape[0]), "
        "x.view(x.shape[0], -1); or export without --dynamic-batch",
    )


def _check_batch_kept(
    reference: np.ndarray, candidate: np.ndarray, exported_at: int | None, name: str
) -> None:
    """Refuse an export asked for a dynamic batch whose graph, given another batch, answers
    with the example's rows (`exported_at`) where PyTorch answers with the input's. The
    TorchScript exporter (the fallback) marks the input's batch symbolic whatever the forward
    does, and keeps a batch made constant inside the graph (a Python list of x.shape[0]
    lengths for pack_padded_sequence): `check_batch_dynamic` cannot see it in the input, and
    the parity check said only "output shapes differ", exit 1."""
    rows = candidate.shape[0] if candidate.ndim else None
    if exported_at is None or rows != exported_at or reference.ndim != candidate.ndim:
        return
    if reference.shape[0] == exported_at:  # the input's batch is the example's: no sign
        return
    raise _batch_made_constant(
        name,
        f"the exported graph answers a batch of {reference.shape[0]} with {rows} rows of "
        "scores (the example input's batch)",
    )


def compare(
    reference: np.ndarray, candidate: np.ndarray, rtol: float, atol: float, at: str = ""
) -> dict[str, Any]:
    """How far ONNX Runtime's logits are from PyTorch's: max absolute and relative
    difference (relative over non-zero reference values), the allclose verdict, and the
    share of rows whose top-1 class agrees. `at`, where said, tells where the shapes
    differ ("at batch 1 (random input)")."""
    reference = reference.astype(np.float64)
    candidate = candidate.astype(np.float64)
    if reference.shape != candidate.shape:
        where = f" {at}" if at else ""
        raise CheckFailed(
            f"output shapes differ{where}: PyTorch {reference.shape}, ONNX {candidate.shape}"
        )
    if not np.all(np.isfinite(reference)):  # NaN is no measure of the gap: NaN - NaN is NaN
        raise CheckFailed(
            "PyTorch's own scores are not finite (NaN or inf): there is nothing to compare "
            "ONNX Runtime's with"
        )
    diff = np.abs(candidate - reference)
    nonzero = reference != 0
    rel = diff[nonzero] / np.abs(reference[nonzero])
    return {
        "n": len(reference),
        "max_abs_diff": float(diff.max()),
        "max_rel_diff": float(rel.max()) if rel.size else 0.0,
        "within_tolerance": bool(np.all(diff <= atol + rtol * np.abs(reference))),
        "top1_agreement": float(np.mean(candidate.argmax(-1) == reference.argmax(-1))),
    }


def _compared(
    model: nn.Module,
    session: Any,
    x: torch.Tensor,
    name: str,
    model_name: str,
    rtol: float,
    atol: float,
    exported_at: int | None,
) -> dict[str, Any]:
    """PyTorch's scores and ONNX Runtime's for the batch `x` of the input set `name`,
    compared (`compare`); `exported_at`: the example's batch where the batch is dynamic."""
    what = "random input" if name == "random" else name
    # PyTorch scores the chunks ONNX Runtime runs (image by image for a graph exported at
    # batch 1): a model whose scores depend on the batch (BatchNorm without running statistics)
    # is compared at the batch its graph answers at, not at one the graph never sees.
    step = exported_batch(session) or len(x)
    reference = _torch_scores(model, x, step, what, model_name)
    try:
        candidate = run_onnx(session, x.numpy())
    except Exception as e:  # ORT's own Fail/RuntimeException: no file of this export
        if interrupted(e):
            raise KeyboardInterrupt from e
        raise CheckFailed(onnx_failure(e, len(x), what, exported_at)) from None
    _check_batch_kept(reference, candidate, exported_at, model_name)
    at = f"at batch {len(x)} ({what})"
    result = compare(reference, candidate, rtol, atol, at)
    if not result["within_tolerance"]:
        # Before ONNX Runtime is blamed: a forward with random ops (F.dropout(training=True),
        # torch.rand_like) or one that changes state on each call (self.k += 1) differs from
        # itself, and no graph can match it. Asked only of a batch that failed, so a model
        # that passes pays no second forward.
        before = _state(model)
        again = compare(reference, _torch_scores(model, x, step, what, model_name), rtol, atol)
        if not again["within_tolerance"]:
            # Told apart by the state the second forward changed; one that changed none draws
            # at random (or keeps its state out of sight: a list, a global).
            changed = _changed(before, _state(model))
            why = (
                f"changes its {changed} on each call"
                if changed
                else "is random (torch.rand*, F.dropout(training=True), ...)"
            )
            raise CheckFailed(
                f"model '{model_name}' gives other scores each time in eval mode on one input "
                f"(by up to {again['max_abs_diff']:.3g} {at}): its forward {why}, so its parity "
                "with ONNX Runtime cannot be checked; make the forward deterministic when not "
                "self.training"
            )
    return result


def _state(model: nn.Module) -> dict[tuple[str, str], Any]:
    """The model's buffers and plain attributes (numbers, strings, dense tensors), copied, by
    kind and name: what a stateful forward changes on each call."""
    state: dict[tuple[str, str], Any] = {
        ("buffer", name): t.detach().clone() for name, t in model.named_buffers() if _dense(t)
    }
    for prefix, module in model.named_modules():
        for key, value in vars(module).items():
            if key.startswith("_"):  # nn.Module's own (_parameters, _buffers, _modules...)
                continue
            name = f"{prefix}.{key}" if prefix else key
            if isinstance(value, int | float | str):
                state["attribute", name] = value
            elif isinstance(value, torch.Tensor) and _dense(value):
                state["attribute", name] = value.detach().clone()
    return state


def _dense(t: torch.Tensor) -> bool:
    """A tensor `_changed` can compare byte by byte (not sparse, not quantized)."""
    return t.layout == torch.strided and not t.is_quantized


def _changed(before: dict[tuple[str, str], Any], after: dict[tuple[str, str], Any]) -> str:
    """What differs between two `_state`s, as "buffer 'seen'" or "attributes 'k', 'n'"; ''
    where nothing does."""
    names: dict[str, list[str]] = {}
    for kind, name in sorted(before.keys() | after.keys()):
        old, new = before.get((kind, name)), after.get((kind, name))
        if isinstance(old, torch.Tensor) or isinstance(new, torch.Tensor):
            # byte by byte: a NaN the forward left alone is the same NaN
            same = (
                isinstance(old, torch.Tensor)
                and isinstance(new, torch.Tensor)
                and (old.dtype, old.shape) == (new.dtype, new.shape)
                and torch.equal(
                    old.reshape(-1).view(torch.uint8), new.reshape(-1).view(torch.uint8)
                )
            )
        else:
            same = old is new or old == new
        if not same:
            names.setdefault(kind, []).append(f"'{name}'")
    return ", ".join(
        f"{kind}{'s' if len(them) > 1 else ''} {', '.join(them)}" for kind, them in names.items()
    )


def _torch_scores(
    model: nn.Module, x: torch.Tensor, step: int, what: str, model_name: str
) -> np.ndarray:
    """PyTorch's scores for the batch `x` of the input set `what`, `step` rows at a time."""
    try:
        with torch.no_grad():  # copies: a forward may change its input in place (x.add_(1))
            batches = [x[i : i + step] for i in range(0, len(x), step)]
            outputs = [model(b.clone()) for b in batches]
    except Exception as e:
        if interrupted(e):  # a stop that landed in an import the forward made
            raise KeyboardInterrupt from e
        if raised_by_model(e):  # the model's own: told with its frames, exit 1
            raise
        first = (error_text(e).strip().splitlines() or [""])[0]  # a library's, say
        raise CheckFailed(
            f"PyTorch fails at batch {step} ({what}): {type(e).__name__}: {first}"
        ) from None
    scores = [check_scores(y, model_name, len(b)) for y, b in zip(outputs, batches, strict=True)]
    return torch.cat(scores).numpy()


def _torch_export(
    model: nn.Module,
    example: torch.Tensor,
    out: Path,
    opset: int | None,
    dynamic_batch: bool,
    single_file: bool,
    reporter: Reporter,
    name: str,
) -> str:
    """Export with the dynamo exporter, or the TorchScript one if it fails; returns which.
    A TorchScript trace of a forward that turns a tensor into a Python value is refused
    (`_traced_constant`): the value, and any choice made on it, is the example input's."""

    def attempt(**options: Any) -> list[warnings.WarningMessage]:
        # torch_cpp_warnings_quiet: the TorchScript exporter's C++ warned of its own graph
        # (`[W... shape_type_inference.cpp] ... prim::PackPadded`) on fd 2, past `_quiet`
        with _quiet() as caught, _onnx_log_off(), torch_cpp_warnings_quiet():
            torch.onnx.export(
                model,
                (example,),
                str(out),
                input_names=[INPUT],
                output_names=[OUTPUT],
                opset_version=opset,
                **options,
            )
        return caught

    written: int | None = None  # the opset the dynamo exporter wrote where not the one asked
    try:
        attempt(
            dynamo=True,
            dynamic_shapes=({0: torch.export.Dim("batch")},) if dynamic_batch else None,
            external_data=not single_file,
            verbose=False,
        )
        if opset is None:  # nothing to check: the file is not read again
            return "dynamo"
        written = _opset(out)
        if written == opset:
            return "dynamo"
        # It writes its own opset (18) and converts it to the one asked for, keeping its own,
        # with a warning nobody sees, where it cannot (ReduceMean's axes below 18); the
        # TorchScript exporter writes the older opsets itself.
        refused: BaseException = ValueError(f"it wrote opset {written}")  # for _starved
        why = f"the dynamo exporter writes opset {written} for this model, not {opset}"
        after = f"as {why}"
    except Exception as e:  # the exporter raises many types; any failure means "fall back"
        if interrupted(e):
            # A stop that landed inside torch's lazy imports (torch._dynamo's) comes back as
            # another error (an AttributeError): the stop, not the exporter failing; the
            # fallback would have replaced the earlier export with one the user stopped.
            raise KeyboardInterrupt from e
        refused = e.__cause__ or e
        if _unwritable(refused):  # the fallback would meet the same file system
            raise refused from None
        why = f"the dynamo exporter failed ({_first_line(refused)})"
        after = f"after the dynamo exporter failed: {type(refused).__name__}"
    for left in _files(out):  # its weights file would be published as the fallback's
        left.unlink(missing_ok=True)
    try:
        caught = attempt(
            dynamo=False,
            dynamic_axes={INPUT: {0: "batch"}, OUTPUT: {0: "batch"}} if dynamic_batch else None,
        )
    except Exception as e:
        if interrupted(e):  # as above: the stop, not the fallback failing
            raise KeyboardInterrupt from e
        if _unwritable(e):
            raise
        if (starved := _starved(e, refused)) is not None:
            # No fault of the model's: the command line's out-of-memory line, naming a limit
            raise starved from None
        if written is not None:  # neither exporter writes the opset asked for
            raise UserError(
                f"export.opset {opset}: the exporter wrote opset {written} instead (torch "
                f"{torch.__version__} cannot convert this model to opset {opset}, and its "
                f"TorchScript exporter fails at it: {_first_line(e)})",
                "leave export.opset unset for the exporter's own, or ask for one it reaches",
            ) from None
        raise _unexportable(model, name, refused, e) from None
    constant = _traced_constant(caught)
    if constant is not None:
        raise UserError(
            f"model '{name}' cannot be exported faithfully: its forward {constant}, which the "
            f"TorchScript exporter (the fallback, {after}) keeps as the value the example input "
            "gives, so the ONNX graph would take the example input's path for every input",
            "compute it with tensor operations: torch.where(condition, a, b) to choose "
            "between values, torch.cond for a branch; a size as x.shape[i], without int()",
        )
    # Said once the fallback is known to stand: a refusal above is the export's one line.
    reporter.log(f"warning: {why}; falling back to the TorchScript exporter")
    return "torchscript"


def _opset(model: Path) -> int:
    """The ONNX opset (the default domain's) of the model file at `model`."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    return int(next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")))


# The file system refusing the model's files (full, over ulimit -f, read-only): no fault of the
# model's, and the command line tells it as the OSError it is.
_REFUSED_WRITES = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _unwritable(e: BaseException) -> bool:
    """Whether an exporter failed because its files could not be written."""
    return isinstance(e, OSError) and e.errno in _REFUSED_WRITES


def _starved(*failures: BaseException) -> BaseException | None:
    """The first of the exporters' failures that is one for want of memory (a MemoryError
    under ulimit -v, torch's allocator), itself or what it wraps; None when none is. Not the
    model's fault, which exit 2 would say."""
    for failure in failures:
        for e in (failure, failure.__cause__):
            if e is not None and out_of_memory(e):
                return e
    return None


def _unexportable(
    model: nn.Module, name: str, refused: BaseException, fallback: BaseException
) -> UserError:
    """Why neither exporter could export `model`: a submodule scripted with torch.jit.script,
    which dynamo cannot trace and the TorchScript tracer cannot enter ("Tried to trace
    <__torch__...> but it is not part of the active trace"), by name; otherwise the dynamo
    exporter's reason (`refused`) and the fallback's."""
    scripted: list[str] = []
    for path, module in model.named_modules():
        inside = any(path.startswith(f"{outer}.") for outer in scripted)
        if path and not inside and isinstance(module, torch.jit.ScriptModule):
            scripted.append(path)
    if scripted:
        one = len(scripted) == 1
        return UserError(
            f"cannot export model '{name}' to ONNX: its submodule{'' if one else 's'} "
            f"{few(scripted)} "
            f"{'is a' if one else 'are'} TorchScript ScriptModule{'' if one else 's'} "
            "(torch.jit.script), which neither ONNX exporter traces into",
            "keep the module unscripted for export: build it without torch.jit.script",
        )
    from torch.nn.utils import parametrize

    # Parametrizations left in place (`_baked` could not copy the model): the likely cause.
    held = [path for path, m in model.named_modules() if parametrize.is_parametrized(m)]
    return UserError(
        f"cannot export model '{name}' to ONNX: the dynamo exporter failed "
        f"({_first_line(refused)}), and the TorchScript exporter too ({_first_line(fallback)})",
        f"bake the parametrization of {few(held)} in before export: "
        "torch.nn.utils.parametrize.remove_parametrizations(layer, 'weight')"
        if held
        else None,
    )


@contextlib.contextmanager
def _onnx_log_off() -> Iterator[None]:
    """torch.onnx's log kept off around an exporter. torch's TorchScript exporter turns it on
    for every export and leaves it on (its setup_onnx_logging tests the function
    _jit_is_onnx_log_enabled, always true, not its value), and the log, written from C++ to
    stdout past Python's redirection, dumped the graph ("Torch IR graph at exception", some 30
    lines) before the one error line, and into `--json`'s document. Its switch is held off for
    the export and the log's state put back after."""
    switch = getattr(torch._C, "_jit_set_onnx_log_enabled", None)
    enabled = getattr(torch._C, "_jit_is_onnx_log_enabled", None)
    if switch is None or enabled is None:  # a torch without the log: nothing to keep off
        yield
        return
    was = enabled()
    switch(False)
    setattr(torch._C, "_jit_set_onnx_log_enabled", lambda on: None)  # noqa: B010
    try:
        yield
    finally:
        setattr(torch._C, "_jit_set_onnx_log_enabled", switch)  # noqa: B010
        switch(was)


def _baked(model: nn.Module) -> nn.Module:
    """`model` to hand the exporters: where it has parametrized tensors
    (torch.nn.utils.parametrize: orthogonal, weight_norm, spectral_norm), a copy with each
    baked into a plain tensor of the value it has now, in eval mode, as an exported graph
    would only recompute it; the parity check compares the graph with `model` itself. The
    exporters cannot convert some parametrizations (orthogonal's matrix exponential: neither
    aten::linalg_matrix_exp nor aten::mH has an ONNX form). `model` where it has none, or
    where it cannot be copied (the exporters then meet the parametrizations as they are)."""
    from torch.nn.utils import parametrize

    if not any(parametrize.is_parametrized(m) for m in model.modules()):
        return model
    try:
        copy = deepcopy(model)
    except Exception:  # a module holding what cannot be copied (a lock, a file)
        return model
    with torch.no_grad():
        for module in list(copy.modules()):  # listed first: removal changes the tree
            if parametrize.is_parametrized(module):
                # A class of its own first: the copy shares the original's Parametrized
                # class, from which removal deletes the tensor's property, the original's too.
                kind = type(module)
                own = {k: v for k, v in vars(kind).items() if k not in ("__dict__", "__weakref__")}
                module.__class__ = type(kind.__name__, kind.__bases__, own)
                held = module.parametrizations
                assert isinstance(held, nn.ModuleDict)  # what parametrize registers
                for name in list(held):
                    parametrize.remove_parametrizations(module, name, leave_parametrized=True)
    return copy.eval()


@contextlib.contextmanager
def _quiet() -> Iterator[list[warnings.WarningMessage]]:
    """Around an exporter: its talk on stdout, stderr and through warnings is kept out of
    dlperf's output, which is one JSON document or a table; yields the tracer's warnings
    about the model's own code (not torch's library: torch's own filter), for
    `_traced_constant`."""
    chatter = io.StringIO()
    with (
        contextlib.redirect_stdout(chatter),
        contextlib.redirect_stderr(chatter),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("ignore")
        warnings.filterwarnings("always", category=TracerWarning)
        # torch's own rule (TracerWarning.ignore_lib_warnings): not its library's warnings,
        # nor torchvision's, which the pattern matches too; dlperf's models are counted
        warnings.filterwarnings("ignore", category=TracerWarning, module="torch.(?!jit)")
        yield caught


CONVERTED = re.compile(r"Converting a tensor to an? (Python \w+|NumPy array)")


def _traced_constant(caught: list[warnings.WarningMessage]) -> str | None:
    """What the model's code did that a trace records as a constant, from the tracer's
    warnings: `turns a tensor into a Python number at models.py:22 (`line`)` and how many
    other places; None when it did nothing of the kind. A conversion is a constant in the
    trace, and with it every choice the code makes on it (an `if` on the input's values)."""
    places = []
    for w in caught:
        found = CONVERTED.match(str(w.message))
        if issubclass(w.category, TracerWarning) and found:
            places.append((found.group(1), w.filename, w.lineno))
    if not places:
        return None
    kind, filename, lineno = places[0]
    code = linecache.getline(filename, lineno).strip()
    said = f"turns a tensor into a {kind} at {Path(filename).name}:{lineno}"
    said += f" (`{code}`)" if code else ""
    others = len({(f, n) for _, f, n in places} - {(filename, lineno)})
    if others:
        said += f" and in {others} other place{'s' if others > 1 else ''}"
    return said


def _first_line(e: BaseException) -> str:
    """`Type: first line of the message`, without the terminal colours some errors carry."""
    # error_text: the exporters pass on a model's own exception, whose __str__ may raise
    text = re.sub(r"\x1b\[[0-9;]*m", "", error_text(e)).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


@contextlib.contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """Where this export writes until it is checked and compared: a hidden directory beside
    `out`, whose files (the model, its weights, its metadata) `_publish` moves into place at
    the end. Whatever ends the export first (an error, Ctrl-C, SIGTERM) removes the directory
    and leaves an earlier export whole; a SIGKILL leaves only the hidden directory, never an
    unchecked model under the name `dlperf infer` and `dlperf serve` read. The directory is
    this export's alone while it lasts (`_claim`)."""
    staging = out.with_name(f".{out.name}.exporting")
    held = _claim(staging, out)
    try:
        yield staging / out.name
    finally:
        with stopping.shielded():  # a second Ctrl-C must not leave half of them
            shutil.rmtree(staging, ignore_errors=True)
            if held is not None:
                os.close(held)  # the lock goes with it, once the directory is gone


OWNER = ".pid"  # in the staging directory: the process id of the export that holds it


def _claim(staging: Path, out: Path) -> int | None:
    """Make `staging` this export's: made, or emptied of a SIGKILLed export's leftovers, and
    held under an exclusive flock for as long as the returned descriptor is open. One another
    export holds is refused, naming it: two exports to one --out emptied each other's files,
    and one failed blaming both ONNX exporters. None where the file system has no locks
    (the directory is then used as before, unguarded)."""
    import fcntl

    while True:
        if staging.is_symlink():
            # Never followed: its cleanup would empty the directory it points to.
            raise UserError(
                f"{staging} is a symbolic link, where `dlperf export` keeps the files it is "
                "writing",
                "remove the link, or give another --out",
            )
        staging.mkdir(exist_ok=True)
        # O_NOFOLLOW: a link put there since is an error (ELOOP), not a directory to empty.
        fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(
                f"another dlperf export{_owner(staging)} is writing {out}",
                "wait for it to finish, or give another --out",
            ) from None
        except OSError:  # no flock on this file system (ENOLCK, EOPNOTSUPP)
            os.close(fd)
            held = None
            break
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(fd), os.lstat(staging)):
                held = fd
                break
        os.close(fd)  # removed as this one looked by the export that held it: claim anew
    for left in staging.iterdir():  # a dead export's, none of a live one's
        if left.is_dir() and not left.is_symlink():
            shutil.rmtree(left, ignore_errors=True)
        else:
            left.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # for a second export's line only: a full disk is
        (staging / OWNER).write_text(f"{os.getpid()}\n")  # said by the export's own files
    return held


def _owner(staging: Path) -> str:
    """The pid of the export that holds `staging`, as " (pid N)", where its file says it."""
    try:
        pid = (staging / OWNER).read_text().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


def _files(model: Path) -> list[Path]:
    """An exported model's files: the model, its weights (MODEL.onnx.data), its metadata."""
    return [model, model.with_name(model.name + ".data"), meta_io.sidecar(model)]


def _publish(staged: Path, out: Path) -> None:
    """The checked files in place of `out`'s; an earlier export's weights file goes when this
    one has none (a single file). Each rename is atomic, the three together are not: a kill
    between them leaves this graph beside the earlier weights, which the weights' digest the
    graph carries (`meta.weights_digests`) has every load refuse."""
    with stopping.shielded():  # the model and its weights must not be left from two exports
        if stopping.requested():
            # A stop that some library swallowed, or that came as this export was checked
            # (it waited in a shielded block): the export was stopped, so it is not published.
            raise KeyboardInterrupt
        for source, target in zip(_files(staged), _files(out), strict=True):
            if source.is_file():
                source.replace(target)
            elif target.is_file():
                target.unlink()
        # Published: the export is done, and a stop from here on (or one that waited here) no
        # longer counts, as calibrate's once its device is saved. It exited 143 with the new
        # model in place and nothing said of it.
        stopping.settle()


def _refuse_projected_lstms(model: nn.Module, name: str) -> None:
    """An nn.LSTM with proj_size, refused before the export: ONNX's LSTM has no projection.
    The dynamo exporter wrote one anyway, its initial_c of the projection's size, which ONNX
    Runtime refused at the parity check ("Input initial_c must have shape {1,1,4}", exit 1,
    with a batch-size hint under --dynamic-batch); the TorchScript exporter refused it in its
    own words."""
    for path, module in model.named_modules():
        if isinstance(module, nn.LSTM) and module.proj_size > 0:
            raise UserError(
                f"model '{name}' cannot be exported to ONNX: its nn.LSTM "
                f"'{path or type(model).__name__}' has proj_size={module.proj_size}, which "
                "ONNX's LSTM operator cannot express",
                "drop proj_size and follow the LSTM with an nn.Linear of that size",
            )


def export(
    source: Source,
    out: Path,
    opset: int | None = None,
    dynamic_batch: bool = False,
    single_file: bool = False,
    rtol: float = 1e-3,
    atol: float = 1e-5,
    threads: int | None = None,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """Export, embed the metadata, check, and compare with PyTorch. Returns the report;
    `parity` is False when any compared output is outside the tolerance."""
    import onnx

    reporter = reporter or NullReporter()
    check_out(out)
    warning = unfinished(source.meta)
    if warning is not None:  # said first: the export takes a while
        reporter.log(one_line(f"warning: {warning}"))
    for said in source.warnings:
        reporter.log(one_line(f"warning: {said}"))
    data_file = out.with_name(out.name + ".data")
    model, meta = source.model.eval(), source.meta
    if meta.preprocess.channels not in runtime.CHANNEL_MODES:
        reporter.log(
            f"warning: the model takes {meta.preprocess.channels} channels: `dlperf infer` and "
            "/predict refuse image files for it (they give 1 to 4); send it arrays"
        )
    _refuse_projected_lstms(model, meta.model)
    # A batch of 2 for a dynamic batch: the dynamo exporter specialises 1 to a constant.
    batch = 2 if dynamic_batch else 1
    with torch.no_grad():  # refused before the export, which takes a while
        scores = check_scores(model(torch.zeros(batch, *meta.input_shape)), meta.model, batch)
    warned = [w for w in (warning, *source.warnings) if w is not None]
    # Recorded for infer and /predict, which would otherwise softmax them again (near
    # 1/classes each); warned of as run's dry check warns, for a model trained on them.
    meta.probabilities = probabilities(scores)
    if meta.probabilities:
        warned.append(
            f"model '{meta.model}' {PROBABILITIES.format(mode=' in eval mode')}: its metadata "
            "records it, and `dlperf infer` and /predict show them as they are, not softmaxed "
            f"again; if it was trained with cross-entropy, which takes logits, {BEFORE_SOFTMAX}"
        )
        reporter.log(one_line(f"warning: {warned[-1]}"))
    start = time.perf_counter()

    with _staged(out) as staged:
        reporter.task(one_line(f"exporting {meta.model} to {out}"))  # a newline in a name
        example = torch.zeros(batch, *meta.input_shape)
        with writing(out):  # a refused write names no file: the one line names `out`
            exporter = _torch_export(
                _baked(model),
                example,
                staged,
                opset,
                dynamic_batch,
                single_file,
                reporter,
                meta.model,
            )
        proto = onnx.load(str(staged), load_external_data=False)
        if dynamic_batch:
            check_batch_dynamic(proto, batch, meta.model)
        meta.opset = _opset(staged)  # the one asked for, if any: _torch_export saw to it
        # The weights' own digest in the model: a load refuses another export's beside it
        # (the publish moves the files one at a time: a stop between can pair two exports).
        meta.weights_sha256 = meta_io.weights_digests(staged, proto)
        with writing(out):  # the model rewritten and its sidecar: a full disk named no file
            meta_io.save(staged, meta)
        export_s = time.perf_counter() - start

        reporter.task("checking the ONNX file")
        try:
            check_model(staged)
        except UserError as e:
            # The file is the one the user named: the staging directory is dlperf's own.
            said = e.message.replace(str(staged), str(out))
            computes = _bfloat16_ops(proto)
            if computes:  # no fault of the file's: the model's, a graph ONNX cannot hold
                raise UserError(
                    f"cannot export model '{meta.model}' to ONNX: it computes in bfloat16 (its "
                    f"{', '.join(computes)} run on bfloat16 tensors: torch.autocast in its "
                    f"forward, or a .bfloat16() inside it), and {said}",
                    "leave torch.autocast out of the forward for export: train in bfloat16 "
                    'with run.precision = "bf16", which casts outside the model',
                ) from None
            raise CheckFailed(said) from None

        reporter.task("comparing ONNX Runtime with PyTorch")
        # torch's count is not the user's to answer for: a model file's set_num_threads(2) or
        # OMP_NUM_THREADS above the affinity mask was refused after the whole export.
        session = runtime.session(staged, threads or min(torch.get_num_threads(), usable_cores()))
        seeded = torch.Generator().manual_seed(0)
        inputs = {"random": torch.randn(RANDOM_BATCH, *meta.input_shape, generator=seeded)}
        if source.images is not None:
            inputs["test images"] = source.images
        sets = []
        exported_at = batch if dynamic_batch else None
        for name, x in inputs.items():
            result = _compared(model, session, x, name, meta.model, rtol, atol, exported_at)
            if name == "random":
                # Also at batch 1, the batch `dlperf infer` and /predict give one image at: a
                # model whose output depends on its batch (5 columns at batch 1, 10 at more)
                # agrees with a graph exported at another batch at RANDOM_BATCH alone.
                one = _compared(model, session, x[:1], name, meta.model, rtol, atol, exported_at)
                result = {
                    **result,
                    "max_abs_diff": max(result["max_abs_diff"], one["max_abs_diff"]),
                    "max_rel_diff": max(result["max_rel_diff"], one["max_rel_diff"]),
                    "within_tolerance": result["within_tolerance"] and one["within_tolerance"],
                }
            sets.append({"input": name, **result})
        _publish(staged, out)  # checked and compared: kept, within tolerance or not

    n = sum(s["n"] for s in sets)
    return {
        "path": str(out),
        "data_path": str(data_file) if data_file.is_file() else None,
        "model": meta.model,
        "run_id": meta.run_id,
        "run_status": meta.run_status,
        "epoch": meta.epoch,
        "warning": warning,
        "input_shape": list(meta.input_shape),
        "dynamic_batch": dynamic_batch,
        "exporter": exporter,
        "opset": meta.opset,
        "check": "passed",
        "max_abs_diff": max(s["max_abs_diff"] for s in sets),
        "max_rel_diff": max(s["max_rel_diff"] for s in sets),
        "top1_agreement": sum(s["top1_agreement"] * s["n"] for s in sets) / n,
        "tolerance": {"rtol": rtol, "atol": atol},
        "parity": all(s["within_tolerance"] for s in sets),
        "parity_sets": sets,
        "export_seconds": export_s,
        "seconds": time.perf_counter() - start,
        "warnings": warned,
    }
