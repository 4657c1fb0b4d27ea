"""One Horovod process of a scaling point: `horovodrun -np N ... python -m
dlperf.distributed.hvd_worker SPEC.json`, started by dlperf.distributed.hvd_launch.

The point's strategy names Horovod's binding: `torch` trains dlperf's model of the registry's
name with `hvd.DistributedOptimizer`, `tensorflow` the Keras model of
dlperf.distributed.tf_worker with `hvd.DistributedGradientTape`; both broadcast rank 0's
weights first (the TensorFlow path its optimizer state too), as Horovod's own synthetic
benchmarks do. On torch the step is the one of every dlperf trainer (dlperf.engine.step.prepare:
the experiment's optimizer, schedule, clipping, label smoothing, precision, memory format and
compilation), its optimizer wrapped by `hvd.DistributedOptimizer`; TensorFlow trains with SGD
at the experiment's lr and momentum and warns of the settings it ignores (tf_worker). The
gradients are averaged over the ranks by Horovod's all-reduce (gloo or NCCL, as built),
fp16-compressed on the wire for `--comm fp16`; `--bucket-mb`
is Horovod's tensor-fusion threshold (set by the launcher). Data: random images of the
model's input shape (--synthetic), else each rank's shard of the training split, every size-th
image from its rank as DDP's ranks take theirs: on torch the DDP workers' own batches
(augmented as the experiment says), on TensorFlow those of the tf.distribute workers
(tf_worker.dataset). On torch the point trains as the DDP workers' does
(dlperf.distributed.worker.measure: the one training loop, the same warm-up, device clock,
barrier (Horovod's), hooks and step count, run.profile's window and trace); on TensorFlow
its own step runs through the same loop and timing window (window.measure_host_steps), and
run.profile is warned of as ignored. The compute-only steps are a second copy of the model
without Horovod: the same step with a local optimizer on torch (as DDP's no-op hook
replica), forward and backward on TensorFlow (as the tf.distribute path). Each rank writes
`rank-R.pid` (whole, at once) as it starts, `rank-R.json` (its
dlperf.distributed.contracts.RankResult, without DDP's figures) at the end, and
`rank-R.error` (its traceback) if it fails.

TensorFlow and torchvision must not share a process (they crash it): the `tensorflow` path
imports nothing of torch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from dlperf.distributed.contracts import RankResult, WorkerSpec
from dlperf.distributed.cpu_limit import leave_at_limit
from dlperf.distributed.tf_worker import dataset, keras_model, weights
from dlperf.distributed.window import fail, measure_host_steps, write_pid
from dlperf.procs import restore_safepath


def _torch(spec: WorkerSpec, directory: Path) -> RankResult:
    import copy
    from collections.abc import Iterator
    from contextlib import contextmanager

    import horovod.torch as hvd
    import torch

    from dlperf.config import Experiment
    from dlperf.data import load_data
    from dlperf.distributed.worker import Launch, Replica, batches, measure
    from dlperf.engine.build import build_model as torch_model
    from dlperf.engine.build import start_weights
    from dlperf.engine.hooks import Hooks
    from dlperf.engine.profiler import ProfileWindow, trace_name
    from dlperf.engine.step import prepare, steps_per_epoch
    from dlperf.engine.timers import PhaseTimer
    from dlperf.models.transfer import set_train_mode
    from dlperf.system import synchronize

    hvd.init()
    torch.set_num_threads(spec.threads)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", hvd.local_rank()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)  # else every rank opens a context on GPU 0 as well
    exp = Experiment.model_validate(spec.experiment)
    # Horovod all-reduces and broadcasts only contiguous tensors, and channels-last weights
    # (and their gradients) are not: this binding trains in the default format (the study
    # warns of it).
    exp.run.channels_last = False
    data = load_data(exp.data)
    model = torch_model(exp, data, device)  # the DDP workers' model: seeded, lazy layers sized
    start_weights(model, exp.model, exp.model.weights or "", None)  # freezes, if asked
    set_train_mode(model)  # a frozen backbone's batch norms stay in eval mode
    hooks = Hooks.from_env()
    hooks.start("horovod", model)
    shadow = copy.deepcopy(model)  # the compute-only copy, outside Horovod
    # At the point's global batch, as the DDP workers count them.
    epoch = steps_per_epoch(len(data.train), spec.per_worker_batch * hvd.size())
    compression = hvd.Compression.fp16 if spec.comm == "fp16" else hvd.Compression.none

    def distribute(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        return hvd.DistributedOptimizer(  # type: ignore[no-any-return]
            optimizer, named_parameters=model.named_parameters(), compression=compression
        )

    # The DDP workers' profiled window, phase labels and trace name.
    trace = directory / trace_name(f"rank{hvd.rank()}")
    profile = ProfileWindow(exp.run.profile, device, spec.warmup_steps, trace)
    timer = PhaseTimer(device, enabled=False, labels=profile.labels)
    classes = data.num_classes
    step = prepare(model, exp.train, exp.run, device, epoch, distribute=distribute, timer=timer,
                   classes=classes)  # fmt: skip
    local = prepare(shadow, exp.train, exp.run, device, epoch, classes=classes)

    horovod: Any = step.optimizer  # hvd.DistributedOptimizer, which torch's types do not know

    @contextmanager
    def reduced() -> Iterator[None]:
        # Horovod's recipe for clipping and the fp16 scaler: all-reduce before unscaling and
        # clipping, then step without all-reducing again.
        horovod.synchronize()
        with horovod.skip_synchronize():
            yield

    step.reduced = reduced
    # Only the weights: fresh optimizers hold no state, and Horovod's broadcast of optimizer
    # state first creates it with a step on zero gradients, which weight decay turns into
    # a real update.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    # The DDP workers' batches: this rank's shard (augmented as the experiment says), or
    # random images; the compute-only copy draws from the same source.
    source = batches(spec, exp, data, device, hvd.rank(), hvd.size())
    main = Replica(spec, model, step, source, device)
    compute = Replica(spec, shadow, local, source, device) if spec.compute_split else None

    def barrier() -> None:
        synchronize(device)
        hvd.barrier()

    launch = Launch("horovod", hvd.rank(), hvd.size(), barrier)
    times = measure(spec, exp, launch, main, hooks, profile, compute)
    params = [p for p in model.parameters() if p.requires_grad]
    weights = (
        sum(p.numel() * p.element_size() for p in params),
        [float(p.detach().abs().sum()) for p in params],
    )
    # one replica per process: the launcher compares the fingerprints
    return times.result(hvd.rank(), hvd.size(), spec.per_worker_batch, 0.0, weights)


def _tensorflow(spec: WorkerSpec) -> RankResult:
    import horovod.tensorflow as hvd
    import keras
    import tensorflow as tf

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(spec.threads)
    tf.config.threading.set_inter_op_parallelism_threads(spec.threads)
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    model, optimizer = keras_model(spec)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    compression = hvd.Compression.fp16 if spec.comm == "fp16" else hvd.Compression.none
    source = iter(dataset(spec, hvd.rank(), hvd.size(), spec.per_worker_batch))

    # Horovod 0.28.1 keys gradients by tf.Variable.ref(), which Keras 3's variables lack: the
    # tape takes the tf.Variables they wrap.
    sources = [v.value for v in model.trainable_variables]

    @tf.function  # type: ignore[untyped-decorator]
    def step(source: Any) -> tf.Tensor:
        x, y = next(source)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, sources)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function  # type: ignore[untyped-decorator]
    def compute_only(source: Any) -> tf.Tensor:
        x, y = next(source)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        return loss + 0 * tf.add_n([tf.reduce_sum(g) for g in grads])  # keeps grads

    # The optimizer's variables exist after its first update: then broadcast, as Horovod's
    # TensorFlow 2 benchmark does.
    step(source).numpy()
    hvd.broadcast_variables([v.value for v in model.variables], root_rank=0)
    hvd.broadcast_variables([v.value for v in optimizer.variables], root_rank=0)
    split = (lambda: compute_only(source).numpy()) if spec.compute_split else None
    times = measure_host_steps(spec, hvd.rank(), lambda: step(source).numpy(), split)
    trained = weights(model.trainable_variables)
    return times.result(hvd.rank(), hvd.size(), spec.per_worker_batch, 0.0, trained)


def main() -> None:
    restore_safepath()
    spec_path = Path(sys.argv[1])
    directory = spec_path.parent
    rank = int(os.environ["HOROVOD_RANK"])  # set by horovodrun before the worker starts
    write_pid(directory, rank)
    leave_at_limit(directory, rank)  # its CPU-time limit's SIGXCPU stops dlperf, not a core dump
    try:
        spec = WorkerSpec.read(spec_path)  # a bad spec, too, is this rank's error to leave
        result = _tensorflow(spec) if spec.strategy == "tensorflow" else _torch(spec, directory)
    except Exception:
        fail(directory, rank)  # peers may be gone: tearing Horovod down could hang
    result.write(directory / f"rank-{rank}.json")


if __name__ == "__main__":
    main()
