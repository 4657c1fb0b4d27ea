"""The public Python API: what the commands do, callable from a notebook or a script.

`import dlperf` stays light: these functions import torch, SciPy and the store only when
called, with a Ctrl-C held until those imports end (`stopping.deferred`): one landing inside
torch's first import left it half-imported, and every later call in the notebook failed.
Every function raises `dlperf.UserError` for bad input, as the commands do.
"""

from __future__ import annotations

import atexit
import copy
import functools
import hashlib
import json
import math
import numbers
import operator
import os
import reprlib
import sys
import threading
import time
import types
import warnings
import weakref
from collections import ChainMap, defaultdict
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from dlperf import stopping
from dlperf.errors import StoreGone, UserError, error_text, interrupted, model_exited
from dlperf.formatting import KEYS_LISTED, few
from dlperf.parsing import (
    KEYS_HINT,
    MAX_DEPTH,
    TOO_DEEP,
    as_given,
    flat_clash,
    has_control,
    key_fault,
    printable_key,
    printable_keys,
    small_whole_numbers,
    stored_as,
    subscripted,
)
from dlperf.progress import NullReporter

if TYPE_CHECKING:
    import numpy as np
    import torch

    from dlperf.analytic.counting import Analysis
    from dlperf.records import RunResult
    from dlperf.store import RunStore
    from dlperf.store.query import Comparison
    from dlperf.store.record import RunRecord
    from dlperf.store.runstore import StoreFile


# --- checks of what a caller passes ------------------------------------------------------
# Without them, a wrong type or value surfaces as torch's RuntimeError, pathlib's TypeError or
# NumPy's ValueError from deep inside, which a caller catching UserError for bad input misses.


# Text and bytes of any type, refused where a number or a list is taken: bytes were walked as
# numbers (bytearray(b"12") as runs 49 and 50) and float() read bytearray(b"1.5") as 1.5.
_TEXT = (str, bytes, bytearray, memoryview)


def _whole(value: Any) -> bool:
    """Whether `value` is a whole number (NumPy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _shape(input_size: Any) -> list[int] | None:
    """One sample's shape as a list of whole numbers ≥ 1 (None: not given)."""
    if input_size is None:
        return None
    if isinstance(input_size, _TEXT) or not isinstance(input_size, Sequence):
        given: Any = input_size
    elif len(input_size) == 0:  # not "not given": the default shape was counted (round 54)
        raise UserError("analyze.input: must have 1 or more values (got [])")  # the command's
    elif all(_whole(n) and n >= 1 for n in input_size):
        return [int(n) for n in input_size]
    else:
        given = tuple(input_size)
    hint = "e.g. (3, 32, 32)"
    if small_whole_numbers(given) is not None:  # a shape kept as an array: np.array(img.shape)
        hint = "give the shape as a tuple of ints: tuple(x.tolist())"
    elif getattr(given, "ndim", 0) >= 2:  # an example input, as torchinfo takes one
        hint = "give one sample's shape, without the batch: x.shape[1:]"
    raise UserError(
        f"input_size must be one sample's shape in whole numbers ≥ 1, got {as_given(given)}", hint
    )


def _run_id(run_id: Any) -> int:
    """`run_id` as an int, taken as `log` takes a step (`_as_whole`): 1.0 and a 0-d tensor's
    1 were refused as "a run id is a whole number", the very values `log` takes."""
    whole = _as_whole(run_id)
    if whole is None:
        raise UserError(f"a run id is a whole number, got {as_given(run_id)}")
    return whole


def _run_ids(given: Any) -> list[int]:
    """Run ids, a list (any iterable) of whole numbers. Text is refused, not walked one
    character at a time: "1,2" failed as a TypeError, b"12" read as runs 49 and 50."""
    if isinstance(given, _TEXT) or not isinstance(given, Iterable):
        raise UserError(
            f"run ids are a list of whole numbers, got {as_given(given, typed=True)}",
            "e.g. [1, 2]",
        )
    return [_run_id(run_id) for run_id in given]


def _optional_whole(value: Any, what: str) -> int | None:
    """None, or `value` as an int: a UserError naming `what` for anything else (a bool too),
    which the store's queries failed on as a TypeError ("2" < 1) or took as 1 (True)."""
    if value is None:
        return None
    whole = _as_whole(value)
    if whole is None:
        raise UserError(f"{what} is a whole number, got {as_given(value, typed=True)}")
    return whole


def _strings(given: Any, what: str, example: str) -> list[str]:
    """`given`, a list (any iterable) of command-line strings such as --set's or --where's, as
    a list; a UserError naming `what` for anything else (`_listed`)."""
    items = _listed(given, what, example)
    if not all(isinstance(item, str) for item in items):
        raise UserError(f"{what}, got {as_given(given)}", f"e.g. {example}")
    return items


def _listed(given: Any, what: str, example: str) -> list[Any]:
    """`given`, a list (any iterable), as a list; a UserError naming `what` for anything else.
    A str alone is refused, not walked one character at a time ("--where 't': expected
    KEY=VALUE")."""
    if isinstance(given, _TEXT) or not isinstance(given, Iterable):
        raise UserError(f"{what}, got {as_given(given)}", f"e.g. {example}")
    return list(given)


_VALUES = "give numbers, text, lists or dicts"  # the fix for a config value JSON lacks


def _json_fault(value: Any, at: str = "", level: int = 1) -> UserError | None:
    """What keeps `value` from being stored as JSON, naming where in it (None: nothing).
    The store writes a run's config as JSON: anything else failed there as SQLAlchemy's
    StatementError, or UnicodeEncodeError for text holding surrogates. `level`: how deep
    `value` lies, counted as dlperf.parsing.depth counts it."""
    if level > MAX_DEPTH:
        # Refused as a file or a --set value that deep is; past Python's recursion limit,
        # this check (and json.dumps after it) raised RecursionError.
        return UserError(f"config is {TOO_DEEP}", _VALUES)
    if isinstance(value, float) and not math.isfinite(value):
        # SQLite's JSON text took it; PostgreSQL's JSON type refuses it (psycopg DataError)
        return UserError(f"config{at} is {value}: JSON has no NaN or infinity", _VALUES)
    if isinstance(value, int) and not isinstance(value, bool):
        with suppress(ValueError):
            str(value)  # what json.dumps does, refused past sys.get_int_max_str_digits()
            return None
        return UserError(
            f"config{at} is a whole number of more than {sys.get_int_max_str_digits()} digits, "
            "more than Python writes as text",
            _VALUES,
        )
    if value is None or isinstance(value, (bool, float)):
        return None
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return UserError(f"config{at} is not UTF-8 text: {as_given(value)}", _VALUES)
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                # json.dumps writes 1, 1.5, True and None as text, so {1: .., "1": ..} became
                # two keys of one name (a value lost), and sort_keys raised TypeError on keys
                # of mixed types: only text is a key, as in TOML and JSON themselves.
                return UserError(key_fault(key, f"config{at}" if at else ""), KEYS_HINT)
            path = f"{at}[{reprlib.repr(key)}]"  # a key of 3,000 characters, cut
            fault = _json_fault(key, at, level) or _json_fault(item, path, level + 1)
            if fault is not None:
                return fault
        return None
    if isinstance(value, (list, tuple)):
        faults = (_json_fault(v, f"{at}[{i}]", level + 1) for i, v in enumerate(value))
        return next((f for f in faults if f is not None), None)
    kind = type(value)
    name = (
        kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    )
    return UserError(f"config{at} is not JSON-serialisable ({name})", _held_number(value))


def _held_number(value: Any) -> str:
    """The fix for a config value that is not JSON: a NumPy number (np.int64(32), np.bool_)
    or a 0-d tensor holds a Python number, given by `.item()` ("give numbers" told someone
    who gave one); an array (a tensor) of more, by `.tolist()`; else _VALUES."""
    try:
        plain = value.item()
    except Exception:  # no item(), or not one element: the fix is not item()
        if getattr(value, "ndim", 0) and hasattr(value, "tolist"):
            return "give it as a list: .tolist()"
        return _VALUES
    if not isinstance(plain, bool | int | float):
        return _VALUES
    return f"give the Python value it holds: .item() gives {plain!r}"


# Floats narrower than Python's, taken as NumPy prints them: np.float32(0.05) holds
# 0.05000000074505806, but is the 0.05 its user typed (and --set would read).
_NARROW_FLOATS = ("float16", "float32")


def _python_values(value: Any, too_deep: UserError, level: int = 1) -> Any:
    """`value` (a config given from Python) with each NumPy scalar or 0-d array in it (a 0-d
    tensor too), at any depth of its dicts, lists and tuples, as the Python bool, int, float
    or str it holds, as the API takes a step or a metric's value: strict validation refused
    np.int64(1) as "not a valid integer", and json could not store it. Anything else is
    returned as it is, to be refused where it is checked; `value` itself is not changed.
    Done here, where Python's objects come in: a file or --set holds none. `too_deep` is
    raised for a value nested deeper than MAX_DEPTH (as `_json_fault` counts levels): a dict
    that holds itself made `dlperf.run` loop for ever in `parsing.depth`."""
    if level > MAX_DEPTH:
        raise too_deep
    if isinstance(value, dict):
        return {key: _python_values(item, too_deep, level + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_python_values(item, too_deep, level + 1) for item in value]
    if isinstance(value, tuple):  # a named tuple too, as the plain tuple it is stored as
        return tuple(_python_values(item, too_deep, level + 1) for item in value)
    if type(value) in (bool, int, float, str) or getattr(value, "ndim", None) != 0:
        return value
    item = getattr(value, "item", None)
    try:
        plain = item() if callable(item) else None
    except Exception:  # a meta tensor holds no value: refused as it is
        return value
    if isinstance(plain, float):
        dtype = str(getattr(value, "dtype", "")).removeprefix("torch.")
        if dtype in _NARROW_FLOATS:
            import numpy as np

            return float(str(np.dtype(dtype).type(plain)))  # exact: plain is one of dtype's
        return plain
    return plain if isinstance(plain, bool | int | str) else value


def _clash(config: dict[str, Any], name: str) -> None:
    """Refuse a config (`name`: what the user calls it) two of whose keys are one dotted key:
    `{"a.b": 1, "a": {"b": 2}}` was stored as given, but the MLflow export, `runs list
    --where` and `runs compare` name its keys dotted, and kept one of the two values without a
    word (as round 21's {1: .., "1": ..} would have been one key, this is refused)."""
    clash = flat_clash(config, lambda path: name + "".join(f"[{key!r}]" for key in path))
    if clash is not None:
        raise UserError(clash, "rename one of them")


def _device(device: Any) -> torch.device:
    """The device `track` records, refused as `run.device` is when this host lacks it."""
    import torch

    from dlperf.system import pick_device

    if device is None:
        return torch.device("cpu")
    if not isinstance(device, (str, torch.device)):  # torch reads 5 as cuda:5
        raise UserError(
            "device is a name such as 'cpu' or 'cuda:0', or a torch.device, "
            f"got {as_given(device, typed=True)}"
        )
    try:
        picked = pick_device(str(device))
    except UserError as e:
        raise UserError(f"device: {e.message}", e.hint) from None
    if picked.type not in ("cpu", "cuda", "mps"):  # meta holds no data: nothing to time
        raise UserError(
            f"device: '{device}' is not one a run trains on", "use cpu, cuda, cuda:N or mps"
        )
    return picked


def _key_name(key: Any, what: str = "metric key") -> str:
    """The name `TrackedRun.log` stores `key` under, after the store's own check of that name: a
    UserError naming `what` for a key that is not text, is empty (log kept '' as "train/") or
    that the store cannot keep. `phase` holds its names to these same limits (`what` "phase
    name"): unchecked, a name with NUL or of 5,000 characters was kept, 5 and None as "5"."""
    from dlperf.store.runstore import _fits, _shown
    from dlperf.store.schema import Metric

    metric = what == "metric key"
    example = "log(step, loss=0.5)" if metric else "run.phase('forward')"
    if not isinstance(key, str):
        raise UserError(f"a {what} is text, got {as_given(key, typed=True)}", f"e.g. {example}")
    if not key:
        raise UserError(f"a {what} is not empty", f"name it, e.g. {example}")
    name = _logged_name(key)
    column: Any = Metric.__table__.c.key  # a String column: its type has a length
    kept = column.type.length
    prefix = name[: len(name) - len(key)]  # the train/ that log puts before a key, or ""
    limit = kept - len(prefix)
    noun = "key" if metric else what
    hint = f"a {noun} is at most {limit} characters, without NUL"
    if prefix:
        slashed = " (val/acc1)" if metric else ""
        hint = f"a {noun} is at most {limit} characters, or {kept} with a / in it{slashed}"
    # Measured as the user wrote it: the store's own check counted the train/ they never
    # wrote ("'train/kkk...' is 101 characters long; ... at most 100").
    if len(key) > limit:
        under = ""
        if prefix:
            under = f", as log stores it under {prefix}" if metric else ", as for a metric key"
        raise UserError(
            f"{what} {_shown(key)} is {len(key)} characters long; the run store keeps at "
            f"most {limit}{under}",
            hint,
        )
    _fits(column, name, f"{what} {_shown(key)}", hint)
    # after the store's own limits (a NUL is named as one), as the store's log checks it
    printable_key(key, f"{what} {_shown(key)}")
    return name


def _metric(key: str, value: Any) -> tuple[str, float]:
    """The name `key` is stored under (`_key_name`) and `value` as the store keeps it, a
    UserError for either: float() would take "1.5" and raise ValueError or TypeError for the
    rest, and OverflowError for a whole number too big for a float (10**400)."""
    name = _key_name(key)
    given = value
    value = _one_number(value)
    # A complex number is no measurement, whatever its type: float() refused Python's, took
    # NumPy's as its real part (with a ComplexWarning) and a 0-d complex tensor's too (1+0j as
    # 1.0), and a complex array or tensor of one element was named by its shape.
    if _complex(value):
        raise UserError(
            f"metric {name} is a real number, not a complex one, got {as_given(given, typed=True)}"
        )
    # A bool (NumPy's, a bool tensor's or array's of one element too: `_one_number` made it
    # Python's) is not a measurement, as a bool step is not: float() made True 1.0.
    boolean = isinstance(value, bool)
    # Nor NumPy's text or dates: float() read np.array("1.5") as 1.5, refused as "1.5" is.
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    text_or_time = kind in ("U", "S", "M", "m")
    if not (isinstance(value, _TEXT) or boolean or text_or_time):
        if getattr(value, "requires_grad", False):
            # float() of a tensor that requires grad warns (torch's UserWarning, from this
            # line); told without importing torch, which every logged value passes through
            value = value.detach()
        try:
            # + 0.0: -0.0 as 0.0, as RunStore.log_metrics stores it, so that the run's
            # `final` (kept from this value) says what its stored metric says
            number = float(value) + 0.0
        except OverflowError:
            raise _past_float(name, given) from None
        except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of many values
            pass
        else:
            # float() of a finite Decimal or NumPy longdouble past a float's range is inf
            # without an OverflowError (10**400 raises one): an infinity only where the value
            # given is one, which alone equals it
            if math.isinf(number) and not bool(value == number):
                raise _past_float(name, given)
            return name, number
    raise UserError(f"metric {name} is a number, got {as_given(given, typed=True)}")


def _past_float(name: str, given: Any) -> UserError:
    """The refusal of metric `name`'s value `given`, a finite number past a float's range."""
    return UserError(
        f"metric {name} must be a number a float can hold (up to {sys.float_info.max:.4g}), "
        f"got {as_given(given, typed=True)}"
    )


def _one_number(value: Any) -> Any:
    """A tensor or NumPy array (or NumPy scalar) of one number, whatever its shape (`[1.5]`,
    `[[8]]`, 0-d), as the Python number it holds; any other value as it is. The one rule for a
    step and a value: NumPy 2 refused float() of an array that is not 0-d, and operator.index()
    takes an integer tensor of one element but no float tensor, so `log` took `torch.tensor([7])`
    as a step and refused `np.array([8])` and `torch.tensor([9.0])`. The number held is then
    checked as any other (a complex, a bool refused). Only numbers are read: NumPy's text and
    dates stay arrays, refused as such (a datetime64[ns]'s item() is an int)."""
    item = getattr(value, "item", None)
    if not callable(item):
        return value
    dtype = getattr(value, "dtype", None)
    count = getattr(value, "size", None)  # NumPy's element count
    if callable(count):  # torch's size() is its shape, numel() its count
        count = None
        with suppress(AttributeError, TypeError, RuntimeError):  # a nested tensor has none
            count = value.numel()
    numeric = getattr(dtype, "kind", None) in _NUMBER_KINDS or _torch_dtype(dtype)
    if count == 1 and numeric:
        with suppress(RuntimeError):  # a meta tensor holds no value: refused as it is
            return item()
    return value


# NumPy's kinds of number: bool, signed and unsigned int, float, complex (not text, dates, objects)
_NUMBER_KINDS = frozenset("biufc")


def _torch_dtype(dtype: Any) -> bool:
    """Whether `dtype` is torch's, every one of which is a kind of number; told without
    importing torch, which every logged value passes through."""
    return type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype"


def _complex(value: Any) -> bool:
    """Whether `value` is complex: Python's or NumPy's number, or an array or tensor of them."""
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        return True
    dtype = getattr(value, "dtype", None)
    return getattr(dtype, "kind", None) == "c" or bool(getattr(dtype, "is_complex", False))


def _step(step: Any) -> int:
    """`step` as the int `log` stores (`_as_whole`)."""
    whole = _as_whole(step)
    if whole is None:
        raise UserError(f"a step is a whole number, got {as_given(step)}")
    return whole


def _as_whole(given: Any) -> int | None:
    """`given` as an int, as the API takes a step or a run id: an int (NumPy's, an integer
    tensor's) or a float of a whole number (1.0, NumPy's 3.0, a 0-d tensor's 4.0), which
    names one exactly as its int does (a float holds every whole number to 2**53, past the
    store's bound); not a bool, nor 1.5, which int() would put on 1. None for anything else."""
    # A tensor or array of one number as the number it holds (a float tensor is no
    # numbers.Real); a bool tensor gives a bool, refused: operator.index took [True] as 1.
    value = _one_number(given)
    if not isinstance(value, bool):
        with suppress(TypeError):
            return operator.index(value)
        # float() of a Fraction past a float's range; of a signalling NaN Decimal
        with suppress(OverflowError, ValueError):
            # A Decimal is no numbers.Real, yet Decimal("10") is as whole as Fraction(20, 2)
            if isinstance(value, numbers.Real | Decimal) and float(value).is_integer():
                return int(float(value))  # is_integer(): not NaN, inf
    return None


def _logged_name(key: str) -> str:
    """The name `TrackedRun.log` stores `key` under, the name `Store.metrics` reads it by."""
    return key if "/" in key else f"train/{key}"


# --- analyze --------------------------------------------------------------------------------


def _meta_copy(model: torch.nn.Module) -> tuple[torch.nn.Module, list[str]]:
    """A copy of `model` whose parameters and buffers live on the meta device: the counting
    engine may move and run it, while the caller's model keeps its weights and device.
    deepcopy's memo hands it the meta tensors, so no weight is copied byte by byte. Tensors
    that share a storage share one on meta too, as a model file built there does: copied one
    at a time, a buffer viewing a parameter (or another buffer) was counted in bytes of its
    own, and two Parameters over one storage (a tied weight's transpose) lost their tie.
    The model's other attributes are copied as deepcopy copies them, save what it need not or
    cannot copy (`_share_attributes`); a module that still refuses a copy is a UserError
    naming it (`_uncopyable`).
    Returns the copy, and the hooks left out of it as the caller's (`_drop_callers_hooks`)."""
    import torch
    from torch import nn

    from dlperf.precision import KeepShared

    memo: dict[int, Any] = {}
    tensors = [*model.parameters(), *model.buffers()]
    # whole: each storage moved whole, as a model built on meta holds it (no memory on meta)
    to_meta = KeepShared(lambda t: t.detach().to("meta"), tensors, whole=True)
    for tensor in tensors:
        if nn.parameter.is_lazy(tensor):
            # A lazy layer not yet run: its placeholder made anew on meta, as counting's
            # _weights_on_meta makes a model file's, so that the count's first forward gives
            # the copy its shapes. Copied as it was (on the CPU), counting's move to meta made
            # it a plain empty tensor, taken for the weight ("in_features from self.weight:
            # 0"), and a lazy buffer refused detach().
            lazy: Any = type(tensor)  # UninitializedParameter or UninitializedBuffer
            memo[id(tensor)] = lazy(tensor.requires_grad, device="meta", dtype=tensor.dtype)
            continue
        meta = to_meta(tensor)
        if isinstance(tensor, nn.Parameter):
            meta = nn.Parameter(meta, requires_grad=tensor.requires_grad)
        memo[id(tensor)] = meta
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, torch.Tensor) and value.grad_fn is not None:
                # The weight weight_norm's or pruning's hook computes from the parameters and
                # keeps as a plain attribute: deepcopy refuses a tensor that is no graph leaf
                # (a RuntimeError). Its hook, kept on the copy, computes it again there.
                memo[id(value)] = value.detach().to("meta")
    with torch.no_grad():
        _share_attributes(model, memo)
        # the memo before the copy: a failed deepcopy leaves half-built copies in it (stored
        # before their state is set), and `_uncopyable`'s search, finding them, named none
        shared = dict(memo)
        try:
            copied = copy.deepcopy(model, memo)
        except RecursionError:
            raise  # a model nested too deep, told by analyze (nesting_told)
        except Exception as e:
            raise _uncopyable(model, shared, e) from None
    # A TorchScript module copies itself in C++, past the memo: its weights come back as plain
    # tensors on the model's device, without requires_grad, which .to("meta") refuses
    # ("param must be a Parameter"). They are given the meta copies as the rest were.
    originals = dict(model.named_modules(remove_duplicate=False))
    for name, module in copied.named_modules(remove_duplicate=False):
        if not isinstance(module, torch.jit.ScriptModule):
            continue
        source = originals[name]
        for slots, kept in ((module._parameters, source._parameters),
                            (module._buffers, source._buffers)):  # fmt: skip
            for key, tensor in kept.items():
                if tensor is not None and id(tensor) in memo:
                    slots[key] = memo[id(tensor)]
    return copied, _drop_callers_hooks(copied)


def _held(module: torch.nn.Module, seen: set[int]) -> Iterator[tuple[str, Any]]:
    """The objects `module`'s attributes hold (its hook dicts' too), and those inside the
    lists, tuples, sets and dicts among them, each with the attribute's name; not its
    parameters, buffers or submodules, each object once (`seen`). Numbers and text inside
    containers are left to deepcopy: yielded one by one, a 10M-item list took analyze from
    13 s to 100 s."""
    from torch import nn

    state = vars(module)
    skipped = {id(state[name]) for name in ("_parameters", "_buffers", "_modules") if name in state}
    stack = [
        (name, value)
        for name, value in state.items()
        if id(value) not in skipped and type(value) not in _ATOMIC
    ]
    while stack:
        name, value = stack.pop()
        if id(value) in seen or isinstance(value, nn.Module):
            continue
        seen.add(id(value))
        yield name, value
        plain = _plain(value)
        items = vars(value).values() if plain else value
        items = value.values() if isinstance(value, dict) else items
        walked = isinstance(value, (dict, list, tuple, set, frozenset)) or plain
        if walked and not _atomic(items):
            stack.extend((name, item) for item in items if type(item) not in _ATOMIC)


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python


def _plain(value: Any) -> bool:
    """Whether deepcopy copies `value` as a plain object, its `vars()` one value at a time
    through the memo (a SimpleNamespace, a dataclass, a helper): walked as a container, so
    that a table inside is shared and only a lock inside, not the object, is shared."""
    import copyreg

    cls: Any = type(value)  # its methods compared as the class's, not bound
    if cls is types.SimpleNamespace:
        return True
    return (
        isinstance(getattr(value, "__dict__", None), dict)
        # Python classes alone: one over a C type (an open file) copies by its own rules
        and all(c.__flags__ & _HEAP_TYPE for c in cls.__mro__[:-1])
        and cls not in copy._deepcopy_dispatch  # type: ignore[attr-defined]  # functions, types
        and cls not in copyreg.dispatch_table
        and not isinstance(value, (type, types.ModuleType))
        and getattr(cls, "__deepcopy__", None) is None
        and cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and cls.__getstate__ is object.__getstate__
        and getattr(cls, "__setstate__", None) is None
    )


# What deepcopy returns as it is, never holding a model's layer: not walked into.
_ATOMIC = frozenset({type(None), bool, int, float, complex, str, bytes, range})


def _atomic(items: Iterable[Any]) -> bool:
    """Whether `items` are all atomic; the types gathered in C, not item by item in Python."""
    return set(map(type, items)) <= _ATOMIC


def _reaches_tensors(value: Any) -> bool:
    """Whether a module, parameter or tensor can be reached from `value` through containers
    and objects' attributes: shared as it is, the copy would run or write the caller's."""
    import torch
    from torch import nn

    seen: set[int] = set()
    stack = [value]
    while stack:
        value = stack.pop()
        if id(value) in seen or isinstance(value, (*_ATOMIC, type, types.ModuleType)):
            continue  # a class's or a Python module's namespace is not the model's
        seen.add(id(value))
        if isinstance(value, (nn.Module, torch.Tensor)):
            return True
        if isinstance(value, dict):
            stack.extend(v for v in (*value.keys(), *value.values()) if type(v) not in _ATOMIC)
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend(v for v in value if type(v) not in _ATOMIC)
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict):
            stack.append(attributes)
    return False


# What deepcopy takes as it is (or copies by walking it, a container): nothing to try first.
_AS_IS = (
    *(type(None), bool, int, float, complex, str, bytes, type, range),
    *(types.FunctionType, types.BuiltinFunctionType, types.MethodType),
    *(list, tuple, set, frozenset, dict),
)


def _share_attributes(model: torch.nn.Module, memo: dict[int, Any]) -> None:
    """Put in deepcopy's `memo` what the copy of `model` shares rather than copies: a tensor
    kept as a plain attribute (a lookup table, not a buffer) as a copy-on-write clone, whose
    data is the caller's until the copy writes into it, and a NumPy array as it is (both were
    copied byte by byte: a 400 MB table took 545 MB more); and what deepcopy refuses, as it
    is: a lock, a logging handler, an open file, a generator (a TypeError "cannot pickle
    '_thread.lock' object" failed the count). The rest is tried first, one object at a time,
    the copies kept in the memo for the model's deepcopy to use, so that only what fails is
    shared: a dict holding a lock and a cache keeps a copy of its own, the lock shared.
    Submodules first, so that an object reaching one (a helper holding a layer) finds what
    the layer shares already shared. An object refused that reaches a module or tensor is
    a UserError naming it: shared, the copy's forward ran the caller's layer (params 0)."""
    import numpy as np
    import torch

    seen: set[int] = set()
    for path, module in reversed(list(model.named_modules())):
        if isinstance(module, torch.jit.ScriptModule):
            continue  # its state is its C++ module (_c): shared, the caller's went to meta
        for name, value in _held(module, seen):
            if id(value) in memo or isinstance(value, _AS_IS) or _plain(value):
                continue  # walked by _held, and copied by deepcopy with what it holds
            if type(value) is torch.Tensor and value.layout == torch.strided:
                if value.grad_fn is not None:  # no graph leaf, as `_meta_copy` makes them
                    memo[id(value)] = value.detach().to("meta")
                    continue
                with suppress(RuntimeError, NotImplementedError):  # else copied as before
                    clone = torch._lazy_clone(value.detach())
                    memo[id(value)] = clone.requires_grad_(value.requires_grad)
                    continue
            if isinstance(value, np.ndarray):
                memo[id(value)] = value
                continue
            trial: ChainMap[int, Any] = ChainMap({}, memo)
            try:
                copy.deepcopy(value, trial)  # type: ignore[arg-type]  # read and set as a dict
            except Exception as e:
                if _reaches_tensors(value):
                    where = f"{path}.{name}" if path else name
                    said = " ".join(f"{type(e).__name__}: {error_text(e)}".split())
                    raise UserError(
                        f"dlperf.analyze counts a copy of the model, and its attribute {where} "
                        f"({type(value).__name__}) cannot be copied ({said}) nor shared: it holds "
                        "a layer or tensor of the model, which the copy would run as the caller's",
                        "make copy.deepcopy of it work, or count the model from its file: "
                        "dlperf analyze file.py:factory",
                    ) from None
                memo[id(value)] = value
                continue
            made = trial.maps[0]
            # deepcopy keeps the objects it copied alive under the memo's own id, here the
            # trial's: kept under the memo's, or another object of that id later reads them
            memo.setdefault(id(memo), []).extend(made.pop(id(trial), []))
            memo.update(made)


def _uncopyable(model: torch.nn.Module, memo: dict[int, Any], error: Exception) -> UserError:
    """The error of a model whose deepcopy failed though `_share_attributes` shared what it
    refused: one of its modules refuses a copy of itself (its class's __deepcopy__ or
    __getstate__), named by copying each alone, its submodules shared, until one fails."""
    failed = None
    for path, module in reversed(list(model.named_modules())):
        alone = ChainMap({id(child): child for child in module.children()}, memo)
        try:
            copy.deepcopy(module, alone)  # type: ignore[arg-type]
        except Exception as e:
            failed, error = f"{path or 'the model'} ({type(module).__name__})", e
            break
    said = " ".join(f"{type(error).__name__}: {error_text(error)}".split())
    return UserError(
        f"dlperf.analyze counts a copy of the model, and {failed or 'the model'} cannot be "
        f"copied: {said}",
        "make copy.deepcopy of it work, or count the model from its file: "
        "dlperf analyze file.py:factory",
    )


# A module's hook dicts that a count runs (forward, and backward with `train`), named.
_HOOKS = {
    "_forward_pre_hooks": "forward pre-hook",
    "_forward_hooks": "forward hook",
    "_backward_pre_hooks": "backward pre-hook",
    "_backward_hooks": "backward hook",
}
# torch's global module hooks (register_module_forward_hook and friends), called for every
# module of the process, the registration ones too (a lazy layer's weights, made by the count).
_GLOBAL_HOOKS = (
    *(f"_global{name}" for name in _HOOKS),
    "_global_module_registration_hooks",
    "_global_parameter_registration_hooks",
    "_global_buffer_registration_hooks",
)


def _drop_callers_hooks(copied: torch.nn.Module) -> list[str]:
    """Remove from the copy the hooks that are not the model's own (`_models_own`): deepcopy
    shares their functions, which close over the caller's objects (an activation captured, a
    counter), and they ran on meta tensors (a captured activation replaced by one, a hook
    reading values blamed on the model's forward). Returns those left out, named ("fc's
    forward pre-hook flatten_in"), for the count's error to say."""
    from torch import nn

    # The model's own classes (bases included), torch's left out: its code would name
    # hundreds of things, and its hooks are kept as torch's anyway.
    classes = {
        c
        for m in copied.modules()
        for c in type(m).__mro__
        if issubclass(c, nn.Module) and not _torchs(c)
    }
    named = {name for c in classes for name in _names_in(c)}
    modules = {id(module) for module in copied.modules()}
    left: list[str] = []
    for path, module in copied.named_modules():
        for kind, said in _HOOKS.items():
            hooks = getattr(module, kind)
            for key, hook in list(hooks.items()):
                if not _models_own(hook, modules, classes, named):
                    del hooks[key]
                    left.append(f"{path or 'the model'}'s {said} {_name(hook)}")
    return left


def _torchs(code: Any) -> bool:
    """Whether `code` (a function, a class) is written in torch."""
    where = getattr(code, "__module__", None) or ""
    return where == "torch" or where.startswith("torch.")


def _unwrapped(hook: Any) -> Any:
    """The code a hook runs: a partial's function, a callable object's class."""
    while isinstance(hook, functools.partial):
        hook = hook.func
    return hook if hasattr(hook, "__code__") or hasattr(hook, "__func__") else type(hook)


def _name(hook: Any) -> str:
    """A hook as the count's error names it: its function's name, or its object's class."""
    code = _unwrapped(hook)
    return getattr(code, "__qualname__", None) or type(hook).__qualname__


def _models_own(hook: Any, modules: set[int], classes: set[type], named: set[str]) -> bool:
    """Whether `hook` is the model's own rather than the caller's. Which code registered a
    hook is recorded nowhere, so it is told by its code: torch's (weight_norm's,
    spectral_norm's, pruning's, a lazy layer's hooks make the weights the forward uses), a
    method of one of the model's modules, or code of one of the model's classes: nested in
    one (a lambda of its __init__), or named by its code (`register_forward_pre_hook(fn)`,
    `FlattenIn()`); a partial of any of these. The rest is the caller's, wherever written."""
    code = _unwrapped(hook)
    if id(getattr(code, "__self__", None)) in modules or _torchs(code):
        return True
    where, qualname = getattr(code, "__module__", None), getattr(code, "__qualname__", "") or ""
    nested = (where == c.__module__ and qualname.startswith(f"{c.__qualname__}.") for c in classes)
    return any(nested) or getattr(code, "__name__", None) in named


def _names_in(cls: type) -> set[str]:
    """The names the code of `cls`'s own functions holds (globals, attributes: co_names), of
    the functions and lambdas nested in them too."""
    codes = [
        code
        for value in vars(cls).values()
        if (code := getattr(getattr(value, "__func__", value), "__code__", None)) is not None
    ]
    names: set[str] = set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return names


@contextmanager
def _no_global_hooks() -> Iterator[None]:
    """The caller's global module hooks left out of a count, put back after it: they were
    called for every module counted. One count at a time (counting's own lock, which its
    own global hooks are registered under), so no count's hook is taken away or put back."""
    from torch.nn.modules import module

    from dlperf.analytic.counting import _ONE_COUNT

    with _ONE_COUNT:
        held = [getattr(module, name) for name in _GLOBAL_HOOKS]
        saved = [dict(hooks) for hooks in held]
        for hooks in held:
            hooks.clear()  # in place: a hook's handle removes it from this dict
        try:
            yield
        finally:
            for hooks, before in zip(held, saved, strict=True):
                added = dict(hooks)  # by another thread meanwhile, not by a count
                hooks.clear()
                hooks.update(before | added)


@contextmanager
def _no_exit() -> Iterator[None]:
    """A model's sys.exit while it is counted as a UserError, as any other error of its
    forward is: it would end the caller's script or notebook kernel."""
    try:
        yield
    except SystemExit as e:
        raise UserError(model_exited(e.code, "while being counted")) from None


@dataclass
class AnalysisResult:
    """`dlperf analyze` as an object: `.totals`, `.layers`, `.to_json()`; prints as the
    command's tables."""

    analysis: Analysis

    @property
    def totals(self) -> dict[str, Any]:
        return self.analysis.totals()

    @property
    def layers(self) -> list[dict[str, Any]]:
        layers: list[dict[str, Any]] = self.analysis.to_dict()["layers"]
        return layers

    @property
    def unsupported_ops(self) -> dict[str, int]:
        return self.analysis.unsupported_ops

    def to_dict(self) -> dict[str, Any]:
        return self.analysis.to_dict()

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        """The tables `dlperf analyze` prints, as plain text."""
        from dlperf.analytic.tables import tables

        return "\n\n".join(table.text() for table in tables(self.to_dict()))


def _precision(dtype: object) -> str:
    """analyze's `dtype`, a precision's name or its torch dtype, as the name ("fp16")."""
    from dlperf.precision import DTYPES

    if dtype is None:
        return "fp32"
    for name, torch_dtype in DTYPES.items():
        if dtype is torch_dtype or (isinstance(dtype, str) and dtype == name):
            return name
    raise UserError(
        f"dtype {as_given(dtype)}: use 'fp32', 'bf16' or 'fp16' (or torch.float32, "
        "torch.bfloat16, torch.float16)"
    )


def analyze(
    model: torch.nn.Module | str,
    input_size: Sequence[int] | None = None,
    *,
    batch: int = 1,
    dtype: str | torch.dtype | None = None,
    train: bool = False,
    bias: bool = True,
    activations: str = "all",
    macs_convention: str = "dlperf",
) -> AnalysisResult:
    """Count a network on paper: params, MACs, FLOPs, activations, receptive field.

    `model` is a registry or torchvision name (as `dlperf analyze` takes) or your own
    `nn.Module`, which is left untouched: the count runs on a meta-device copy, without the
    hooks you registered on it or for every module. The model's own hooks still run: torch's
    (weight_norm's, pruning's), its modules' methods, and code of its classes: a lambda of
    their __init__, a function or callable object their code names (or a partial of one).
    Any other hook is taken as yours, wherever written; a count that then fails names the
    hooks left out (docs/api.md, "Count a model without touching it").
    `input_size` is one sample's shape, e.g. (3, 32, 32); `dtype` "fp32" | "bf16" | "fp16",
    or torch.float32 | torch.bfloat16 | torch.float16.
    The rest mean what the command's options of the same names mean, with the same defaults:
    `bias=False` (--no-bias) counts parameters without biases (those named *bias);
    `activations` "all" counts every row's outputs, "conv-pool-fc" those of convolution,
    pooling and linear layers only; `macs_convention` "dlperf" counts weight products only
    (bias adds, normalisation and pooling are FLOPs), "torchinfo", "ptflops" or "fvcore"
    as those tools count (a forward pass only).
    What the command warns of, the count leaves out, is a `UserWarning` here: operators no
    handler counts (`unsupported_ops`), layers kept in a plain list, tuple or dict (not the
    model's parameters), and outputs of functional layers (F.conv2d, F.linear) that the
    `activations` convention would count as modules, named in `to_dict()["conventions"]
    ["activations_not_counted"]`.
    """
    with stopping.deferred():
        from torch import nn

        from dlperf.analytic.counting import (
            API,
            check_options,
            count_model,
            nesting_told,
        )
        from dlperf.analytic.counting import analyze as analyze_name
        from dlperf.models.registry import check_no_cycle
        from dlperf.models.transfer import uncompiled

    precision = _precision(dtype)
    input_size = _shape(input_size)
    if not isinstance(bias, bool):  # "no" would count the biases, silently
        raise UserError(f"bias is True or False, got {as_given(bias)}")
    if not isinstance(train, bool):
        raise UserError(f"train is True or False, got {as_given(train)}")
    if not _whole(batch):
        raise UserError(f"batch is a whole number ≥ 1, got {as_given(batch)}")
    batch = int(batch)
    if isinstance(model, str):
        with _no_exit(), _no_global_hooks():
            named = analyze_name(
                model, input_size, batch, train, precision, None, bias, activations,
                macs_convention=macs_convention, command=API,
            )  # fmt: skip
        return _told(named)
    if not isinstance(model, nn.Module):
        raise UserError(f"analyze takes a model name or an nn.Module, not {type(model).__name__}")
    if not input_size:
        raise UserError("give input_size, one sample's shape, e.g. (3, 32, 32)")
    check_options(batch, train, precision, activations, macs_convention)
    # A torch.compile(module) is counted as the module inside, so named and copied: its class
    # in the title and refusals (not OptimizedModule's), its paths as its own (not _orig_mod.)
    model = uncompiled(model)
    name = type(model).__name__
    check_no_cycle(model, name)  # the registry checks only what it builds
    left: list[str] = []  # the hooks left out of the copy, named
    try:
        with _no_exit(), _no_global_hooks():
            with nesting_told(model):  # deepcopy recurses at each level of the model's tree
                copied, left = _meta_copy(model)
            counted = count_model(
                copied, input_size, batch, train, precision, name, bias,
                activations, macs_convention,
            )  # fmt: skip
    except UserError as e:
        if not left:
            raise
        # A hook the model needs may be among them: the error's own fix (the input's
        # shape, say) would then not work, and nothing else says they were left out.
        raise UserError(
            f"{e}; counted without the hooks left out as the caller's: {', '.join(left)}",
            "a hook the model needs is kept when its class's code names it: docs/api.md, "
            "'Count a model without touching it'",
        ) from None
    return _told(counted)


def _told(analysis: Analysis) -> AnalysisResult:
    """`analysis` as a result, after the warnings `dlperf analyze` prints, as Python
    warnings: a notebook shows them, a program may filter them. What the model's file did to
    the process (put back) is a RuntimeWarning, as from create_model; what the count leaves
    out a UserWarning."""
    for said in analysis.model_notes:
        warnings.warn(said, RuntimeWarning, stacklevel=3)
    for note in (analysis.unsupported_note(), analysis.activations_note()):
        if note:
            warnings.warn(note, UserWarning, stacklevel=3)  # at the caller of dlperf.analyze
    return AnalysisResult(analysis)


# --- run ------------------------------------------------------------------------------------


def run(
    experiment: str | Path | Mapping[str, Any],
    overrides: Sequence[str] = (),
    *,
    store: StoreLike | None = None,
) -> RunResult:
    """Train one experiment (a TOML path or a dict of its sections) and keep it in `store`
    (a `Store`, a path or a SQLAlchemy URL; the default store when None); returns how the run
    ended, whose `to_dict()` is what `dlperf run --json` prints. `overrides` are a list
    of `--set` strings, even for one (a str alone is refused)."""
    with stopping.deferred():
        import torch

        from dlperf.config import apply_override, build_experiment, load_experiment
        from dlperf.experiment.run import run_experiment

    overrides = _strings(overrides, "overrides are a list of --set strings", "['train.lr=0.01']")
    if not isinstance(experiment, (str, os.PathLike, Mapping)):
        raise UserError(
            f"run takes a TOML path or a dict of sections, not {type(experiment).__name__}"
        )
    with _opened_store(store) as where:
        if isinstance(experiment, Mapping):
            # NumPy's numbers as the Python values they hold (a grid's np.int64(1)); a copy
            raw = _python_values(
                copy.deepcopy(dict(experiment)), UserError(f"experiment: {TOO_DEEP}")
            )
            for assignment in overrides:
                apply_override(raw, assignment)
            exp = build_experiment(raw, "experiment" + (" with overrides" if overrides else ""))
            # a file's experiment: refused as it loads
            printable_keys(exp.to_dict(), subscripted("experiment"))
            _clash(exp.to_dict(), "experiment")
        else:
            exp = load_experiment(experiment, list(overrides))
        grad = torch.is_grad_enabled()
        try:
            return run_experiment(exp, where, _RunWarnings(), by_api=True)
        finally:
            # The caller's grad mode, whatever the model file or its forward did to it: the
            # process is the caller's (a notebook's), and its next run starts from that mode.
            torch.set_grad_enabled(grad)


class _RunWarnings(NullReporter):
    """`run`'s reporter: the lines `dlperf run` prints as "warning: ..." (a model returning
    probabilities, fewer free cores than threads) are Python warnings, which a notebook
    shows and a program may filter; the run's progress stays quiet, as it was."""

    def log(self, message: str) -> None:
        if message.startswith("warning: "):
            warnings.warn(message.removeprefix("warning: "), UserWarning, stacklevel=2)


# --- track ----------------------------------------------------------------------------------

# A log() call writes the rows held in memory when FLUSH_ROWS are held or FLUSH_SECONDS have
# passed since the last write, and rows a call leaves held are written by a timer thread
# FLUSH_SECONDS later if no call has by then: a SIGKILLed loop loses at most the last second's
# rows, also when it was killed in a long pause after them (an evaluation, a checkpoint: rows
# checked only at the next call waited for it), and a loop logging once an epoch none before
# the epoch in progress (256 rows with no time bound lost hours of such a loop's metrics).
FLUSH_ROWS = 256
FLUSH_SECONDS = 1.0
# metrics.step is an Integer column: 64-bit on SQLite but 32-bit on PostgreSQL, so the bound is
# PostgreSQL's, the same on every backend (as the store's text limits are).
STEP_MIN, STEP_MAX = -(2**31), 2**31 - 1


@dataclass
class TrackedRun:
    """Your own training loop, recorded as a run: `log` metrics, time `phase`s.

    Threads may log to one run: `_lock` is held while the rows are kept and written, so each
    row is stored once (a flush while another thread filled the buffer lost and duplicated
    rows). A child forked inside the block may not: the run, its buffer and its store's
    connections are the parent's (`_refuse_fork`)."""

    id: int
    _store: RunStore
    _device: Any
    _rows: list[tuple[str, int, float, float]] = field(default_factory=list)
    _phases: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # metric -> (step, value) at the highest step logged, of equal steps the last logged: the
    # run's `final`, whatever order the steps came in (threads, a loop that goes back)
    _final: dict[str, tuple[int, float]] = field(default_factory=dict)
    _ended: bool = False
    _flushed: float = field(default_factory=time.monotonic)  # when the rows were last written
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _pid: int = field(default_factory=os.getpid)  # the process that opened the run
    _timer: threading.Timer | None = field(default=None, repr=False, compare=False)

    def log(self, step: int, **metrics: float) -> None:
        """Record metrics at `step`. `loss` and `lr` are stored as the engine stores them
        (train/loss, train/lr); a key with a slash (e.g. val/acc1) is kept as it is; any
        other key goes under train/, so `loss` and `train/loss` in one call are refused."""
        self._check_open()
        now = time.time()  # the call's own time, not the batch's write
        at = _step(step)
        if not STEP_MIN <= at <= STEP_MAX:  # else it failed the run at the block's flush
            raise UserError(
                f"a step is between {STEP_MIN:,} and {STEP_MAX:,}, got {as_given(step)}",
                "the run store keeps a step as a 32-bit integer, PostgreSQL's INTEGER",
            )
        # Every metric is checked before any is kept, and here rather than at the block's
        # flush, where a key the store refuses failed the run and lost its earlier metrics.
        rows = []
        given: dict[str, str] = {}  # stored name -> the key that gave it
        for key, value in metrics.items():
            name, number = _metric(key, value)
            if name in given:  # loss= and train/loss= stored two rows of one step
                raise UserError(
                    f"log: {given[name]!r} and {key!r} name one metric, {name}", "give it once"
                )
            given[name] = key
            rows.append((name, at, number, now))
        with self._lock:
            self._check_open()  # again: the block may have ended while this call checked
            self._rows.extend(rows)
            for name, _, value, _ in rows:
                kept = self._final.get(name)
                if kept is None or at >= kept[0]:
                    self._final[name] = (at, value)
            if len(self._rows) >= FLUSH_ROWS or time.monotonic() - self._flushed >= FLUSH_SECONDS:
                self._flush()
            elif self._timer is None:
                wait = FLUSH_SECONDS - (time.monotonic() - self._flushed)
                self._timer = threading.Timer(wait, self._flush_later)
                self._timer.daemon = True  # the loop's end is the process's: it writes the rest
                self._timer.start()

    def _flush_later(self) -> None:
        """The timer's write of the rows no later call has written. A store that fails here
        keeps them held: the next log, or the block's end, writes them or says why."""
        with self._lock:
            if self._timer is threading.current_thread():  # else a later call's timer
                self._timer = None
            if self._ended or self._forked() or not self._rows:
                return
            with suppress(Exception):
                self._flush()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of the step (forward, backward, ...) on the run's device, as the
        engine does: CUDA events on a GPU, the host clock after a synchronize elsewhere."""
        from dlperf.timing import Timer

        self._check_open()
        _key_name(name, "phase name")  # before the body runs; log's limits for its keys
        timer = Timer(self._device)  # one per call: phases may nest
        timer.start()
        try:
            yield
        finally:
            took = timer.stop()
            if not self._forked():  # a child forked inside the phase: the lock may be held
                with self._lock:
                    self._phases[name].append(took)

    def _forked(self) -> bool:
        return os.getpid() != self._pid

    def _refuse_fork(self) -> None:
        """A forked child's log would write the rows its copy of the buffer holds a second
        time, through connections the parent's process holds. Its engine is left to it
        without closing them (SQLAlchemy's dispose(close=False)), for a run of its own."""
        if not self._forked():
            return
        self._store.engine.dispose(close=False)
        raise UserError(
            f"run {self.id} was opened by process {self._pid}; a forked child cannot log to "
            "it: open a run of its own with dlperf.track in the child"
        )

    def _check_open(self) -> None:
        """A call after the block ended would be dropped: nothing flushes it any more."""
        self._refuse_fork()  # first, and outside the lock: another thread held it at the fork
        if self._ended:
            raise UserError(
                f"run {self.id} has ended: log and phase only inside its `with dlperf.track` block"
            )

    def flush(self) -> None:
        self._refuse_fork()
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        """Write the rows held (with `_lock` held)."""
        if self._timer is not None and threading.current_thread() is not self._timer:
            self._timer.cancel()
            self._timer = None
        # Not cut by Ctrl-C, the write and the clearing of what it wrote alike: cut after the
        # commit, the rows stayed held and the block's end stored them twice; cut at the
        # block's end, the write was undone and the run marked killed without them (up to
        # `FLUSH_ROWS`, seconds of them where the write waits on a lock or a slow server). A
        # Ctrl-C waits for it, then stops the script as it would have; the write's own wait is
        # bounded by the store's timeouts.
        with stopping.deferred():
            self._store.log_metrics(self.id, self._rows)
            self._rows.clear()
        self._flushed = time.monotonic()

    def _end(self) -> None:
        with self._lock:
            self._ended = True
            self._flush()

    def summary(self) -> dict[str, Any]:
        with self._lock:
            phases = {p: sum(times) / len(times) for p, times in self._phases.items()}
            final = {k: v for k, (_, v) in self._final.items() if math.isfinite(v)}
        return {"phases": phases or None, "final": final}


def track(
    name: str,
    config: Mapping[str, Any] | None = None,
    store: StoreLike | None = None,
    device: str | torch.device | None = None,
) -> AbstractContextManager[TrackedRun]:
    """Record a training loop you wrote yourself as a dlperf run, in `store` (a `Store`, a
    path or a SQLAlchemy URL; the default store when None).

    The run is `finished` when the block ends (a `sys.exit(0)` in it too, or a `break` out
    of a generator that holds it), `failed` on an exception and `killed` on Ctrl-C; it then
    shows up in `dlperf runs list/show/compare` like any other run. Threads may log to it; a
    child forked inside the block may not, and its leaving the block leaves the run to the
    parent. A block entered by hand and never left is ended as the script ends. Each entry
    of the object returned is a run of its own (a notebook cell run again, a block nested in
    itself), as a new call's would be.
    """
    return _Track(name, config, store, device)


class _Track(AbstractContextManager[TrackedRun]):
    """`track`'s object: each entry a new `_track` block, left in the reverse order (per
    thread, as `with` nests). It was one generator's block, which contextlib lets in once: a
    second entry raised its AttributeError ("no attribute 'args'"), and nested, stored the
    outer run `failed` with that error (break-it round 58, T1 C4)."""

    def __init__(
        self,
        name: str,
        config: Mapping[str, Any] | None,
        store: StoreLike | None,
        device: str | torch.device | None,
    ) -> None:
        self._args = (name, config, store, device)
        # The blocks entered and not yet left, with the thread that entered each.
        self._entered: list[tuple[int, AbstractContextManager[TrackedRun]]] = []
        self._lock = threading.Lock()

    def __enter__(self) -> TrackedRun:
        block = _track(*self._args)
        if not _OPEN_BLOCKS:  # last registered, run first: before the exits dlperf registered
            atexit.unregister(_end_open_blocks)
            atexit.register(_end_open_blocks)
        _OPEN_BLOCKS.add(block.gen)
        run = block.__enter__()
        with self._lock:
            self._entered.append((threading.get_ident(), block))
        return run

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: types.TracebackType | None,
    ) -> bool | None:
        with self._lock:
            # This thread's last block; one left from another thread (a generator holding it,
            # closed by a garbage collection there) is the last entered.
            mine = [
                i for i, (thread, _) in enumerate(self._entered) if thread == threading.get_ident()
            ]
            _, block = self._entered.pop(mine[-1] if mine else -1)
        return block.__exit__(kind, error, trace)


# The generators of the `track` blocks not yet ended (`_end_open_blocks`), and what ended the
# script once it has: the interpreter clears sys.last_value before it closes them itself, in
# its shutdown, where an exception ended the script after the modules' names were cleared.
_OPEN_BLOCKS: weakref.WeakSet[Generator[TrackedRun, None, None]] = weakref.WeakSet()
_SCRIPT_ENDED: list[BaseException | None] = []


def _end_open_blocks() -> None:
    """At exit, end each `track` block entered and never left (`_closed` marks its run)."""
    _SCRIPT_ENDED.append(getattr(sys, "last_value", None))
    for block in list(_OPEN_BLOCKS):
        block.close()


@contextmanager
def _track(
    name: str,
    config: Mapping[str, Any] | None,
    store: StoreLike | None,
    device: str | torch.device | None,
) -> Iterator[TrackedRun]:
    """`track`'s block."""
    with stopping.deferred():
        import torch

        from dlperf.store.query import TRACKED
        from dlperf.system import system_info

    if not isinstance(name, str) or not name.strip() or has_control(name):
        raise UserError(f"a run's name is printable text, got {as_given(name)}")
    if config is not None and not isinstance(config, Mapping):
        raise UserError(f"config is a dict of JSON values, got {as_given(config, typed=True)}")
    # NumPy's numbers as the Python values they hold, as dlperf.run's dict takes them
    config = dict(_python_values(dict(config or {}), UserError(f"config is {TOO_DEEP}", _VALUES)))
    fault = _json_fault(config)
    if fault is not None:
        raise fault
    printable_keys(config, subscripted("config"))
    _clash(config, "config")
    dev = _device(device)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()
    # Marked as tracked: the user's config may hold every section of an experiment's, by
    # which the runs of before were told, and its val/* were then moved to epochs' steps.
    system = system_info(dev, torch.get_num_threads()) | {TRACKED: True}
    with _opened_store(store) as where:
        # Entered and left by hand rather than by `with`: a child forked inside the block leaves
        # it too, and must not mark the parent's run nor write its buffer (`_left_in_child`).
        recording = where.new_run(name, "run", config, digest[:16], system)
        record = recording.__enter__()
        tracked = TrackedRun(record.id, where, dev)
        try:
            try:
                yield tracked
            finally:
                if not tracked._forked():
                    tracked._end()
            record.summary = tracked.summary()
        except BaseException as e:
            if tracked._forked():
                _left_in_child(recording, tracked)
                raise
            if _succeeded(e):  # the script's own successful end: the run's, as leaving the block
                record.summary = tracked.summary()
                recording.__exit__(None, None, None)
                raise
            if isinstance(e, GeneratorExit):  # closed unfinished: not an error of the loop's
                _closed(record, tracked)
                recording.__exit__(None, None, None)
                raise
            if not recording.__exit__(*sys.exc_info()):
                raise
        else:
            if tracked._forked():
                _left_in_child(recording, tracked)
            else:
                recording.__exit__(None, None, None)


def _succeeded(e: BaseException) -> bool:
    """Whether `e` is a successful exit, sys.exit(0) or sys.exit() (a script that is done),
    which the recording marked failed ("SystemExit: 0") as any other exception. It stays
    `RunStore.recording`'s failure elsewhere: in a command, a model's sys.exit(0) is its error.
    Not when it follows Ctrl-C (a handler that exits quietly): that run was killed."""
    if not isinstance(e, SystemExit) or interrupted(e):
        return False
    return e.code is None or (isinstance(e.code, int) and e.code == 0)


def _closed(record: Any, tracked: TrackedRun) -> None:
    """How a block closed by GeneratorExit is marked, its summary kept: `finished` when the
    generator holding it was closed or dropped (a `break` out of the loop it drove), as a
    `sys.exit(0)` in it, and when a block entered by hand was never left before the script
    ended; `failed` (`killed` after Ctrl-C) when the script ended on an exception. It was
    marked failed with the error "GeneratorExit: " and no final values (round 54)."""
    record.summary = tracked.summary()
    ended_by = _SCRIPT_ENDED[-1] if _SCRIPT_ENDED else None
    if ended_by is None:
        return
    if interrupted(ended_by):
        record.status, record.error = "killed", stopping.stopped_by()
    else:
        ended = f"{type(ended_by).__name__}: {error_text(ended_by)}"
        record.fail(f"the track block was not left before the script ended on {ended}")


def _left_in_child(recording: Any, tracked: TrackedRun) -> None:
    """Close a forked child's copy of the parent's recording without a write: StoreGone with
    its run id passes through the recording unmarked (the run's process is the parent, still
    running it); left open, its generator would mark the run failed when collected. The
    child's engine drops the parent's connections without closing them."""
    tracked._store.engine.dispose(close=False)
    gone = StoreGone(f"run {tracked.id} is the parent process's", run_id=tracked.id)
    with suppress(StoreGone):
        recording.__exit__(StoreGone, gone, None)


# --- the store ------------------------------------------------------------------------------


class Store:
    """The run store (default ./dlperf.db, or $DLPERF_DB, or any SQLAlchemy URL), read as
    plain Python data."""

    def __init__(self, url: str | os.PathLike[str] | RunStore | None = None) -> None:
        """`url`: a SQLAlchemy URL, a SQLite file's path, or an open `RunStore`. A store that
        is not there (a missing or empty SQLite file, an empty PostgreSQL schema) is read as
        one without runs and left as it was, as `dlperf runs` leaves it: a mistyped path
        used to be made into a new store. `dlperf.track` and `dlperf.run` given this
        `Store` make it, as they write it."""
        from dlperf.store import RunStore
        from dlperf.store.runstore import absolute_url

        self._url: str | None = None  # None: the RunStore given, written as it is
        self._file: StoreFile | None = None  # the SQLite file opened, checked at each read
        if isinstance(url, RunStore):
            self._store = url
            return
        self._url = _store_url(url, named="url")
        self._sent = absolute_url(self._url or None)  # what `__reduce__` sends
        self._opened_in = os.getpid()
        self._store = RunStore.open(self._url or None, create=False)
        self._file = self._store.opened_file()

    def __reduce__(self) -> tuple[Any, ...]:
        """A `Store` sent to another process (a multiprocessing argument) goes as its URL and
        opens there: its engine and connections are this process's. A SQLite file goes by its
        path as resolved at open, whatever the other process's working directory."""
        from dlperf.store import integrity

        if self._url is not None:  # sent as given, a relative path named another directory
            return (Store, (self._sent,))
        engine = self._store.engine
        path = integrity.store_file(engine)
        url = engine.url if path is None else engine.url.set(database=str(path))
        return (Store, (url.render_as_string(hide_password=False),))

    def _read(self) -> RunStore:
        """The store to read. One that was not there when this `Store` was made is looked for
        again at each read, until it is (a `Store` made before a store's first run reads the
        runs written since, by any process), and is then kept; so is one whose file was
        deleted, replaced or moved since, unless this `Store` wrote it (`_still_there`)."""
        from dlperf.store import RunStore
        from dlperf.store.runstore import dispose

        if self._url is not None and self._file is not None and not self._file.there():
            # Its file deleted, replaced or moved: read what is at the path now (nothing, a
            # stand-in, until a store is made there), not the old file through the pooled
            # connections, whose -wal and -shm a new store at the path takes over.
            stale, self._store = self._store, RunStore.open(self._url or None, create=False)
            self._file = self._store.opened_file()
            dispose(stale.engine, close=os.getpid() == self._opened_in)
        if self._url is not None and _stand_in(self._store):
            store = RunStore.open(self._url or None, create=False)
            if not _stand_in(store):
                store, self._store = self._store, store
                self._file = self._store.opened_file()
            dispose(store.engine)  # the stand-in not kept: in memory, its connection open
        self._still_there()
        return self._store

    def _still_there(self) -> None:
        """Refuse a read once the SQLite file this `Store` wrote was deleted, replaced or
        moved (a reader reopens the path, `_read`): its pooled connections read the old file,
        whose -wal and -shm a new store made at the path takes over, and a new, healthy store
        there was called "damaged" (break-it round 58, T1 C6). Its writes are refused as
        well (`RunStore._writing`)."""
        from dlperf.store import integrity

        if self._file is None or self._file.there():
            return
        shown = integrity.shown(self._file.path)
        linked, now = self._file.whereabouts()
        if linked:
            where = f" to {integrity.shown(now)}" if now is not None else ""
            raise StoreGone(
                f"run store {shown} was moved{where} after this Store opened it",
                "open a new dlperf.Store where it is now",
            )
        raise StoreGone(
            f"run store {shown} was deleted or replaced after this Store opened it",
            "open a new dlperf.Store to read what is at that path now",
        )

    def _writer(self) -> RunStore:
        """The store opened to be written (made if it is not there yet, its SQLite file kept
        as a writer's is: RunStore.open), in place of the reader's from now on."""
        from dlperf.store import RunStore
        from dlperf.store.runstore import dispose

        if self._url is not None:
            reader, self._store = self._store, RunStore.open(self._url or None)
            self._file = self._store.opened_file()
            self._url = None  # opened for writing once; later writers use it as it is
            # In a forked child, only forgotten: closing would end the parent's sessions.
            dispose(reader.engine, close=os.getpid() == self._opened_in)
        return self._store

    def runs(
        self,
        kind: str | None = None,
        study: int | None = None,
        limit: int | None = None,
        where: Sequence[str] | None = (),
    ) -> list[RunRecord]:
        """Stored runs, newest first, each a `RunRecord` with its status as it stands (`lost`
        for a run whose process died without marking it; `.to_dict()` gives the JSON of
        `dlperf runs list --json`), as `dlperf runs list` shows them: `where`
        holds its --where filters (["model.name=resnet20", "status=finished",
        "tag.baseline=yes"]), and `limit` keeps the newest of the runs they select. `where` is
        a list even for one filter, as `dlperf.run`'s `overrides` are: a str alone is refused."""
        from dlperf.store.query import list_runs

        given = () if where is None else where
        filters = _strings(given, "where is a list of --where filters", "['train.lr=0.1']")
        if kind is not None and not isinstance(kind, str):
            raise UserError(f"kind is text such as 'run', got {as_given(kind, typed=True)}")
        return list_runs(
            self._read,
            kind=kind,
            study=_optional_whole(study, "study"),
            where=filters,
            limit=_optional_whole(limit, "limit"),
            limit_name="limit",
        )

    def compare(self, run_ids: Sequence[int] = (), study: int | None = None) -> Comparison:
        """What `dlperf runs compare` shows: the config keys that differ, each result, tag and
        status per run, with the change from the first run (`.rows()`, `.to_dict()`)."""
        from dlperf.store.query import compare

        return compare(self._read(), _run_ids(run_ids), _optional_whole(study, "study"))

    def run(self, run_id: int) -> RunRecord:
        """One stored run, its status as it stands."""
        return self._read().get_run(_run_id(run_id))

    def metric_keys(self, run_id: int) -> list[str]:
        """The names of a stored run's metrics, as `metrics` reads them."""
        stored = self.run(run_id)  # an unknown run is an error, not an empty list, as in `metrics`
        return self._store.metric_keys(stored.id)

    def _stored_key(self, run_id: int, key: str, stored: Sequence[str]) -> str:
        """`key` as stored: as given, or as `TrackedRun.log` names it ("loss": train/loss);
        an error naming the stored keys when the run has neither."""
        if not isinstance(key, str):  # a tensor's `in` raised RuntimeError, an int TypeError
            raise UserError(f"a metric key is text, got {as_given(key, typed=True)}")
        for name in (key, _logged_name(key)):
            if name in stored:
                return name
        for name in (key, _logged_name(key)):  # café typed (NFC), stored as cafe\u0301 (NFD)
            found = stored_as(name, stored)
            if found is not None:
                return found
        listed = few(list(stored), KEYS_LISTED)  # 10,000 keys were a 129,000-character line
        hint = f"its metrics: {listed}" if stored else "it has no metrics yet"
        raise UserError(f"run {run_id} has no metric {key!r}", hint)

    def metrics(self, run_id: int, key: str) -> list[tuple[int, float]]:
        """(step, value) pairs of one metric, in step order; `key` as stored or as `log`
        took it ("loss" reads train/loss)."""
        run_id = self.run(run_id).id  # an unknown run is an error, not an empty list
        name = self._stored_key(run_id, key, self._read().metric_keys(run_id))
        return self._store.metrics(run_id, name)

    def frame(self, run_id: int, keys: Sequence[str] | None = None) -> Any:
        """A pandas DataFrame: the global step as index, one column per key, per-epoch keys
        (val/*, epoch/*, phase/*) at their epoch's last step and an `epoch` column, as
        `dlperf runs export` puts them; a step logged twice for a key is two rows; needs
        pandas installed."""
        try:
            import pandas as pd
        except ImportError:
            raise UserError("Store.frame needs pandas", "pip install pandas") from None
        from dlperf.exporters import metric_series, steps_per_epoch
        from dlperf.store.keys import on_global_steps
        from dlperf.store.query import nth_at_step

        # The run first: its id checked (an id past the column's range reached the driver as
        # a DataError on PostgreSQL, an OverflowError on SQLite) and the run found.
        record = self.run(run_id)
        if keys is not None:  # a lone "xy" was walked as the keys "x" and "y"
            keys = _listed(keys, "keys is a list of metric keys", "['val/acc1']")
        stored = metric_series(self._store, record.id)
        spe = steps_per_epoch(record, stored, [])
        series = on_global_steps(stored, spe)
        if keys is None:
            wanted = series
        else:
            wanted = {k: series[self._stored_key(record.id, k, list(series))] for k in keys}
        # Every value logged is a row, as metrics(), the exports, MLflow and TensorBoard keep
        # them: a step a metric has twice is two rows of that step (a dict of step -> value
        # kept the last one alone). Rows line up by (step, the how-manieth value at that step).
        columns = {}
        for key, points in wanted.items():
            at = nth_at_step(step for step, _, _ in points)
            index = pd.MultiIndex.from_tuples(at, names=["step", "n"])
            columns[key] = pd.Series([v for _, v, _ in points], index=index, dtype=float)
        if not columns:  # no metric: no (step, n) index to drop n from
            return pd.DataFrame().rename_axis("step")
        return pd.DataFrame(columns).sort_index().droplevel("n")


if TYPE_CHECKING:
    # What a function's `store` takes: a `Store`, a SQLAlchemy URL or a SQLite file's path,
    # or an open `RunStore`.
    StoreLike: TypeAlias = Store | str | os.PathLike[str] | RunStore


def _stand_in(store: RunStore) -> bool:
    """Whether `store` is RunStore.open's stand-in for a store that is not there (read
    without creating it): an in-memory SQLite store, which no store a caller names is (each
    opening of one is a new and empty database)."""
    url = store.engine.url
    return url.get_backend_name() == "sqlite" and not url.database


def _store_url(url: str | os.PathLike[str] | None, named: str = "store") -> str:
    """The store a caller names, as RunStore.open takes it: "" for the default (./dlperf.db,
    or $DLPERF_DB). `named`: the argument that gave it, as its errors name it."""
    from dlperf.store.urls import masked_url, missing_slashes

    path = os.fspath(url) if isinstance(url, os.PathLike) else url
    if path is not None and not isinstance(path, str):
        given: object = url  # bytes too: a URL's password as *** (masked_url), as in str
        if isinstance(given, bytes | bytearray):
            text = masked_url(given.decode(errors="surrogateescape"))
            given = type(given)(text.encode(errors="surrogateescape"))
        raise UserError(
            f"a store is a path or a SQLAlchemy URL, got {as_given(given, typed=True)}",
            "e.g. 'runs.db' or 'sqlite:///runs.db'",
        )
    if path is not None and "\x00" in path:
        # Only Python can pass one (argv and the environment cannot hold it): it failed as
        # posixpath's "embedded null byte", deep inside the resolving of the path. Quoted as
        # every store line quotes a URL, its password as *** (docs/run.md).
        raise UserError(
            f"{named} holds a NUL character (\\x00), which no path or URL can hold: "
            f"{as_given(masked_url(path))}"
        )
    if isinstance(url, os.PathLike) and missing_slashes(path or ""):
        # A Path is a file, never a URL missing its `//` (which a str `sqlite:x.db` is taken
        # for, and refused): Path drops the ./ that would say so.
        path = os.path.join(".", path or "")
    return path or os.environ.get("DLPERF_DB") or ""


@contextmanager
def _opened_store(store: StoreLike | None) -> Iterator[RunStore]:
    """`_open_store(store)`, released when the block ends if opened here (from a path or a
    URL): its connection stayed open until a garbage collection, and a loop of runs on a
    database that allows one connection failed at the second, a refused one's too. A `Store`
    or `RunStore` passed in is the caller's to close; a child forked inside the block leaves
    the store to the process that opened it."""
    with stopping.deferred():  # as every import of the store (the module's docstring)
        from dlperf.store import RunStore

    where = _open_store(store)
    opener = os.getpid()
    try:
        yield where
    finally:
        if not isinstance(store, Store | RunStore) and os.getpid() == opener:
            with suppress(Exception):  # a server gone: the block's own error is the one to see
                where.release()


def _open_store(store: StoreLike | None) -> RunStore:
    """The store a caller that writes names, opened to be written (made if it is not there
    yet); a `Store` from now on reads the store so opened (`Store._writer`)."""
    from dlperf.store import RunStore

    if isinstance(store, Store):
        return store._writer()
    if isinstance(store, RunStore):
        return store
    return RunStore.open(_store_url(store) or None)


# --- fit_curve ------------------------------------------------------------------------------


@dataclass
class CurveResult:
    """A loss or accuracy curve fitted as `dlperf converge fit` fits it."""

    form: str
    metric: str
    params: dict[str, float]
    interval: dict[str, tuple[float, float]]  # 90% bootstrap interval of each parameter
    rmse: float
    # on the points after the fit window, from a fit on the window; when the window is the
    # whole curve, on its last third from a fit on its first two thirds
    heldout_rmse: float | None
    converged: bool
    message: str
    _p: np.ndarray
    _samples: np.ndarray
    _first_step: float  # of the fit window: no step is predicted before it
    # The curve's steps, as `dlperf converge predict` passes them: on fractional ones (epochs)
    # the crossing itself is the answer, not the whole step past it (`curve.whole_steps`).
    _steps: np.ndarray

    def predict_step(self, target: float) -> dict[str, Any]:
        """When the curve reaches `target` (in the metric's units): the step, whether it is
        reachable at all, and a 90% interval."""
        from dlperf.converge.curve import predict

        p = predict(
            self.form,
            self._p,
            self._samples,
            target,
            self.metric,
            self._steps,
            first=self._first_step,
        )
        return {
            "target": target,
            "reachable": p.reachable,
            "step": p.predicted_step,
            "interval": p.interval,
        }


def fit_curve(
    x: Sequence[float],
    y: Sequence[float],
    form: str = "optimus",
    metric: str = "loss",
    *,
    upto: float | None = None,
    upto_step: float | None = None,
) -> CurveResult:
    """Fit y(x) with the Optimus form 1/(β0·k + β1) + β2 or a power law ("power"), as
    `dlperf converge fit` fits a curve: on the leading points `upto` (a fraction) or
    `upto_step` picks, all of them by default. `metric` "loss" | "error" | "accuracy"
    (accuracy is fitted as 1 − accuracy; accuracy and error lie in [0, 1])."""
    from dlperf.converge.curve import (
        PARAMS,
        Curve,
        as_points,
        check_increasing,
        check_number,
        check_window,
    )
    from dlperf.converge.fitting import fit_one
    from dlperf.converge.options import CurveOptions

    if not isinstance(form, str) or form not in PARAMS:  # a list was unhashable: TypeError
        raise UserError(f"unknown curve form {as_given(form)}", f"use {', '.join(PARAMS)}")
    # Checked as numbers here: the window's comparisons raised TypeError for text, and True
    # was taken as a fraction of 1.
    upto = None if upto is None else check_number(upto, "upto")
    upto_step = None if upto_step is None else check_number(upto_step, "upto_step")
    check_window(upto, upto_step, named="")  # this function's arguments, not the config's keys
    xs, ys = as_points(x, y)
    check_increasing(xs, "x (the steps)")
    points = Curve("fit_curve", xs, ys)
    report = fit_one(points, CurveOptions(metric=metric, upto=upto, upto_step=upto_step), api=True)
    fitted = report.fits[form]
    held = report.heldout.get(f"{form}_rmse")
    return CurveResult(
        form=form,
        metric=metric,
        params=fitted.params,
        interval=report.ci[form],
        rmse=fitted.rmse,
        heldout_rmse=None if held is None else float(held),
        converged=fitted.converged,
        message=fitted.message,
        _p=report.params[form],
        _samples=report.samples[form],
        _first_step=fitted.first_step,
        _steps=points.steps,
    )
