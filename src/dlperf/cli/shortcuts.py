"""Flags short for the keys of a command's config section, declared as data: a table of
`Flag`s beside the command, added to its signature by `with_flags` (typer reads the
signature), and handed to it as `**flags` ({key: value, None where not given}) for
`config.load_job` to read as --set would, so that flags, files and --set share one
validation."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import typer

Command = TypeVar("Command", bound=Callable[..., Any])


@dataclass(frozen=True)
class Flag:
    """The flag of a key: --KEY (_ as -), and --no-KEY too if `negatable`. A flag of a list
    key takes a comma list."""

    type: type
    help: str
    negatable: bool = False

    def parameter(self, key: str) -> inspect.Parameter:
        """The flag as a parameter of a command's signature, None unless given."""
        name = key.replace("_", "-")
        names = f"--{name}/--no-{name}" if self.negatable else f"--{name}"
        option = typer.Option(None, names, help=self.help)
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD  # as the command's own options
        return inspect.Parameter(key, kind, default=option, annotation=self.type)


def with_flags(table: Mapping[str, Flag], keys: Iterable[str]) -> Callable[[Command], Command]:
    """Give a command the flags of `keys` (from `table`, in that order) after its `set_`
    parameter (--set), or first when it has none; it takes them as `**flags`."""

    def add(command: Command) -> Command:
        own = [
            p
            for p in inspect.signature(command, eval_str=True).parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        at = next((i + 1 for i, p in enumerate(own) if p.name == "set_"), 0)
        flags = [table[key].parameter(key) for key in keys]
        signature = inspect.Signature([*own[:at], *flags, *own[at:]])
        command.__signature__ = signature  # type: ignore[attr-defined]
        return command

    return add
