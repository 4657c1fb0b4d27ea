"""What every config section shares: the strict pydantic base, the value ranges many keys
check, and the precision names (one literal for run.precision and analyze.precision)."""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from dlperf.errors import UserError
from dlperf.parsing import as_given

# Ranges shared by many keys; pydantic checks them on the file and on --set alike.
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, lt=1)]
# A machine's figure (a peak in TFLOP/s, a bandwidth in GB/s, a price an hour): above it no
# machine's, and a legal float such as 1e300 becomes inf once scaled to FLOP/s (a time of 0,
# inf images/s). Device files (dlperf.analytic.devices) and flags hold to it alike.
FIGURE_MAX = 1e9
# A peak or a bandwidth below FIGURE_MIN (1 MFLOP/s, 1 KB/s) is no machine's either, and is
# what a time divides by: 1e-300 TFLOPS at a PPP of 1e-300 was 0 FLOP/s, a ZeroDivisionError,
# and FLOPs over it inf. At FIGURE_MIN and PPP_MIN a peak is still 1 FLOP/s.
FIGURE_MIN = 1e-6
Figure = Annotated[float, Field(ge=FIGURE_MIN, le=FIGURE_MAX)]
# A learning rate. At 1e12 a run already diverges at its first step (and says so); beyond,
# the optimizer's float32 arithmetic overflows (torch raises at 3.4e38, a traceback).
Rate = Annotated[float, Field(gt=0, le=1e12)]
# At most 2**31 - 1: what a C int holds, and far past any sane count of anything here.
Count = Annotated[int, Field(ge=1, lt=2**31)]
Size = Annotated[int, Field(ge=0, lt=2**31)]
# torch seeds the (seed, epoch) generators with seed * 1_000_003 + epoch, which must stay
# within the 64 bits a torch.Generator takes; 32 bits is the range seeds usually have.
Seed = Annotated[int, Field(ge=0, lt=2**32)]
# A percent of peak performance as a fraction (`--ppp`, a device file's `ppp`): above 1 it
# predicts a model faster than the peak; below PPP_MIN, a millionth of it, it is no measure of
# a machine, and times a peak it could round to 0 (see FIGURE_MIN).
PPP_MIN = 1e-6
PPP = Annotated[float, Field(ge=PPP_MIN, le=1)]
# Per-channel normalisation statistics, on the [0, 1] scale of the images.
Mean = Annotated[float, Field(ge=0, le=1)]
# A std under MIN_STD (far below any real image channel's) makes normalised pixels of 1e6 and
# more; at 1e-300 its inverse overflows float32 and the first step's loss is NaN, which was
# then blamed on the model.
MIN_STD = 1e-6
Std = Annotated[float, Field(ge=MIN_STD, le=1)]
# Autocast and counting precisions, as run.precision, analyze.precision and the device
# catalog spell them; dlperf/precision.py maps them to torch dtypes.
Precision = Literal["fp32", "bf16", "fp16"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)

# The error type of a list of a study's points that holds one value more than once.
REPEATED = "repeated"
Item = TypeVar("Item")


def _once_each(values: list[Item]) -> list[Item]:
    # A repeat is a point run twice (one student shown as two, a figure named top-k5-5) or
    # dropped without a word; a sweep axis refuses it too ("the same config as point 1").
    for i, value in enumerate(values):
        if value in values[:i]:
            n = values.count(value)
            times = "twice" if n == 2 else f"{n} times"
            said = {"value": as_given(value), "times": times}
            raise PydanticCustomError(REPEATED, "{value} is given {times}", said)
    return values


# A list whose items are a study's points (distill.top_k, scale.workers, infer.batch, ...):
# each value at most once.
Points = Annotated[list[Item], AfterValidator(_once_each)]


class Section(BaseModel):
    # strict: `--set train.epochs=true` or `epochs = "5"` is an error, not 1 or 5.
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        use_attribute_docstrings=True,
        validate_assignment=True,
        allow_inf_nan=False,
    )

    @field_validator("*")
    @classmethod
    def _utf8(cls, value: Any) -> Any:
        # A file name that is not UTF-8 reaches a key as surrogate escapes (Python's way with
        # such bytes from argv); the store, JSON and the figures all take UTF-8 only, and
        # would fail with a traceback after the run had started.
        found = _not_utf8(value, "")
        if found is not None:
            text, at = found
            where = f" (at {at})" if at else ""
            said, fix = _refusal(text)
            raise PydanticCustomError(NOT_UTF8, "{message}", {"message": f"{said}{where} ({fix})"})
        return value


# The error type of a string that cannot be written as UTF-8; its message shows the value.
NOT_UTF8 = "not_utf8"
_RENAME = "rename the file or folder so that its name is UTF-8"
# What to do about text that `read_as_ascii`: change the locale, not the text.
LOCALE_FIX = (
    "Python reads names as ASCII in a C or POSIX locale with UTF-8 mode off: run with "
    "PYTHONUTF8=1 or LC_ALL=C.UTF-8"
)


def check_utf8_name(what: str, name: str | PurePath) -> None:
    """Refuse a file name that is not UTF-8 given outside a config (a model file to analyze,
    export's --out) in the one line a config key naming it gets: `what: is not UTF-8: ...`."""
    found = _not_utf8(name, "")
    if found is not None:
        said, fix = _refusal(found[0])
        raise UserError(f"{what}: {said}", fix)


def _refusal(text: str) -> tuple[str, str]:
    """What is said of `text`, which cannot be written as UTF-8, and what to do about it."""
    if read_as_ascii(text):
        return f"is UTF-8, but Python read it as ASCII: '{_escaped(text)}'", LOCALE_FIX
    return f"is not UTF-8: '{_escaped(text)}'", _RENAME


def read_as_ascii(text: str) -> bool:
    """Whether `text`, which cannot be written as UTF-8 (its surrogate escapes), is UTF-8 all the
    same: bytes Python read as ASCII (a C or POSIX locale with UTF-8 mode off: PYTHONUTF8=0,
    -X utf8=0), each byte over 127 escaped. Renaming or retyping cannot help (LOCALE_FIX)."""
    try:
        text.encode("utf-8", "surrogateescape").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):  # a lone surrogate, or bytes not UTF-8
        return False
    return True


def _not_utf8(value: Any, at: str) -> tuple[str, str] | None:
    """The first text in `value` (in its lists and tables too, keys included) that cannot be
    encoded as UTF-8, and where in `value` it is (dotted keys, [i] for list items)."""
    if isinstance(value, PurePath):
        value = str(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value, at
        return None
    if isinstance(value, (list, tuple)):
        items: list[tuple[Any, str]] = [(v, f"{at}[{i}]") for i, v in enumerate(value)]
    elif isinstance(value, dict):
        items = []
        for key, v in value.items():
            inner = f"{at}.{key}" if at else str(key)
            items += [(key, at), (v, inner)]
    else:
        return None
    for item, where in items:
        found = _not_utf8(item, where)
        if found is not None:
            return found
    return None


def _escaped(text: str) -> str:
    """`text` with the bytes that are not UTF-8 written as \\xNN, as `ls -b` shows them (a lone
    surrogate that no byte made, as \\udNNN)."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")
