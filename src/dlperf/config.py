"""An experiment: one pydantic model per TOML section, defaults < TOML < --set overrides.

Each field's docstring is its help text (`dlperf config show` prints the resolved tree).
Unknown keys fail naming the file, the key and the closest valid key. [scale], [serve],
[detect], [distill], [analyze], [predict], [export], [infer] and [converge] hold the options
of the commands of those names (`detect finetune` for [detect]), whose flags are shortcuts
for the keys (see `shortcuts`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tomllib
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, cast, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticKnownError
from pydantic_core.core_schema import ErrorType

from dlperf.errors import UserError
from dlperf.parsing import MAX_DEPTH, TOO_DEEP, depth, did_you_mean, has_control, stem_name

# Ranges shared by many keys; pydantic checks them on the file and on --set alike.
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, lt=1)]
# A learning rate. At 1e12 a run already diverges at its first step (and says so); beyond,
# the optimizer's float32 arithmetic overflows (torch raises at 3.4e38, a traceback).
Rate = Annotated[float, Field(gt=0, le=1e12)]
# At most 2**31 - 1: what a C int holds, and far past any sane count of anything here.
Count = Annotated[int, Field(ge=1, lt=2**31)]
Size = Annotated[int, Field(ge=0, lt=2**31)]
# torch seeds the (seed, epoch) generators with seed * 1_000_003 + epoch, which must stay
# within the 64 bits a torch.Generator takes; 32 bits is the range seeds usually have.
Seed = Annotated[int, Field(ge=0, lt=2**32)]
# Per-channel normalisation statistics, on the [0, 1] scale of the images.
Mean = Annotated[float, Field(ge=0, le=1)]
Std = Annotated[float, Field(gt=0, le=1)]


class Section(BaseModel):
    # strict: `--set train.epochs=true` or `epochs = "5"` is an error, not 1 or 5.
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        use_attribute_docstrings=True,
        validate_assignment=True,
        allow_inf_nan=False,
    )


class ModelConfig(Section):
    name: str = "smallcnn"
    """Registry or torchvision model name, or "path/to/file.py:factory"."""
    kwargs: dict[str, Any] = {}
    """Extra keyword arguments for the model factory."""
    weights: str | None = None
    """Starting weights: a torchvision weights name of the model (e.g. "IMAGENET1K_V1"),
    "run:ID" or "run:last:NAME" (a stored run's checkpoint), or a state-dict file; the head is
    new, sized for the data's classes. None: random initialisation."""
    transfer: Literal["scratch", "finetune", "feature-extract"] = "scratch"
    """finetune: train all weights from model.weights; feature-extract: train only the new
    head, the backbone frozen (no gradients, batch-norm statistics fixed); scratch: random
    initialisation (model.weights then only sets the images' size and statistics).
    Unset: finetune when model.weights is given, else scratch."""
    head: Literal["new", "keep"] = "new"
    """new: a fresh head sized for the data's classes; keep: the weights' head too (the same
    classes, e.g. fine-tuning a `dlperf distill` student pre-trained on pseudo-labels)."""

    @model_validator(mode="before")
    @classmethod
    def _transfer_default(cls, data: Any) -> Any:
        # Resolved here, so that the stored config (and its hash) says what was trained.
        if isinstance(data, dict) and data.get("weights") and "transfer" not in data:
            return {**data, "transfer": "finetune"}
        return data


class DataConfig(Section):
    name: str = "digits"
    """digits | mnist5k | synthetic | cifar10 | cifar100 | fashionmnist | mnist | imagefolder |
    npz."""
    root: str = "data"
    """Directory of the on-disk data sets (cifar10, mnist, imagefolder ...); npz: the file."""
    download: bool = False
    """Let torchvision download the data set into `root` when it is missing."""
    loader: Literal["tensor", "torchvision"] = "tensor"
    """tensor: uint8 tensors in memory, augmented a batch at a time on the device.
    torchvision: the classic per-sample path (PIL transforms, DataLoader workers)."""
    num_workers: Size = 2
    """DataLoader worker processes for the torchvision loader."""
    in_memory: bool | None = None
    """Decode the whole data set into memory; None decides by `max_memory_gb`."""
    max_memory_gb: NonNegative = 4.0
    """Largest decoded data set kept in memory when `in_memory` is unset."""
    val_fraction: Fraction = 0.1
    """Share of the training set held out for per-epoch validation."""
    test_fraction: Fraction = 0.2
    """Share held out for the final test, for sets without an official test split."""
    split_seed: Seed = 0
    """Seed of the split permutation; fixed so splits do not change with run.seed."""
    limit: Count | None = None
    """Use at most this many training images (after the split), for quick runs."""
    holdout: Fraction = 0.0
    """Share of the training split set aside with its labels hidden: the unlabelled images of
    `dlperf distill --unlabeled NAME:holdout=F`. Runs train on the rest."""
    image_size: Count | None = None
    """Resize images to this side once at load (required for imagefolder); None: the data
    set's own size, or the resolution model.weights were trained at."""
    mean: Annotated[list[Mean], Field(min_length=1)] | None = None
    """Per-channel normalisation mean in [0,1]; None computes it from the training split."""
    std: Annotated[list[Std], Field(min_length=1)] | None = None
    """Per-channel normalisation std in [0,1]; None computes it from the training split."""
    shape: Annotated[list[Count], Field(min_length=3, max_length=3)] = [3, 32, 32]
    """synthetic: image shape C,H,W."""
    num_classes: Annotated[int, Field(ge=2, lt=2**31)] = 10
    """synthetic: number of classes."""
    size: Count = 2048
    """synthetic: number of training images."""


class ScheduleConfig(Section):
    kind: Literal["multistep", "cosine", "constant"] = "constant"
    """Learning-rate schedule over epochs."""
    milestones: list[Count] = []
    """multistep: epochs at which the rate is multiplied by gamma."""
    gamma: Annotated[float, Field(gt=0, le=1)] = 0.1
    """multistep: the factor applied at each milestone (a decay: at most 1)."""
    warmup_epochs: NonNegative = 0.0
    """Linear warm-up from 0 over this many epochs (fractions allowed)."""
    min_lr: NonNegative = 0.0
    """cosine: the rate at the end of training."""


class TrainConfig(Section):
    epochs: Annotated[int, Field(ge=1, le=1_000_000)] = 10
    """Passes over the training set."""
    batch_size: Count = 64
    """Images per step (before batch augmentation multiplies it by M)."""
    optimizer: Literal["sgd", "adamw"] = "sgd"
    """sgd (with momentum/Nesterov) or adamw."""
    lr: Rate = 0.05
    """Peak learning rate."""
    momentum: Fraction = 0.9
    """SGD momentum; AdamW beta1."""
    nesterov: bool = False
    """Nesterov momentum for SGD."""
    weight_decay: Annotated[float, Field(ge=0, le=1)] = 5e-4
    """L2 penalty (SGD) or decoupled weight decay (AdamW)."""
    grad_clip: Positive | None = None
    """Clip the gradient norm to this value; None = no clipping."""
    label_smoothing: Fraction = 0.0
    """Label smoothing of the cross-entropy loss."""
    backbone_lr_scale: Annotated[float, Field(gt=0, le=100)] = 1.0
    """Learning rate of everything but the classifier head, as a multiple of train.lr (e.g.
    0.1 to fine-tune pretrained weights gently); the schedule scales both."""
    schedule: ScheduleConfig = ScheduleConfig()


class AugmentConfig(Section):
    crop_padding: Size = 0
    """Random crop after zero-padding every side by this many pixels; 0 = off."""
    flip: bool = False
    """Random horizontal flip with probability 1/2."""
    cutout: Size = 0
    """Side of the square Cutout mask (DeVries & Taylor 2017); 0 = off."""
    batch_aug_m: Count = 1
    """Batch augmentation (Hoffer et al. 2019): M augmented copies of every sample."""


class TargetConfig(Section):
    accuracy: float | None = None
    """Validation top-1 accuracy whose first epoch and wall time are recorded."""

    @field_validator("accuracy")
    @classmethod
    def _accuracy(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v <= 1:
            raise ValueError("is a fraction in (0, 1], e.g. 0.95")
        return v


class ProfileConfig(Section):
    """`[run.profile]`: a window of steps recorded by torch.profiler after the run's warm-up
    (its steps are left out of throughput and phase timings), stored as a Chrome trace."""

    enabled: bool = False
    """Record the window (`--profile` sets this)."""
    warmup: Size = 1
    """Steps the profiler runs but discards before recording (its own start-up cost)."""
    active: Count = 3
    """Steps recorded in the trace."""
    record_shapes: bool = False
    """Record operators' input shapes (larger traces; groups operators by shape)."""
    profile_memory: bool = False
    """Record tensor allocations and frees."""
    with_stack: bool = False
    """Record Python stacks of operators (much larger traces and slower steps)."""

    @property
    def steps(self) -> int:
        """Steps the window takes from the run, after its warm-up."""
        return self.warmup + self.active if self.enabled else 0


class RunConfig(Section):
    name: str | None = None
    """Run name shown in listings; defaults to the experiment file's stem, followed by
    `model.name=NAME` when --set trains another model than the file's."""

    @field_validator("name")
    @classmethod
    def _printable(cls, v: str | None) -> str | None:
        if v is not None and has_control(v):
            raise ValueError("must hold no control characters (ESC, NUL, tab, newline, ...)")
        return v

    seed: Seed = 0
    """Seed of model initialisation, shuffling and augmentation."""
    device: str = "auto"
    """auto (CUDA, then MPS, then CPU) | cpu | cuda | cuda:1 | mps."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Autocast precision of forward and loss; fp16 adds a gradient scaler."""
    channels_last: bool = False
    """Keep images and weights in NHWC memory format."""
    compile: bool = False
    """torch.compile the model (compile time is excluded from throughput)."""
    threads: Count | Literal["auto"] | None = None
    """CPU threads for this process; None = all cores this process may use; "auto" = the
    cores other processes leave free as the run starts (measured, docs/run.md#threads)."""

    @field_validator("threads", mode="wrap")
    @classmethod
    def _count_or_auto(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # pydantic reports a bad value against each member of the union, under the member's
        # name ("run.threads.constrained-int"): say the error of the kind given, as a count's.
        try:
            return handler(value)
        except ValidationError as e:
            errors = e.errors()
            kind = "literal" if isinstance(value, str) else "int"
            first = next((x for x in errors if kind in str(x["loc"][0])), errors[0])
            raise PydanticKnownError(cast(ErrorType, first["type"]), first.get("ctx")) from None

    timing: Literal["off", "coarse", "phases"] = "coarse"
    """off: wall time only; coarse: per-epoch throughput; phases: per-step data, copy,
    forward, backward and optimizer times, synchronising the device after each."""
    warmup_steps: Size = 5
    """Steps excluded from throughput and phase timings at the start of the run."""
    log_every: Count = 10
    """Steps between metric flushes to the store (and loss finiteness checks)."""
    out_dir: str = "dlperf_runs"
    """Directory for checkpoints and other run artifacts."""
    checkpoint: bool = True
    """Save a checkpoint at the end of every epoch (needed for --resume)."""
    profile: ProfileConfig = ProfileConfig()
    """A profiled window of steps (torch.profiler), stored with the run as a trace."""


ScaleMode = Literal["strong", "weak"]


class ScaleConfig(Section):
    """`dlperf scale`: the points of a scaling study (every combination of workers, comm,
    strategy and bucket size) and how they are launched."""

    workers: Annotated[list[Count], Field(min_length=1)] = [1, 2]
    """Worker counts, one point each (the total over all nodes)."""
    mode: ScaleMode | Annotated[list[ScaleMode], Field(min_length=1)] = "strong"
    """strong: N workers share global_batch; weak: each has per_worker_batch (global N times
    it); a list (["weak", "strong"]): both, each compared within itself."""
    global_batch: Count | Annotated[list[Count], Field(min_length=1)] | None = None
    """strong: the global batch of every point (divisible by every worker count); a list: one
    strong-scaling series per global batch."""
    per_worker_batch: Count | Annotated[list[Count], Field(min_length=1)] | None = None
    """weak: the batch of each worker; a list: one weak-scaling series per batch."""
    steps: Count | None = None
    """Timed steps per point (give steps or epochs)."""
    repeat: Count = 3
    """Rounds: every point is measured this many times, in rounds interleaved across the
    points (a burst of load hits them alike); its figures are its median round's, its
    speedup the median over rounds with a 95% interval (docs/scale.md#rounds)."""
    threads_per_worker: Count | None = None
    """CPU threads of every worker at every point; None: the usable cores split between the
    most workers per node of the study, the same at every point (docs/scale.md#threads)."""
    epochs: Count | None = None
    """Timed epochs per point: epochs x (training images // global batch) steps."""
    warmup_steps: Size = 5
    """Untimed steps before the timed ones."""
    synthetic: bool = False
    """Random data of the model's input shape: system throughput without data loading."""
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """torch.distributed backend; auto: nccl when CUDA GPUs are present, else gloo."""
    comm: Annotated[
        list[Literal["allreduce", "fp16", "bf16", "powersgd", "noop"]], Field(min_length=1)
    ] = ["allreduce"]
    """DDP communication hooks, one point each: allreduce | fp16 | bf16 | powersgd | noop
    (horovod: allreduce | fp16, its fp16 compression)."""
    framework: Literal["torch", "tensorflow", "horovod"] = "torch"
    """torch (DDP via torchrun) | tensorflow (tf.distribute; the `tensorflow` extra) |
    horovod (horovodrun; built by `make horovod`)."""
    strategy: list[Literal["ddp", "dp", "mirrored", "multiworker", "torch", "tensorflow"]] = []
    """torch: ddp (DistributedDataParallel) | dp (one-process DataParallel, GPUs only);
    tensorflow: mirrored (MirroredStrategy, one process) | multiworker
    (MultiWorkerMirroredStrategy, one process per worker); horovod: its binding, torch |
    tensorflow. One point each; empty: ddp, mirrored for tensorflow, torch for horovod."""
    allreduce: list[Literal["nccl", "hierarchical", "one-device", "auto", "ring"]] = []
    """tensorflow: the all-reduce, one point each; mirrored: nccl | hierarchical | one-device
    (default nccl on GPUs, else one-device), multiworker: auto | ring | nccl (default auto)."""
    bucket_mb: list[Positive] = []
    """DDP bucket sizes in MB (horovod: its tensor-fusion threshold), one point each; empty:
    DDP's default (25 MB), Horovod's (64 MB)."""
    comm_split: bool = True
    """Re-run each multi-worker point under the no-op hook to split compute from communication."""
    price_per_hour: NonNegative | None = None
    """Price per worker-hour for cost_per_epoch; None: the catalog price of `device`, if set."""
    device: str | None = None
    """Device of the catalog (`dlperf devices`) whose price per hour to use."""
    on_failure: Literal["continue", "stop"] = "continue"
    """After a failed point: continue with the next one or stop the study."""
    allow_oversubscribe: bool = False
    """Allow more workers per node than usable cores (gloo); timings are then pessimistic."""
    nnodes: Count = 1
    """Nodes taking part; the workers are divided evenly over them."""
    node_rank: Size = 0
    """This node's rank, 0 .. nnodes-1; node 0 writes the run store."""
    rdzv: str | None = None
    """HOST:PORT of the c10d rendezvous on node 0 (needed when nnodes > 1)."""
    chunks: Count = 5
    """synthetic: chunks of the timed steps whose throughputs give the 95% interval."""
    plots: bool = True
    """Save the study's figures as artifacts of its first run."""
    memory_cap_gb: Positive | None = None
    """scale max-batch on CPU: a worker's peak resident memory (GB) that fails a batch size."""

    @field_validator("mode", "global_batch", "per_worker_batch", mode="wrap")
    @classmethod
    def _one_or_a_list(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # pydantic reports a bad value against every member of the union, each under the
        # member's name; the error of the form given (one value or a list) is the one to say.
        try:
            return handler(value)
        except ValidationError as e:
            errors, many = e.errors(), type(value) is list
            given = [x for x in errors if str(x["loc"][0]).startswith("list[") == many]
            first = (given or errors)[0]
            # An error pydantic raised, so its type is one of its own known ones.
            raise PydanticKnownError(cast(ErrorType, first["type"]), first.get("ctx")) from None

    def modes(self) -> list[ScaleMode]:
        """The study's modes, in the order given."""
        return list(dict.fromkeys(self.mode if isinstance(self.mode, list) else [self.mode]))

    def batches(self, mode: ScaleMode) -> list[int] | None:
        """The batches a mode's series are at, smallest first (strong: global, weak: per
        worker); None when none is given."""
        given = self.global_batch if mode == "strong" else self.per_worker_batch
        if given is None:
            return None
        return sorted(set(given if isinstance(given, list) else [given]))


class ServeConfig(Section):
    """`dlperf serve`: where the server listens and how it batches requests."""

    host: str = "127.0.0.1"
    """Address to listen on; other than loopback, other machines reach it unauthenticated."""
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    """TCP port; 0 = any free port (printed when the server starts)."""
    max_batch: Count = 32
    """Most rows in one model call (models with a dynamic batch dimension)."""
    max_wait_ms: NonNegative = 5.0
    """How long the first request of a batch waits for company."""
    queue: Count = 256
    """Waiting requests before the server answers 503."""
    threads: Count | None = None
    """ONNX Runtime intra-op threads; None = its own choice."""
    max_body_mb: NonNegative = 8.0
    """Largest request body in MiB; larger ones get 413."""
    max_pixels: Count | None = None
    """Largest image /predict decodes, in pixels; None = 40,000,000."""
    read_timeout_s: Positive = 30.0
    """Most seconds a request may take to arrive, headers and body, from the connection's
    opening (or the next request's first byte); a slower client gets 408 and is disconnected."""
    max_connections: Count = 512
    """Most connections open at once; a request on one more gets 503 and its connection is
    closed."""


class DetectConfig(Section):
    """`dlperf detect finetune`: the detector, its data splits and the training recipe."""

    model: str = "ssdlite320_mobilenet_v3_large"
    """ssdlite320_mobilenet_v3_large | ssd300_vgg16 | ssd300_mobilenet_v1."""
    # The model-dependent rules (a multiple of 32; 300 only for the SSD300s) are checked where
    # the detector is built, as for `detect export --size`; this is the range they share.
    size: Annotated[int, Field(ge=96, le=640)] | None = None
    """Square input side, a multiple of 32 (the SSD300s: 300 only); None: the side the
    weights were trained at; without weights, the images' longer side rounded up to a
    multiple of 32, from 96 up to the model's (320 or 300): 96 for make-shapes' set."""
    # The defaults are the recipe that learns the make-shapes set from random weights on a
    # 2-core CPU within 5 minutes (docs/course.md): AdamW at 3e-3 reaches mAP 0.38 in 10
    # epochs where SGD at 0.05 stays at 0.01, and 0.58 in 20, where the boxes that matter
    # score above detect run's 0.5.
    epochs: Count = 20
    """Passes over the train split."""
    batch: Count = 8
    """Images per step (and per forward pass when measuring AP)."""
    optimizer: Literal["adamw", "sgd"] = "adamw"
    """adamw | sgd (with momentum, as torchvision's SSDlite reference; dlperf's former
    defaults: sgd, lr 0.01, weight_decay 4e-5)."""
    lr: Rate = 0.003
    """Peak learning rate, decayed to 0 over all steps by a cosine."""
    momentum: Fraction = 0.9
    """SGD momentum; AdamW beta1."""
    weight_decay: Annotated[float, Field(ge=0, le=1)] = 1e-4
    """Weight decay: decoupled for AdamW, an L2 penalty for SGD."""
    train_split: str = "train"
    """ImageSets/Main split to train on."""
    val_split: str = "val"
    """ImageSets/Main split AP@0.5 is measured on, before and after."""
    ap_method: Literal["area", "11point"] = "area"
    """area: all-point AP (VOC2010+); 11point: the VOC2007 devkit's."""
    seed: Seed = 0
    """Seed of initialisation, shuffling and flips."""
    threads: Count | None = None
    """Intra-op threads; None = all cores this process may use."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Training's autocast, as run.precision: fp16 with a gradient scaler."""


class DistillConfig(Section):
    """`dlperf distill`: teacher-student training on pseudo-labels (Yalniz et al. 2019)."""

    unlabeled: str | None = None
    """The unlabelled images: NAME[:KEY=VALUE,...] (a data set and data.* keys, e.g.
    "mnist5k:image_size=8"), or NAME:holdout=F (a share of the experiment's own training split,
    its labels hidden)."""
    top_k: Annotated[list[Count], Field(min_length=1)] = [100]
    """Images kept per class, one student each: the K the teacher scores highest."""
    top_p: Count = 1
    """Classes an image may be kept for: its P highest-scored."""
    teacher: Count | None = None
    """A finished stored run to use as the teacher; None: train it from the experiment."""
    student: str | None = None
    """The student's model name; None: the experiment's model."""
    pretrain_epochs: Count | None = None
    """Epochs of the student's pre-training on pseudo-labels; None: train.epochs."""
    finetune_epochs: Count | None = None
    """Epochs of the student's fine-tuning on the labelled data; None: train.epochs."""
    finetune_lr: Rate | None = None
    """Learning rate of the fine-tuning; None: train.lr."""
    score_batch: Count = 256
    """Images per forward pass when the teacher scores the unlabelled set."""


Precision = Literal["fp32", "fp16", "bf16"]
# SI prefixes a number of FLOPs may carry: "15.5G" is 15.5e9.
SI = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


class AnalyzeConfig(Section):
    """`dlperf analyze`, and the counting `dlperf predict` predicts from: the input, batch and
    precision a model is counted at, and what the totals include."""

    input: Annotated[list[Count], Field(min_length=1)] | None = None
    """Input shape without the batch, e.g. [3, 224, 224]; None: 3,224,224 for torchvision's
    models, 3,32,32 otherwise."""
    batch: Count = 1
    """Batch size."""
    train: bool = False
    """Count a training step: forward + backward and training memory."""
    precision: Precision = "fp32"
    """fp32 | fp16 | bf16: the dtype of weights and activations."""
    classes: Count | None = None
    """Output classes; None: 1000 for torchvision's models, 10 for dlperf's, a model file's
    factory's own num_classes default."""
    bias: bool = True
    """Count parameters with biases (false: without parameters named *bias, as tables that
    ask for params 'without biases' do)."""
    activations: Literal["all", "conv-pool-fc"] = "all"
    """Whose outputs the activation totals count: all (every row) or conv-pool-fc
    (convolution, pooling and linear layers only, as course tables count them)."""
    macs_convention: Literal["dlperf", "torchinfo", "ptflops", "fvcore"] = "dlperf"
    """Whose MACs to count: dlperf (weight products only; bias adds, normalisation and
    pooling in FLOPs), or torchinfo's, ptflops' or fvcore's, to reproduce a table they made."""


class PredictConfig(Section):
    """`dlperf predict`: the device and PALEO's figures (the model is counted as [analyze]
    says: input, batch, train, precision, classes)."""

    device: str | None = None
    """Catalog device (`dlperf devices`); None with predict.measure: this machine,
    calibrated in the same rounds as the measurement."""
    ppp: Annotated[float, Field(gt=0, le=1)] | None = None
    """Platform percent of peak in (0, 1] for every operator kind; None: the device's
    calibrated rates, or a catalog GPU's peak (PPP = 1)."""
    peak_tflops: Positive | None = None
    """Peak in 10^12 FLOP/s at analyze.precision instead of the device's (e.g. 8.73 for a
    whole K80 board); bandwidth stays the device's."""
    flops: Positive | None = None
    """FLOPs of one image (forward; training: forward + backward) for FLOPs / peak instead of
    the counted ones: a number, or text with an SI prefix ("15.5G")."""
    measure: bool = False
    """Also run the model here, interleaved with calibration kernels, and compare; the result
    is stored as a run."""
    reps: Count = 10
    """predict.measure: rounds of calibration kernels + one timed model run."""

    @field_validator("flops", mode="before")
    @classmethod
    def _si_prefix(cls, value: Any) -> Any:
        # Only text ending in a prefix is read here; anything else meets the strict number check.
        if isinstance(value, str) and value[-1:].upper() in SI:
            try:
                return float(value[:-1]) * SI[value[-1].upper()]
            except ValueError:
                raise ValueError(
                    f"expected a number of FLOPs per image, e.g. 15.5G (got {value!r})"
                ) from None
        return value


class ExportConfig(Section):
    """`dlperf export`: the ONNX file's form, a registry model's input and classes, and the
    parity tolerance."""

    input: Annotated[list[Count], Field(min_length=3, max_length=3)] | None = None
    """C,H,W of a registry model's input; its normalisation is then mean 0.5, std 0.5. None:
    3,224,224 with ImageNet's mean and std."""
    num_classes: Count | None = None
    """Classes of a registry model; None: the model's (10)."""
    opset: Count | None = None
    """ONNX opset; None: the exporter's."""
    dynamic_batch: bool = False
    """Any batch size; false: a fixed batch of 1."""
    single_file: bool = False
    """Weights inside the .onnx file, no MODEL.onnx.data beside it."""
    rtol: NonNegative = 1e-3
    """Parity: relative tolerance, |onnx - torch| <= atol + rtol * |torch|."""
    atol: NonNegative = 1e-5
    """Parity: absolute tolerance."""


class InferConfig(Section):
    """`dlperf infer` (classify images) and `dlperf infer bench` (ONNX Runtime against
    PyTorch)."""

    topk: Count = 5
    """Classes per image."""
    batch: Annotated[list[Count], Field(min_length=1)] = [1, 8, 32]
    """bench: batch sizes, one row each."""
    threads: Count | None = None
    """bench: intra-op threads of both contenders; None: all cores this process may use."""
    repeats: Count = 20
    """bench: timed calls per contender and batch."""
    torch: str | None = None
    """bench: the PyTorch contender, a stored run ID or a registry name; None: the model the
    ONNX file's metadata names."""


class ConvergeConfig(Section):
    """`dlperf converge fit | predict | regress`: how a curve is read, which of its points are
    fitted, and what is predicted from them."""

    x: str | None = None
    """CSV column of the step; None: the row number, 1, 2, ..."""
    y: str | None = None
    """CSV column of the metric (needed for CSV curves)."""
    metric: Literal["loss", "accuracy", "error"] = "loss"
    """loss | accuracy | error (accuracy is fitted as 1 - accuracy)."""
    key: str | None = None
    """Stored metric key of a run; None: val/loss, val/acc1 (error: 1 - val/acc1)."""
    upto: Annotated[float, Field(gt=0, le=1)] | None = None
    """Fit the first fraction of the points, e.g. 0.3 (or give upto_step)."""
    upto_step: Positive | None = None
    """Fit the points up to this step."""
    target: float | None = None
    """predict: the value to reach, in the metric's units (an accuracy or error in [0, 1]);
    regress: with --predict, the step reaching it."""
    form: Literal["ensemble", "optimus", "power"] = "ensemble"
    """predict: ensemble (a distribution over 5 curve families) | optimus | power."""


class Experiment(Section):
    """What is trained: a TOML file's [model], [data], [train], [augment], [target] and [run]."""

    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    augment: AugmentConfig = AugmentConfig()
    target: TargetConfig = TargetConfig()
    run: RunConfig = RunConfig()

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Experiment:
        train, schedule = self.train, self.train.schedule
        if train.optimizer == "sgd" and train.nesterov and train.momentum == 0:
            raise ValueError("train.nesterov: Nesterov momentum needs train.momentum > 0")
        if schedule.kind == "multistep" and not schedule.milestones:
            raise ValueError("train.schedule.milestones: multistep needs at least one epoch")
        # analyze and predict count the architecture (a frozen backbone's trainable head too):
        # they load no weights, so need none named.
        counting = bool(info.context and info.context.get("architecture_only"))
        if self.model.transfer != "scratch" and self.model.weights is None and not counting:
            raise ValueError(
                f"model.transfer: {self.model.transfer} needs model.weights (a torchvision "
                'weights name, run:ID or a state-dict file), or use transfer = "scratch"'
            )
        if schedule.kind == "cosine" and schedule.min_lr > train.lr:
            raise ValueError(
                f"train.schedule.min_lr: must not exceed train.lr {train.lr:g} "
                f"(got {schedule.min_lr:g})"
            )
        if self.data.name == "synthetic":
            _synthetic_fits(self.data)
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def config_hash(self) -> str:
        """Hash of everything that changes what is trained: not the run's name, paths or
        profiled window. (Runs stored before the command sections left `Experiment` hashed
        them out too, so their hashes are unchanged.)"""
        d = self.to_dict()
        for key in ("name", "out_dir", "log_every", "profile"):
            d["run"].pop(key)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _synthetic_fits(data: DataConfig) -> None:
    """The synthetic set is drawn into memory at once (uint8, sizes as its reader draws them):
    refused here, before anything is allocated, when it cannot fit in the machine's memory."""
    held = max(1, data.size // 8)  # its validation and test sets each
    images = data.size + 2 * held
    needed = images * math.prod(data.shape)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > memory:
        raise ValueError(
            f"data.shape {data.shape}: the synthetic set's {images} images (data.size "
            f"{data.size}, {held} validation, {held} test) take {needed / 2**30:,.1f} GiB, "
            f"more than this machine's {memory / 2**30:,.1f} GiB of memory (give a smaller "
            "data.shape or data.size)"
        )


class Commands(Section):
    """The commands' sections, which a TOML file may hold beside the experiment's tables."""

    scale: ScaleConfig = ScaleConfig()
    serve: ServeConfig = ServeConfig()
    detect: DetectConfig = DetectConfig()
    distill: DistillConfig = DistillConfig()
    analyze: AnalyzeConfig = AnalyzeConfig()
    predict: PredictConfig = PredictConfig()
    export: ExportConfig = ExportConfig()
    infer: InferConfig = InferConfig()
    converge: ConvergeConfig = ConvergeConfig()


class Job(BaseModel):
    """What one command runs: the experiment and the section(s) of the command."""

    model_config = ConfigDict(frozen=True)
    experiment: Experiment
    counts_only: ClassVar[bool] = False  # analyze and predict count the model: no weights


class ScaleJob(Job):
    scale: ScaleConfig


class ServeJob(Job):
    serve: ServeConfig


class DetectJob(Job):
    detect: DetectConfig


class DistillJob(Job):
    distill: DistillConfig


class AnalyzeJob(Job):
    counts_only = True
    analyze: AnalyzeConfig


class PredictJob(AnalyzeJob):
    predict: PredictConfig


class ExportJob(Job):
    export: ExportConfig


class InferJob(Job):
    infer: InferConfig


class ConvergeJob(Job):
    converge: ConvergeConfig


# --- loading ------------------------------------------------------------------------------


# The top-level tables of a TOML file.
_FILE_FIELDS = {**Experiment.model_fields, **Commands.model_fields}


def check_keys(
    raw: dict[str, Any], fields: dict[str, FieldInfo], where: str, prefix: str = ""
) -> None:
    """Name an unknown key and its closest valid spelling before pydantic sees it."""
    for key, value in raw.items():
        path = f"{prefix}{key}"
        if key not in fields:
            # repr: a key read from a file may hold a newline, and the error stays one line
            hint = did_you_mean(
                key, fields, f"valid keys: {', '.join(fields)}", cutoff=0.5, quote=True
            )
            raise UserError(f"{where}: unknown key {path!r}", hint)
        annotation = fields[key].annotation
        if (
            isinstance(value, dict)
            and isinstance(annotation, type)
            and issubclass(annotation, BaseModel)
        ):
            check_keys(value, annotation.model_fields, where, f"{path}.")


def parse_value(text: str) -> Any:
    """A --set value is a TOML value (numbers, booleans, lists); anything else is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except RecursionError:  # the parser recurses once per level of [ or {
        raise UserError(f"--set value {text[:20]!r}...: {TOO_DEEP}") from None


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """`--set KEY=VALUE` into `raw`."""
    if "=" not in assignment:
        raise UserError(f"--set {assignment!r}: expected KEY=VALUE", "e.g. --set train.lr=0.01")
    key, _, text = assignment.partition("=")
    if not all(key.strip().split(".")):
        raise UserError(f"--set {assignment!r}: empty key", "e.g. --set train.lr=0.01")
    assign(raw, key.strip(), parse_value(text.strip()), "--set")


def assign(raw: dict[str, Any], key: str, value: Any, where: str) -> None:
    """Set the dotted `key` in `raw` to a typed `value` (--set's, or a sweep point's); a table
    merges into the table it replaces (e.g. model.kwargs). `where` names the setting in
    errors."""
    parts = key.split(".")
    if not all(parts):
        raise UserError(f"{where}: empty part in key {key!r}", 'e.g. "train.lr"')
    node = raw
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise UserError(f"{where}: {key!r}: {part!r} is a value, not a section")
    old = node.get(parts[-1])
    if isinstance(value, dict) and isinstance(old, dict):
        node[parts[-1]] = {**old, **value}
    else:
        node[parts[-1]] = value


def _toml(value: Any) -> str:
    """`value` as the TOML text that --set reads back as `value`, on one line."""
    import tomli_w

    if isinstance(value, list):
        return f"[{', '.join(map(_toml, value))}]"
    if isinstance(value, dict):  # inline: tomli_w would write a table
        pairs = ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in value.items())
        return "{" + pairs + "}"
    return tomli_w.dumps({"v": value}).removeprefix("v = ").strip()


def _is_list(annotation: Any) -> bool:
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return get_origin(annotation) is list


def _takes_text(annotation: Any) -> bool:
    """Whether a key holds text as text: a str, a Literal of words, or a union with one."""
    if annotation is str:
        return True
    if get_origin(annotation) is Literal:
        return any(isinstance(value, str) for value in get_args(annotation))
    return any(_takes_text(member) for member in get_args(annotation))


def shortcuts(section: str, flags: dict[str, Any]) -> list[str]:
    """The `--set` assignments of the command-line flags given (not None): each flag is a
    shortcut for the key of its name in `section`, so one validation serves flags, files and
    --set alike. A list key's flag takes a comma-separated list, each item read as --set reads
    a value; a key that takes one value or a list (scale.mode) keeps a single item a value.
    A flag given as text for a key that holds no text (predict.peak_tflops) is read as --set
    reads a value, so that the key's own check names what is wrong."""
    keys = Commands.model_fields[section].annotation.model_fields  # type: ignore[union-attr]
    assignments = []
    for name, value in flags.items():
        if value is None:
            continue
        annotation = keys[name].annotation
        union = get_origin(annotation) in (Union, UnionType)
        members = [m for m in get_args(annotation) if m is not NoneType] if union else [annotation]
        many = any(_is_list(member) for member in members)
        # one value or a list: a list member beside a member that is not one
        either = many and not all(_is_list(member) for member in members)
        if many:
            value = [parse_value(item.strip()) for item in value.split(",") if item.strip()]
            if either and len(value) == 1:
                value = value[0]
        elif isinstance(value, str) and not _takes_text(annotation):
            value = parse_value(value)
        assignments.append(f"{section}.{name}={_toml(value)}")
    return assignments


J = TypeVar("J", bound=Job)


def load_job(
    job: type[J], path: str | Path | None, overrides: list[str], **flags: dict[str, Any]
) -> J:
    """The job a command runs: defaults < the file at `path` < `overrides` (--set) < the
    command's flags, given per section as {key: value}, None for a flag not given (e.g.
    `scale={"workers": "1,2"}`): each is a shortcut for its key, and an error in it names
    the flag."""
    assignments = list(overrides)
    options: dict[str, str] = {}  # a key set by a flag: its error names the flag the user typed
    for section, given in flags.items():
        assignments += shortcuts(section, given)
        options |= {f"{section}.{name}": "--" + name.replace("_", "-")
                    for name, value in given.items() if value is not None}  # fmt: skip
    exp, commands = load_file(path, assignments, options, {"architecture_only": job.counts_only})
    sections = {name: getattr(commands, name) for name in job.model_fields if name != "experiment"}
    return cast(J, job.model_construct(experiment=exp, **sections))  # each part is validated


# pydantic's words for a value out of range, in the words of dlperf's other messages.
_RANGE_MESSAGES = {
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "finite_number": "must be a finite number",
    "too_short": "must have {min_length} or more values",
    "too_long": "must have {max_length} or fewer values",
}


def _bound(value: Any) -> Any:
    """0.0 as 0 and 1.0 as 1: a float field's bounds read as the integers they are; a large
    one as 1e+12, not its twelve zeros."""
    if isinstance(value, float) and abs(value) >= 1e6:
        return f"{value:g}"
    return int(value) if isinstance(value, float) and value.is_integer() else value


def validation_message(
    error: ValidationError, where: str, options: dict[str, str] | None = None
) -> UserError:
    """The first error of `error` on one line, after `where` it came from, or after the flag
    that set its key when `options` (dotted key: flag) has one."""
    first = error.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    flag = next((f for k, f in (options or {}).items() if f"{loc}.".startswith(f"{k}.")), None)
    template = _RANGE_MESSAGES.get(first["type"])
    if template is not None:
        msg = template.format(**{k: _bound(v) for k, v in first.get("ctx", {}).items()})
    else:
        msg = first["msg"].removeprefix("Value error, ")
    got = first.get("input")
    got_text = f" (got {got!r})" if got is not None and not isinstance(got, dict) else ""
    if flag is not None:
        return UserError(f"{flag}: {loc}: {msg}{got_text}")
    return UserError(f"{where}: {loc}: {msg}{got_text}" if loc else f"{where}: {msg}")


def build_file(
    raw: dict[str, Any],
    where: str = "config",
    options: dict[str, str] | None = None,
    context: dict[str, Any] | None = None,
) -> tuple[Experiment, Commands]:
    """A TOML file's experiment and command sections (a stored run's config may hold the
    latter too: runs stored before they left `Experiment` do)."""
    if depth(raw) > MAX_DEPTH:
        raise UserError(f"{where}: {TOO_DEEP}")
    check_keys(raw, _FILE_FIELDS, where)
    commands = {key: value for key, value in raw.items() if key in Commands.model_fields}
    rest = {key: value for key, value in raw.items() if key not in commands}
    try:
        return Experiment.model_validate(rest, context=context), Commands.model_validate(commands)
    except ValidationError as e:
        raise validation_message(e, where, options) from None


def build_experiment(raw: dict[str, Any], where: str = "config") -> Experiment:
    return build_file(raw, where)[0]


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{p} is a directory, not an experiment file", "give a TOML file in it")
    if not p.is_file():
        raise UserError(f"{p}: no such experiment file", "give the path of a TOML file")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8-sig"))  # a BOM, as Notepad writes it
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{p}: malformed TOML: {e}") from None
    except RecursionError:  # the parser recurses once per level of [ or {
        raise UserError(f"{p}: {TOO_DEEP}") from None
    except UnicodeDecodeError:
        raise UserError(f"{p}: not a text file") from None


def load_experiment(path: str | Path | None, overrides: list[str] | None = None) -> Experiment:
    return load_file(path, overrides)[0]


def load_file(
    path: str | Path | None,
    overrides: list[str] | None = None,
    options: dict[str, str] | None = None,
    context: dict[str, Any] | None = None,
) -> tuple[Experiment, Commands]:
    """defaults < TOML file < --set overrides, validated in one place (with pydantic's
    `context`); an error in a key that `options` (dotted key: flag) lists names the flag."""
    raw = read_toml(path) if path is not None else {}
    where = str(path) if path is not None else "config"
    model = raw.get("model")
    file_model = model.get("name") if isinstance(model, dict) else None
    for assignment in overrides or []:
        apply_override(raw, assignment)
    exp, commands = build_file(raw, where + (" with --set" if overrides else ""), options, context)
    if exp.run.name is None and path is not None:
        # The file's name often names its model: say so when --set trains another one.
        changed = exp.model.name != (file_model or ModelConfig.model_fields["name"].default)
        stem = stem_name(Path(path))  # a file's name may hold anything
        exp.run.name = stem + (f" model.name={exp.model.name}" if changed else "")
    return exp, commands


def to_toml(exp: Experiment, commands: Commands | None = None) -> str:
    import tomli_w

    # TOML has no null: unset optional keys are left out (they take their defaults).
    def drop_none(d: dict[str, Any]) -> dict[str, Any]:
        return {
            k: drop_none(v) if isinstance(v, dict) else v for k, v in d.items() if v is not None
        }

    tables = exp.to_dict() | (commands.model_dump(mode="json") if commands else {})
    return tomli_w.dumps(drop_none(tables))


def describe(
    fields: dict[str, FieldInfo] = _FILE_FIELDS, prefix: str = ""
) -> list[tuple[str, str]]:
    """(dotted key, help) for every key of a TOML file, for `dlperf config keys`."""
    rows: list[tuple[str, str]] = []
    for name, field in fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows += describe(annotation.model_fields, f"{prefix}{name}.")
        else:
            rows.append((f"{prefix}{name}", " ".join((field.description or "").split())))
    return rows
