"""Walks of a model's modules and parameters without recursion.

torch's own walks (`named_modules`, `parameters`, `buffers`) recurse a few frames a level, so a
model nested 1,202 deep (`nn.Sequential(m, nn.ReLU())` in a loop) ran out of Python's recursion
limit in them: a traceback before the dry forward that tells the nesting in one line
(`registry.too_deep`). dlperf's own checks walk the model here instead.
"""

from __future__ import annotations

from collections.abc import Iterator

from torch import nn


def named_modules(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """model.named_modules() walked without recursion: each module once, in its order (a
    module, then its children's), under its first name. torch's walk recurses, a few frames a
    level (see the module's docstring)."""
    seen: set[int] = set()
    stack: list[tuple[str, nn.Module]] = [("", model)]
    while stack:
        where, module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        yield where, module
        children = [(n, m) for n, m in module._modules.items() if m is not None]
        stack.extend((f"{where}.{n}" if where else n, m) for n, m in reversed(children))


def named_parameters(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    """model.named_parameters() walked without recursion (`named_modules`): each parameter
    once, under its first name."""
    seen: set[int] = set()
    for where, module in named_modules(model):
        for name, p in module._parameters.items():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                yield (f"{where}.{name}" if where else name), p
