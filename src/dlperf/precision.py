"""Precision names to torch dtypes; the names are `dlperf.config.Precision`, as run.precision
and the analysis commands spell them (tests/test_config.py checks the two agree)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable

import torch
from torch import nn

from dlperf.errors import UserError

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def counted_as(precision: str) -> str:
    """What a count or a kernel timing at `precision` describes. They cast the model and its
    input to the dtype, while a run at the same precision trains under autocast, which keeps
    reductions, losses and normalisation in fp32: the same name, a different program."""
    if precision == "fp32":
        return "fp32"
    return (
        f"the model cast to {precision} (a {precision} run trains under autocast: "
        "reductions, losses and normalisation stay fp32)"
    )


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """Autocast at `precision` on `device`'s kind; disabled for fp32."""
    return torch.autocast(device.type, DTYPES[precision], precision != "fp32")


def check_default_dtype() -> None:
    """Refuse a torch default dtype other than float32 (the caller's torch.set_default_dtype):
    dlperf builds models in it and casts them to a precision, so under float64 a run stored as
    fp32 trained in float64, and analyze failed on its fp32 input blaming the model."""
    dtype = torch.get_default_dtype()
    if dtype != torch.float32:
        raise UserError(
            f"torch's default dtype is {dtype} (torch.set_default_dtype); dlperf builds models "
            "in float32 and casts them to the precision asked for",
            "set it back with torch.set_default_dtype(torch.float32)",
        )


Convert = Callable[[torch.Tensor], torch.Tensor]
# A storage converted: what holds it (or refers to it weakly), its dtype, the converted one.
_Made = tuple[Callable[[], torch.Tensor | None], torch.dtype, torch.Tensor]


def _storage_key(t: torch.Tensor) -> int:
    """Which storage `t` views: the same number for every tensor over one storage while it
    lives (a freed storage's number may be another's later)."""
    return int(t.untyped_storage()._cdata)


def _viewable(t: torch.Tensor) -> bool:
    """Whether `t` can be remade as a view of a converted storage: a plain dense tensor or
    Parameter (not a lazy, quantized or sparse one, nor a subclass whose data lies elsewhere),
    with no conjugate or negative bit a view made anew would drop."""
    return (
        type(t) in (torch.Tensor, nn.Parameter)
        and t.layout == torch.strided
        and not t.is_quantized
        and not t.is_conj()
        and not t.is_neg()
        and t.untyped_storage().nbytes() > 0
        and t.untyped_storage().nbytes() % t.element_size() == 0
    )


class KeepShared:
    """`convert` (a tensor to another device or dtype), applied to a model's tensors one at a
    time (nn.Module._apply, a deepcopy's memo) so that those sharing one storage come out
    sharing one converted storage: a tied weight's transpose (`nn.Parameter(emb.weight.t())`),
    a buffer viewing a parameter, two buffers of one table. Converted one at a time, each got a
    storage of its own: a count took the buffer for bytes of its own and lost the tie.

    Such a storage is converted whole, once, and each tensor over it is remade as the same view
    of the result (offset, shape and strides). With `tensors` (the model's, all known up front),
    that is done for the storages two or more of them share, every other tensor converted as
    `convert` converts it, and those storages are held until this converter is dropped (their
    numbers stay theirs). Without them, tensors come one at a time (a model being built) and
    every storage is converted whole, which only a move to the meta device should do (it costs
    no memory there): a storage is then known again only while the tensor first converted from
    it lives and still views it, so a freed storage's number, reused, is never taken for it.
    Meta tensors (`t.is_meta`) and, with `whole`, every tensor are converted whole too: the
    bytes a count reports are those of the storage a model holds, whichever way it was made.
    A storage viewed in two dtypes is shared still where it is moved, not cast; cast, each
    tensor of another dtype than the first is converted alone."""

    def __init__(
        self, convert: Convert, tensors: Iterable[torch.Tensor] | None = None, whole: bool = False
    ) -> None:
        self.convert = convert
        self.whole = whole or tensors is None
        self.weak = tensors is None
        self.made: dict[int, _Made] = {}
        groups: dict[int, dict[int, torch.Tensor]] = {}
        for t in () if self.whole else tensors or ():  # `whole` converts every storage whole
            if _viewable(t):
                groups.setdefault(_storage_key(t), {})[id(t)] = t
        # the tensors of each shared storage, held: its number stays its own meanwhile
        self.shared = {key: [*held.values()] for key, held in groups.items() if len(held) > 1}

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        if not _viewable(t):
            return self.convert(t)
        key = _storage_key(t)
        if not (self.whole or t.is_meta or key in self.shared):
            return self.convert(t)
        entry = self.made.get(key)
        if entry is not None:
            source = entry[0]()
            if source is None or _storage_key(source) != key:  # freed, or its data replaced
                entry = None
        if entry is None:
            storage = t.untyped_storage()
            size = storage.nbytes() // t.element_size()
            flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (size,), (1,))
            done = self.convert(flat)
            if done is flat:  # nothing to convert
                return self.convert(t)
            # Held (and so its storage): `flat` itself, or where tensors come one at a time,
            # a weak reference to the tensor, whose storage a model being built may let go.
            kept = weakref.ref(t) if self.weak else (lambda: flat)
            entry = self.made[key] = (kept, t.dtype, done)
        _, dtype, done = entry
        if t.dtype != dtype and done.dtype != dtype:  # cast: its bytes no longer t's
            return self.convert(t)
        # moved, not cast: the same bytes, which `t` views in its own dtype
        view = torch.empty(
            0, dtype=t.dtype if done.dtype == dtype else done.dtype, device=done.device
        )
        return view.set_(done.untyped_storage(), t.storage_offset(), t.size(), t.stride())
