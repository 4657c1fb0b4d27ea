"""What every config section shares: the strict pydantic base, the value ranges many keys
check, and the precision names (one literal for run.precision and analyze.precision)."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

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
# Autocast and counting precisions, as run.precision, analyze.precision and the device
# catalog spell them; dlperf/precision.py maps them to torch dtypes.
Precision = Literal["fp32", "bf16", "fp16"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)


class Section(BaseModel):
    # strict: `--set train.epochs=true` or `epochs = "5"` is an error, not 1 or 5.
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        use_attribute_docstrings=True,
        validate_assignment=True,
        allow_inf_nan=False,
    )
