"""`[scale]`: the points of a scaling study and how they are launched (`dlperf scale`)."""

# Section is a pydantic model, which copies a field's mutable default per instance; ruff
# knows that of pydantic's own BaseModel only, not of a subclass imported from base.py.
# ruff: noqa: RUF012

from __future__ import annotations

from typing import Annotated, Any, Literal, cast

from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, field_validator
from pydantic_core import PydanticCustomError, PydanticKnownError
from pydantic_core.core_schema import ErrorType

from dlperf.config.base import REPEATED, Count, NonNegative, Points, Positive, Section, Size
from dlperf.config.experiment import Job

ScaleMode = Literal["strong", "weak"]


class ScaleConfig(Section):
    """`dlperf scale`: the points of a scaling study (every combination of workers, comm,
    strategy and bucket size) and how they are launched."""

    workers: Annotated[Points[Count], Field(min_length=1)] = [1, 2]
    """Worker counts, one point each (the total over all nodes)."""
    mode: ScaleMode | Annotated[Points[ScaleMode], Field(min_length=1)] = "strong"
    """strong: N workers share global_batch; weak: each has per_worker_batch (global N times
    it); a list (["weak", "strong"]): both, each compared within itself."""
    global_batch: Count | Annotated[Points[Count], Field(min_length=1)] | None = None
    """strong: the global batch of every point (divisible by every worker count); a list: one
    strong-scaling series per global batch."""
    per_worker_batch: Count | Annotated[Points[Count], Field(min_length=1)] | None = None
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
        Points[Literal["allreduce", "fp16", "bf16", "powersgd", "noop"]], Field(min_length=1)
    ] = ["allreduce"]
    """DDP communication hooks, one point each: allreduce | fp16 | bf16 | powersgd | noop
    (horovod: allreduce | fp16, its fp16 compression)."""
    framework: Literal["torch", "tensorflow", "horovod"] = "torch"
    """torch (DDP via torchrun) | tensorflow (tf.distribute; the `tensorflow` extra) |
    horovod (horovodrun; built by `make horovod`)."""
    strategy: Points[Literal["ddp", "dp", "mirrored", "multiworker", "torch", "tensorflow"]] = []
    """torch: ddp (DistributedDataParallel) | dp (one-process DataParallel, GPUs only);
    tensorflow: mirrored (MirroredStrategy, one process) | multiworker
    (MultiWorkerMirroredStrategy, one process per worker); horovod: its binding, torch |
    tensorflow. One point each; empty: ddp, mirrored for tensorflow, torch for horovod."""
    allreduce: Points[Literal["nccl", "hierarchical", "one-device", "auto", "ring"]] = []
    """tensorflow: the all-reduce, one point each; mirrored: nccl | hierarchical | one-device
    (default nccl on GPUs, else one-device), multiworker: auto | ring | nccl (default auto)."""
    bucket_mb: Points[Positive] = []
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
            # The list member's name is list[...], or a validator's around it (Points').
            given = [x for x in errors if ("list[" in str(x["loc"][0])) == many]
            first = (given or errors)[0]
            if first["type"] == REPEATED:  # Points' own error, as it said it
                raise PydanticCustomError(REPEATED, "{said}", {"said": first["msg"]}) from None
            # An error pydantic raised, so its type is one of its own known ones.
            raise PydanticKnownError(cast(ErrorType, first["type"]), first.get("ctx")) from None

    def modes(self) -> list[ScaleMode]:
        """The study's modes, in the order given."""
        return list(self.mode) if isinstance(self.mode, list) else [self.mode]

    def batches(self, mode: ScaleMode) -> list[int] | None:
        """The batches a mode's series are at, smallest first (strong: global, weak: per
        worker); None when none is given."""
        given = self.global_batch if mode == "strong" else self.per_worker_batch
        if given is None:
            return None
        return sorted(given if isinstance(given, list) else [given])


class ScaleJob(Job):
    scale: ScaleConfig
