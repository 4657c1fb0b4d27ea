"""One TensorFlow process of a scaling point: `python -m dlperf.distributed.tf_worker SPEC.json
RANK`, started by dlperf.distributed.tf_launch.

`mirrored`: one process, MirroredStrategy over the point's replicas (GPUs, or on a CPU host
as many logical CPU devices); `multiworker`: one replica per process, MultiWorkerMirroredStrategy
with the cluster in TF_CONFIG (set by the launcher). Both train with a custom loop under
`strategy.run` (Keras 3's `model.fit` fails with two CPU workers, keras-team/keras#20585):
the per-replica loss scaled by the global batch (`tf.nn.compute_average_loss`), gradients
all-reduced by the strategy's cross-device ops, SGD with the experiment's lr and momentum;
the study warns of each setting of the experiment this step ignores (`ignored_settings`).
Data (`dataset`): with --synthetic random images of the model's input shape, made once, as in
TensorFlow's and Horovod's own benchmarks; else each process's shard of the training split
dlperf wrote for the point (TensorFlow must not load torchvision's data sets itself: the two
crash one process), shuffled each epoch and normalized as dlperf does, not augmented. The
step runs in the one training loop with the torch workers' timing window
(window.measure_host_steps): the same warm-up for both replicas, every step timed to the
host's return of its loss. The rank's figures go to `rank-R.json` in
the spec's directory, the torch workers' record (dlperf.distributed.contracts.RankResult,
without DDP's figures), so one summary serves both frameworks.

Past the warm-up, chunks of timed steps alternate with chunks of the same replicas' forward
and backward without the update (`compute_only`): the compute time the study subtracts to
get the exposed communication, as the DDP workers' no-op-hook replica gives it.

The crash hook of the fault tests (DLPERF_SCALE_CRASH) is dlperf.distributed.crash's, counted
over the point's steps, warm-up and timed, as the torch workers count them.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlperf.distributed.contracts import RankResult, WorkerSpec
from dlperf.distributed.cpu_limit import leave_at_limit
from dlperf.distributed.window import measure_host_steps, write_pid
from dlperf.procs import restore_safepath

if TYPE_CHECKING:
    from dlperf.config import Experiment

# The settings the Keras step does not apply, by section, and why: its SGD takes train.lr and
# train.momentum only, its images are not augmented, it runs fp32 uncompiled from random
# weights, and torch.profiler cannot see it (tf_worker's and hvd_worker's TensorFlow paths
# alike).
KERAS_IGNORES = (
    ("model", ("transfer",), "the Keras model trains from random weights"),
    ("train",
     ("optimizer", "nesterov", "weight_decay", "grad_clip", "label_smoothing",
      "backbone_lr_scale", "schedule"),
     "the Keras SGD takes only train.lr and train.momentum"),
    ("augment", ("crop_padding", "flip", "cutout", "batch_aug_m"), "no augmentation"),
    ("run", ("precision", "channels_last", "compile"), "fp32, uncompiled"),
    ("run", ("profile",), "torch.profiler records torch's work only: no trace is written"),
)  # fmt: skip


def ignored_settings(exp: Experiment) -> list[str]:
    """One warning per key of `exp`, set away from its default, that a Keras worker cannot
    honour (a nested section's keys one by one: train.schedule.kind)."""
    warnings = []
    for section, names, why in KERAS_IGNORES:
        config = getattr(exp, section)
        values, defaults = config.model_dump(), type(config)().model_dump()
        for name in names:
            for key, value in _changed(f"{section}.{name}", values[name], defaults[name]):
                warnings.append(f"TensorFlow ignores {key} = {value!r}: {why}")
    return warnings


def _changed(key: str, value: Any, default: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [c for k in value for c in _changed(f"{key}.{k}", value[k], default[k])]
    return [(key, value)] if value != default else []


def _strategy(spec: WorkerSpec) -> Any:
    import tensorflow as tf

    threads = spec.threads
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    if spec.strategy == "multiworker":
        impl = tf.distribute.experimental.CommunicationImplementation
        choice = {"auto": impl.AUTO, "ring": impl.RING, "nccl": impl.NCCL}[spec.comm]
        options = tf.distribute.experimental.CommunicationOptions(implementation=choice)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    replicas = spec.replicas
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        devices = [f"/gpu:{i}" for i in range(replicas)]
    else:  # one logical CPU device per replica, all on the host's cores
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * replicas
        )
        devices = [d.name for d in tf.config.list_logical_devices("CPU")][:replicas]
    ops = {
        "nccl": tf.distribute.NcclAllReduce,
        "hierarchical": tf.distribute.HierarchicalCopyAllReduce,
        "one-device": tf.distribute.ReductionToOneDevice,
    }[spec.comm]()
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=ops)


def keras_model(spec: WorkerSpec) -> tuple[Any, Any]:
    """The Keras model of the registry's name, on the spec's images channels-last: resnet50
    (keras.applications, random weights) or smallcnn, the same network as dlperf's (the Keras
    MNIST example: two 3x3 convolutions, max-pool, dropout, FC 128, dropout, FC classes; same
    parameter count); and its SGD at the experiment's lr and momentum."""
    import keras

    channels, height, width = spec.shape
    shape, classes = (height, width, channels), spec.classes
    if spec.experiment["model"]["name"] == "resnet50":
        model = keras.applications.ResNet50(weights=None, input_shape=shape, classes=classes)
    else:
        layers = keras.layers
        model = keras.Sequential(
            [
                layers.Input(shape),
                layers.Conv2D(32, 3, activation="relu"),
                layers.Conv2D(64, 3, activation="relu"),
                layers.MaxPooling2D(),
                layers.Dropout(0.25),
                layers.Flatten(),
                layers.Dense(128, activation="relu"),
                layers.Dropout(0.5),
                layers.Dense(classes),
            ]
        )
    train = spec.experiment["train"]
    return model, keras.optimizers.SGD(train["lr"], momentum=train["momentum"])


def weights(variables: list[Any]) -> tuple[int, tuple[float, ...]]:
    """The bytes of the trained variables' gradients, and a fingerprint of their values by
    which the launcher compares replicas in other processes."""
    import tensorflow as tf

    grad_bytes = sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size for v in variables)
    return grad_bytes, tuple(float(tf.reduce_sum(tf.abs(v))) for v in variables)


def dataset(spec: WorkerSpec, rank: int, world: int, batch: int) -> Any:
    """Endless batches of `batch` (x, y) of process `rank` of `world`: random images of the
    model's input shape, made once (--synthetic), else, as the DDP workers take theirs, its
    shard (every world-th image from its rank) of the training split dlperf wrote for it,
    shuffled each epoch (seeded) and normalized, incomplete last batch dropped, without the
    experiment's augmentation."""
    import numpy as np
    import tensorflow as tf

    seed = spec.experiment["run"]["seed"] * 1000 + rank
    channels, height, width = spec.shape
    if spec.synthetic:
        g = tf.random.Generator.from_seed(seed)
        x = g.uniform((batch, height, width, channels))
        y = g.uniform((batch,), 0, spec.classes, dtype=tf.int32)
        return tf.data.Dataset.from_tensors((x, y)).repeat()
    assert spec.data_file is not None  # the study writes it for every point on real data
    with np.load(spec.data_file) as f:
        images, labels = f["images"][rank::world], f["labels"][rank::world].astype(np.int32)
        mean, std = f["mean"].astype(np.float32), f["std"].astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(len(labels), seed=seed)
    data = data.batch(batch, drop_remainder=True)
    data = data.map(lambda x, y: ((tf.cast(x, tf.float32) / 255 - mean) / std, y))
    return data.repeat().prefetch(tf.data.AUTOTUNE)


def train(spec: WorkerSpec, rank: int) -> RankResult:
    import keras
    import tensorflow as tf

    strategy = _strategy(spec)
    local = spec.per_worker_batch
    global_batch = local * strategy.num_replicas_in_sync
    with strategy.scope():
        model, optimizer = keras_model(spec)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def batches(context: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = context.get_per_replica_batch_size(global_batch)
        return dataset(spec, rank, context.num_input_pipelines, batch)

    data = iter(strategy.distribute_datasets_from_function(batches))

    def forward_backward(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                loss_fn(y, model(x, training=True)), global_batch_size=global_batch
            )
        return loss, tape.gradient(loss, model.trainable_variables)

    @tf.function  # type: ignore[untyped-decorator]
    def step(iterator: Any) -> tf.Tensor:
        def replica(inputs: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
            loss, grads = forward_backward(*inputs)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        losses = strategy.run(replica, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    @tf.function  # type: ignore[untyped-decorator]
    def compute_only(iterator: Any) -> Any:
        """Every replica's forward and backward, no update: gradients are all-reduced only
        when applied, so this is the step without its communication (and without the
        optimizer's update, a small share)."""

        def replica(inputs: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
            loss, grads = forward_backward(*inputs)
            return loss + 0 * tf.add_n([tf.reduce_sum(g) for g in grads])  # keeps grads

        return strategy.run(replica, args=(next(iterator),))

    def run(fn: Any) -> None:
        for value in strategy.experimental_local_results(fn(data)):
            value.numpy()  # the host has it: the step, all-reduce included, is done

    split = (lambda: run(compute_only)) if spec.compute_split else None
    times = measure_host_steps(spec, rank, lambda: run(step), split)
    variables = model.trainable_variables
    replicas = [strategy.experimental_local_results(v) for v in variables]
    spread = max(float(tf.reduce_max(tf.abs(r - rs[0]))) for rs in replicas for r in rs)
    local_replicas = len(strategy.extended.worker_devices)
    # the processes of the point: every one holds as many replicas as this one
    world = strategy.num_replicas_in_sync // local_replicas
    return times.result(rank, world, local * local_replicas, spread, weights(variables))


def main() -> None:
    restore_safepath()
    spec_path, rank = Path(sys.argv[1]), int(sys.argv[2])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
    write_pid(spec_path.parent, rank)
    leave_at_limit(spec_path.parent, rank)  # the CPU-time limit's SIGXCPU stops dlperf
    result = train(WorkerSpec.read(spec_path), rank)
    result.write(spec_path.parent / f"rank-{rank}.json")


if __name__ == "__main__":
    main()
