"""ONNX Runtime against PyTorch eager (NCHW and channels_last) on the same input.

Per batch size every contender is warmed up, then timed call by call in interleaved rounds
(ONNX Runtime, eager, channels_last, ONNX Runtime, ...) so that a change in machine load
hits all of them alike. Latency percentiles are over the timed calls; throughput is images
over the summed wall time of those calls; `ort_speedup` = contender p50 / ONNX Runtime p50.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dlperf.deploy import meta as meta_io
from dlperf.deploy import runtime
from dlperf.deploy.export import Source, from_registry, from_run
from dlperf.deploy.meta import ModelMeta
from dlperf.errors import UserError
from dlperf.formatting import few
from dlperf.parsing import absolute_model_name, one_line
from dlperf.progress import NullReporter, Reporter
from dlperf.store import RunStore
from dlperf.store.record import RunRecord
from dlperf.system import set_threads
from dlperf.timing import Spread, interleave

ORT = "onnxruntime"


def bench(
    model_path: Path,
    batches: list[int],
    torch_model: nn.Module | None = None,
    threads: int | None = None,
    repeats: int = 20,
    warmup: int = 3,
    reporter: Reporter | None = None,
    asked: bool = True,
) -> dict[str, Any]:
    """Latency p50/p90/p99 (ms) and throughput per batch size and contender. Without
    `torch_model` only ONNX Runtime is measured. `asked` False: `batches` are defaults the
    user did not ask for, and a file whose batch is fixed is measured at its batch alone,
    with a note (`_fitted`)."""
    reporter = reporter or NullReporter()
    meta = meta_io.load(model_path)
    if not batches or min(batches) < 1:
        raise UserError(f"batch sizes must be positive integers, got {batches}")
    n_threads = set_threads(threads)
    # ONNX Runtime on the CPU, where the PyTorch contenders run, even with onnxruntime-gpu.
    session = runtime.session(model_path, n_threads, cpu=True)
    spec = session.get_inputs()[0]
    batches, note = _fitted(model_path, runtime.exported_batch(session), batches, asked)
    if note is not None:
        reporter.log(f"note: {note}")
    contenders: dict[str, nn.Module] = {}
    if torch_model is not None:
        contenders["torch eager"] = torch_model.eval()
        contenders["torch channels_last"] = copy.deepcopy(torch_model).to(
            memory_format=torch.channels_last
        )

    rows = []
    reporter.task("benchmarking", total=len(batches) * repeats)
    generator = torch.Generator().manual_seed(0)
    for batch in batches:
        x = torch.randn(batch, *meta.input_shape, generator=generator)
        calls: dict[str, Callable[[], Any]] = {
            ORT: functools.partial(session.run, None, {spec.name: x.numpy()})
        }
        for name, model in contenders.items():
            layout = torch.channels_last if "channels_last" in name else torch.contiguous_format
            calls[name] = functools.partial(model, x.contiguous(memory_format=layout))
        with torch.inference_mode():
            # Timed on the host: ONNX Runtime's and the models' work is all on the CPU.
            times = interleave(
                calls,
                warmup,
                repeats,
                on_round=functools.partial(reporter.advance, 1, status=f"batch {batch}"),
            )
        spreads = {name: Spread.of(seconds) for name, seconds in times.items()}
        for name, seconds in times.items():
            spread = spreads[name]
            p90, p99 = np.percentile(seconds, [90, 99])
            rows.append(
                {
                    "batch": batch,
                    "contender": name,
                    "min_ms": spread.min * 1e3,
                    "p50_ms": spread.median * 1e3,
                    "p90_ms": p90 * 1e3,
                    "p99_ms": p99 * 1e3,
                    "max_ms": spread.max * 1e3,
                    "throughput": batch * len(seconds) / sum(seconds),
                    "ort_speedup": spread.median / spreads[ORT].median,
                }
            )
    result = {
        "model": str(model_path),
        "threads": n_threads,
        "repeats": repeats,
        "warmup": warmup,
        "rows": rows,
    }
    return result if note is None else result | {"note": note}


def _fitted(
    model_path: Path, fixed: int | None, batches: Sequence[int], asked: bool
) -> tuple[list[int], str | None]:
    """The batch sizes to measure `model_path` at (its graph's batch is `fixed`; None where
    it is dynamic) and a note where they are not `batches`. Sizes the file cannot take are
    refused where they were `asked` for, and otherwise (infer.batch's defaults, 1, 8 and 32)
    replaced by its own batch: `dlperf export`'s default file has a fixed batch of 1, and
    `infer bench` of it with its defaults was refused, though no batch size was asked for."""
    others = [b for b in batches if b != fixed]
    if fixed is None or not others:
        return list(batches), None
    file = one_line(str(model_path))
    if asked:
        raise UserError(
            f"{file} was exported with a fixed batch of {fixed} and cannot be measured at "
            f"batch {_listed(others, 'or')}",
            f"measure it with --batch {fixed}, or export it again with --dynamic-batch to "
            "measure other batch sizes",
        )
    return [fixed], (
        f"{file} was exported with a fixed batch of {fixed}: measured at that batch alone "
        f"(export it again with --dynamic-batch to measure batch {_listed(batches, 'and')})"
    )


def _listed(sizes: Sequence[int], word: str) -> str:
    """[1, 8, 32] as "1, 8 and 32" (`word` "and") or "1, 8 or 32"."""
    head = ", ".join(map(str, sizes[:-1]))
    return f"{head} {word} {sizes[-1]}" if head else str(sizes[-1])


def _graphs_batch(graph: Any) -> int | None:
    """The batch size `graph` takes only, read as ONNX Runtime reads it (its first input
    that is no initializer); None where its batch is dynamic or unsaid."""
    weights = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in weights]
    dims = inputs[0].type.tensor_type.shape.dim if inputs else []
    return dims[0].dim_value if dims and dims[0].HasField("dim_value") else None


def pytorch_contender(
    model_path: Path,
    spec: str | None,
    open_store: Callable[[], RunStore],
    reporter: Reporter | None = None,
    batches: Sequence[int] | None = None,
    asked: bool = True,
) -> nn.Module | None:
    """The PyTorch model to race: `spec` (RUN_ID or registry name), else the one the
    metadata names: its run when the store has it, else the registry model with random
    weights (the same architecture runs at the same speed), built with the model.kwargs the
    metadata records. None when neither can be built. `batches` and `asked`, those `bench`
    will be given, are refused first where `bench` refuses them (`_fitted`): before any model
    is built (a model file's torch.compile wrote its log line first)."""
    import onnx

    reporter = reporter or NullReporter()
    # The graph alone is read here: the weights are checked by `bench`'s load, which reads
    # them (`infer bench` hashed them twice, once for each).
    meta = meta_io.load(model_path, weights=False)
    graph = onnx.load(str(model_path), load_external_data=False).graph
    if batches is not None:
        _fitted(model_path, _graphs_batch(graph), batches, asked)
    classes = graph.output[0].type.tensor_type.shape.dim[-1].dim_value or None
    if spec is None:
        source = _from_meta(model_path, meta, graph, classes, open_store, reporter)
        if source is None:
            return None
    elif spec.isdigit():
        store = open_store()
        source = from_run(store, int(spec), reporter)
        _say_changed(store.get_run(int(spec)), reporter)
    else:
        source = _rebuilt(model_path, meta, graph, spec, classes, reporter)
    if source.meta.input_shape != meta.input_shape:
        raise UserError(
            f"the PyTorch model takes {source.meta.input_shape}, "
            f"{model_path} takes {meta.input_shape}"
        )
    return source.model


def _from_meta(
    model_path: Path,
    meta: ModelMeta,
    graph: Any,
    classes: int | None,
    open_store: Callable[[], RunStore],
    reporter: Reporter,
) -> Source | None:
    if meta.run_id is not None:
        try:
            return _metas_run(model_path, meta, meta.run_id, classes, open_store(), reporter)
        except UserError as e:
            reporter.log(f"warning: {e}; racing registry model '{meta.model}' with random weights")
    try:
        return _rebuilt(model_path, meta, graph, meta.model, classes, reporter)
    except UserError as e:
        reporter.log(f"warning: cannot rebuild the PyTorch model ({e}); timing ONNX Runtime only")
        return None


def _rebuilt(
    model_path: Path,
    meta: ModelMeta,
    graph: Any,
    spec: str,
    classes: int | None,
    reporter: Reporter,
) -> Source:
    """Registry model `spec` with random weights; the exported one (`spec` names the model
    the metadata does) is built from its file's absolute path with its model.kwargs, as
    export built it. Refused where a parameter's shape is not the one of the same name in
    `model_path` (another network: metadata that predates the kwargs, a file edited since):
    its timings would be another network's, next to ONNX Runtime's, without a word. Where no
    name is in common the exported one is compared by its outputs instead (`_other_outputs`),
    and any other refused: nothing says it is the file's network."""
    exported = spec == meta.model or (
        meta.model_path is not None and absolute_model_name(spec) == meta.model_path
    )
    kwargs = meta.model_kwargs if exported else None
    name = (meta.model_path or spec) if exported else spec
    source = from_registry(name, meta.input_shape, classes, kwargs)
    file = one_line(str(model_path))
    unknown = exported and kwargs is None
    why = f"{file} records no model.kwargs (exported before dlperf recorded them)"
    how = (
        "its factory's defaults"
        if unknown
        else (f"model.kwargs {kwargs}" if kwargs else "no model.kwargs")
    )
    hint = (
        "export it again: the metadata then records its model.kwargs"
        if unknown
        else (
            "export it again from its model file as it is now"
            if exported
            else f"race the model it was exported from: --torch {meta.model}"
        )
    )
    compared, unlike = _unlike(source.model, graph)
    if unlike:
        raise UserError(
            f"'{spec}' built with {how} is not the network of {file} ({few(unlike, 1)})"
            + (f": {why}" if unknown else ""),
            hint,
        )
    if compared == 0 and (source.model.state_dict() or graph.initializer):
        # No name in common: another network's (resnet20's conv1.weight against smallcnn's
        # 0.weight), or the exported one's where the exporter renamed or folded every tensor
        # (the dynamo exporter makes a complex parameter real constants `val_18`, `val_19`),
        # so the names say nothing. A registry export holds the factory's seeded weights,
        # which this build draws again: the file's network answers as the file does.
        n = len(source.model.state_dict())
        named = f"none of its {n} parameters and buffers is named as an initializer in the file"
        if not exported or meta.run_id is not None:
            raise UserError(
                f"cannot tell that '{spec}' built with {how} is the network of {file}: {named}",
                # A run's trained weights are not these random ones: its run, not a new
                # export (which folds the same tensors), is what can be raced.
                f"bench it with the store that holds run {meta.run_id}" if exported else hint,
            )
        differs = _other_outputs(source.model, model_path, meta.input_shape, graph)
        if differs is not None:
            raise UserError(
                f"'{spec}' built with {how} is not the network of {file}: {named}, and on the "
                f"same input {differs}" + (f": {why}" if unknown else ""),
                hint,
            )
    if unknown:
        reporter.log(f"warning: {why}: the PyTorch contender '{spec}' is built with {how}")
    return source


def _unlike(model: nn.Module, graph: Any) -> tuple[int, list[str]]:
    """How many parameters and buffers of `model` have an ONNX initializer of the same name
    (the exporters name them so), and those whose shape is not that initializer's. Those
    without one cannot be compared and are passed over: many where BatchNorm is folded into
    the convolutions (ResNet-20: 95 of 116 by the dynamo exporter, 114 by TorchScript's),
    never all of an exported network's (its head keeps its names)."""
    dims = {t.name: list(t.dims) for t in graph.initializer}
    shared = {key: value for key, value in model.state_dict().items() if key in dims}
    return len(shared), [
        f"{key} is {list(value.shape)}, the file's {dims[key]}"
        for key, value in shared.items()
        if list(value.shape) != dims[key]
    ]


def _other_outputs(
    model: nn.Module, model_path: Path, input_shape: tuple[int, ...], graph: Any
) -> str | None:
    """How `model`'s outputs differ from the ONNX model's at `model_path` on one seeded
    input; None where they agree (within 1% of their largest value: export's parity held them
    closer, at its own tolerance, which the metadata does not record, and another network's,
    or other weights', differ by about their size)."""
    session = runtime.session(model_path, 1, cpu=True)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(_graphs_batch(graph) or 1, *input_shape, generator=generator)
    found = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    with torch.inference_mode():
        output = model.eval()(x)
    if not isinstance(output, torch.Tensor) or list(output.shape) != list(found.shape):
        shape = list(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        return f"its output is {shape}, the file's {list(found.shape)}"
    expected = output.numpy().astype(np.float64)
    diff = float(np.abs(found.astype(np.float64) - expected).max()) if expected.size else 0.0
    size = float(np.abs(expected).max()) if expected.size else 0.0
    if diff <= 0.01 * size + 1e-6:
        return None
    return f"its outputs differ from the file's by up to {diff:.3g} (they reach {size:.3g})"


def _metas_run(
    model_path: Path,
    meta: ModelMeta,
    run_id: int,
    classes: int | None,
    store: RunStore,
    reporter: Reporter,
) -> Source:
    """This store's run `run_id` (the metadata's), refused unless it is the network of
    `model_path`. The id is of the store it was exported from (the metadata names no store):
    here it may be another kind of run, another model, or the same model trained on other
    data, any of which would be timed in its place."""
    from dlperf.engine import checkpoint

    record = store.get_run(run_id)
    checkpoint.check_trained(store, record, "to race")
    trained = record.config.get("model", {}).get("name")
    if trained != meta.model:
        raise UserError(
            f"run {run_id} of this store is model '{trained}', not the "
            f"'{meta.model}' {one_line(str(model_path))} was exported from"
        )
    source = from_run(store, run_id, reporter)
    # Compared by the input alone where the graph's output or the run's data (synthetic
    # data has no class names) does not tell the number of classes.
    n = len(source.meta.labels) if classes is not None and source.meta.labels else None
    classes = classes if n is not None else None
    if (source.meta.input_shape, n) != (meta.input_shape, classes):
        raise UserError(
            f"run {run_id} of this store takes {_takes(source.meta.input_shape, n)}, not the "
            f"{_takes(meta.input_shape, classes)} {one_line(str(model_path))} takes"
        )
    _say_changed(record, reporter)
    return source


def _takes(shape: tuple[int, ...], classes: int | None) -> str:
    return f"{shape}" if classes is None else f"{shape} with {classes} classes"


def _say_changed(record: RunRecord, reporter: Reporter) -> None:
    """Warn when the run's model file changed since it trained: the network raced is the
    file's as it is now, the weights the run's."""
    from dlperf.experiment.run import model_file_changed

    changed = model_file_changed(record, "raced")
    if changed is not None:
        reporter.log(f"warning: {changed}")
