"""torch's process-wide hooks and modes, as a model file may leave them on.

A model file's top level (or its factory) may register one of torch's global module hooks
(`torch.nn.modules.module.register_module_forward_hook` and the pre, backward and registration
ones) or enter a TorchFunctionMode or TorchDispatchMode (`Mode().__enter__()`). Either stays on
for the rest of the process: every model built after it, a `--jobs 1` sweep's other points
(even those trained before it: a sweep builds every point first), distill's student baseline,
trained through the file's hook and was stored at chance, unsaid. `HooksAndModes.now()` holds
them as the process has them; `put_back` sets them back after the import or the factory call
(registry._process_kept), one line each kind, as the file's own versions of torch's functions
are: its own model then runs without them too. The modes a file enters as it is imported are
lent back on for its factory's calls (`ImportModes`): a file that enters one at import and
exits it in its factory balances its own stack, and taken off in between, the factory's exit
failed, "trying to pop from empty mode stack".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.modules.module as module_hooks
import torch.utils._device as device_modes
import torch.utils._python_dispatch as python_dispatch
from torch.utils._device import DeviceContext

from dlperf.formatting import few

# torch.nn.modules.module's dicts of global hooks, each by the function that registers into it
_HOOKS = {
    "_global_forward_pre_hooks": "register_module_forward_pre_hook",
    "_global_forward_hooks": "register_module_forward_hook",
    "_global_backward_pre_hooks": "register_module_full_backward_pre_hook",
    "_global_backward_hooks": "register_module_full_backward_hook",
    "_global_buffer_registration_hooks": "register_module_buffer_registration_hook",
    "_global_module_registration_hooks": "register_module_module_registration_hook",
    "_global_parameter_registration_hooks": "register_module_parameter_registration_hook",
}
# Their flags, by the same handle ids: put back with them, unsaid (torch's handle.remove()
# leaves a with_kwargs flag behind, by which torch then believes a global hook is registered)
_FLAGS = ("_global_forward_hooks_always_called", "_global_forward_hooks_with_kwargs")
# Which kind of backward hook torch calls (full or not): set by the first one registered
_FULL_BACKWARD = "_global_is_full_backward_hook"
# torch.utils._python_dispatch's record of a dispatch mode being on, which TorchDispatchMode's
# __enter__ sets and its __exit__ sets back; popping a mode leaves them as they were
_DISPATCH_FLAGS = (
    "_is_in_torch_dispatch_mode",
    "_is_in_non_infra_torch_dispatch_mode",
    "_is_in_any_mode_without_ignore_compile_internals",
)


# Private parts of torch that not every torch dlperf takes (torch>=2.9) may have: read where
# they are, left alone where not, so that a torch without them still imports model files.
_set_compilers_flag: Callable[[bool], None] | None
try:  # the compiler's own copy of the last dispatch flag, which __enter__ keeps in step
    from torch._C._dynamo.guards import set_is_in_mode_without_ignore_compile_internals
except ImportError:
    _set_compilers_flag = None
else:
    _set_compilers_flag = set_is_in_mode_without_ignore_compile_internals


def _name(hook: Any) -> str:
    return getattr(hook, "__qualname__", None) or type(hook).__name__


def _registered_by(name: str) -> str:
    """The function that registers into torch's hook dict `name`: a backward hook is a full
    one unless torch's flag says the older kind (register_module_backward_hook)."""
    if name == "_global_backward_hooks" and getattr(module_hooks, _FULL_BACKWARD) is False:
        return "register_module_backward_hook"
    return _HOOKS[name]


def _default_device_mode() -> Any:
    """The DeviceContext torch.set_default_device holds (None: none set), which torch keeps at
    the bottom of the TorchFunctionMode stack; torch_defaults_kept puts it back."""
    return getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)


def _function_modes() -> list[Any]:
    """This thread's TorchFunctionMode stack, bottom first, the default device's left out."""
    stack = [
        torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())
    ]
    return [mode for mode in stack if mode is not _default_device_mode()]


def _dispatch_modes() -> list[Any]:
    """This thread's TorchDispatchMode stack, bottom first."""
    return [torch._C._get_dispatch_stack_at(i) for i in range(torch._C._len_torch_dispatch_stack())]


def _set_function_modes(modes: list[Any]) -> None:
    stack = [
        torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())
    ]
    # the default device's first: torch keeps it at the bottom
    for mode in [m for m in stack if m is _default_device_mode()] + modes:
        torch._C._push_on_torch_function_stack(mode)


def _set_dispatch_modes(modes: list[Any], flags: dict[str, Any]) -> None:
    for _ in range(torch._C._len_torch_dispatch_stack()):
        torch._C._pop_torch_dispatch_stack(None)
    for mode in modes:
        torch._C._push_on_torch_dispatch_stack(mode)
    _set_dispatch_flags(flags)


def _mode_line(kind: str, entered: list[Any], left: list[Any]) -> str:
    said = []
    if entered:
        said.append(f"entered {kind} {few([type(m).__name__ for m in entered], 3)}")
    if left:
        said.append(f"left the process's {kind} {few([type(m).__name__ for m in left], 3)}")
    return " and ".join(said)


def _set_dispatch_flags(flags: dict[str, Any]) -> None:
    for name, value in flags.items():
        setattr(python_dispatch, name, value)
    # torch's compiler reads the last of them from its own copy, which __enter__ keeps in step
    if _set_compilers_flag is not None and _DISPATCH_FLAGS[-1] in flags:
        _set_compilers_flag(flags[_DISPATCH_FLAGS[-1]])


def _dispatch_flags() -> dict[str, Any]:
    return {n: getattr(python_dispatch, n) for n in _DISPATCH_FLAGS if hasattr(python_dispatch, n)}


def _is_among(mode: Any, modes: list[Any]) -> bool:
    return any(mode is m for m in modes)


@dataclasses.dataclass
class ImportModes:
    """The modes a model file entered as it was imported and left on, bottom first, which
    `HooksAndModes.put_back` took off the stack: lent back on, on top of the process's, for
    each call of its factory, as they are on for it in a process of its own. A factory that
    exits them (entered at import, exited there) finds them to exit; those it exited are not
    lent again, as Python would not have them on for its next call either."""

    function: list[Any]
    dispatch: list[Any]
    dispatch_flags: dict[str, Any]  # as the file's modes left them

    def lend(self) -> None:
        for mode in self.function:
            torch._C._push_on_torch_function_stack(mode)
        if self.dispatch:
            for mode in self.dispatch:
                torch._C._push_on_torch_dispatch_stack(mode)
            _set_dispatch_flags(self.dispatch_flags)

    def keep_on(self, functions: list[Any], dispatch: list[Any]) -> None:
        """Only those still on the stacks (`functions`, `dispatch`) after a factory's call."""
        self.function = [m for m in self.function if _is_among(m, functions)]
        self.dispatch = [m for m in self.dispatch if _is_among(m, dispatch)]


@dataclasses.dataclass(frozen=True)
class HooksAndModes:
    """torch's global module hooks and this thread's function and dispatch modes, as held."""

    hooks: dict[str, tuple[dict[int, Any], dict[int, Any]]]  # each dict, and a copy of it
    full_backward: bool | None
    function_modes: list[Any]
    current_device: Any  # torch.utils._device's, which a DeviceContext sets as it is entered
    dispatch_modes: list[Any]
    dispatch_flags: dict[str, Any]

    @classmethod
    def now(cls) -> HooksAndModes:
        held = {}
        for name in (*_HOOKS, *_FLAGS):
            if (hooks := getattr(module_hooks, name, None)) is not None:
                held[name] = (hooks, dict(hooks))
        return cls(
            held,
            getattr(module_hooks, _FULL_BACKWARD),
            _function_modes(),
            device_modes.CURRENT_DEVICE,
            _dispatch_modes(),
            _dispatch_flags(),
        )

    def entered(self) -> ImportModes:
        """The modes on the stacks now that were not when held, bottom first (the default
        device's DeviceContext left out: torch_defaults_kept puts that back)."""
        return ImportModes(
            [
                m
                for m in _function_modes()
                if not _is_among(m, self.function_modes) and not isinstance(m, DeviceContext)
            ],
            [m for m in _dispatch_modes() if not _is_among(m, self.dispatch_modes)],
            _dispatch_flags(),
        )

    def put_back(self, path: Path, when: str, lent: ImportModes | None = None) -> list[str]:
        """The hooks and modes set back as held where the model file at `path` changed them,
        one note for the hooks and one for the modes. Modes first: the rest of dlperf's checks
        run torch code, which a mode of the file's would see. `lent`: its import's modes, lent
        for the block (a factory's call), taken off unsaid where still on (its import said
        them), and kept for its next call only so."""
        return self._modes_put_back(path, when, lent) + self._hooks_put_back(path, when)

    def _modes_put_back(self, path: Path, when: str, lent: ImportModes | None) -> list[str]:
        lines = []
        functions, dispatch = _function_modes(), _dispatch_modes()
        if lent is not None:
            lent.keep_on(functions, dispatch)
            # Its import's modes the call left on: taken off, unsaid (its import said them)
            functions = [m for m in functions if not _is_among(m, lent.function)]
            dispatch = [m for m in dispatch if not _is_among(m, lent.dispatch)]
            if lent.function:
                _set_function_modes(self.function_modes)
            if lent.dispatch:
                _set_dispatch_modes(self.dispatch_modes, self.dispatch_flags)
        if [id(m) for m in functions] != [id(m) for m in self.function_modes]:
            _set_function_modes(self.function_modes)
            device_modes.CURRENT_DEVICE = self.current_device
            # `torch.device("meta").__enter__()` is a DeviceContext: torch_defaults_kept said it
            lines.append(
                self._modes_changed(
                    "a TorchFunctionMode",
                    [m for m in functions if not isinstance(m, DeviceContext)],
                    [m for m in self.function_modes if not isinstance(m, DeviceContext)],
                )
            )
        if [id(m) for m in dispatch] != [id(m) for m in self.dispatch_modes]:
            _set_dispatch_modes(self.dispatch_modes, self.dispatch_flags)
            lines.append(self._modes_changed("a TorchDispatchMode", dispatch, self.dispatch_modes))
        return [
            f"model file {path} {said} {when}; the process's modes put back, and this "
            "model's forward runs without it too: left on, every torch call of every model "
            "built after it in the process (a sweep's other points) went through it (enter it "
            "within the model's forward, `with Mode(): ...`, instead)"
            for said in lines
            if said
        ]

    @staticmethod
    def _modes_changed(kind: str, now: list[Any], held: list[Any]) -> str:
        entered = [m for m in now if all(m is not h for h in held)]
        left = [h for h in held if all(h is not m for m in now)]
        if not entered and not left and [id(m) for m in now] != [id(m) for m in held]:
            return f"reordered the process's {kind}s"
        return _mode_line(kind, entered, left)

    def _hooks_put_back(self, path: Path, when: str) -> list[str]:
        added: list[str] = []
        removed: list[str] = []
        for name, (hooks, held) in self.hooks.items():
            now = dict(getattr(module_hooks, name))  # the file may have bound a new dict there
            if name in _HOOKS:
                by = _registered_by(name)
                added += [f"{_name(h)} ({by})" for k, h in now.items() if held.get(k) is not h]
                removed += [f"{_name(h)} ({by})" for k, h in held.items() if now.get(k) is not h]
            if now != held or getattr(module_hooks, name) is not hooks:
                hooks.clear()
                hooks.update(held)  # in the order held: torch calls them in that order
                setattr(module_hooks, name, hooks)
        setattr(module_hooks, _FULL_BACKWARD, self.full_backward)
        lines = []
        if added:
            lines.append(
                f"model file {path} registered torch's global module "
                f"{'hook' if len(added) == 1 else 'hooks'} {few(added, 3)} {when}; removed, "
                "and this model runs without it too: left so, every module of every model "
                "built after it in the process (a sweep's other points) ran it (register a "
                "hook on the model's own modules instead, "
                "`self.fc.register_forward_hook(...)`)"
            )
        if removed:
            lines.append(
                f"model file {path} removed the process's global module "
                f"{'hook' if len(removed) == 1 else 'hooks'} {few(removed, 3)} {when}; put "
                "back, as the process had them"
            )
        return lines
