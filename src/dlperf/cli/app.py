"""The Typer application and the options every command shares."""

from __future__ import annotations

import ast
import functools
import inspect
import os
import shlex
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main
from typer.core import TyperGroup
from typer.models import TyperPath

if TYPE_CHECKING:
    from dlperf.store import RunStore
    from dlperf.store.reading import Listing


@functools.cache
def _docstrings(module: str) -> dict[str, str]:
    """The docstrings of `module`'s functions, read from its source ({} without one)."""
    try:
        tree = ast.parse(inspect.getsource(sys.modules[module]))
    except (OSError, TypeError):
        return {}
    functions = (n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    return {f.name: doc for f in functions if (doc := ast.get_docstring(f))}


def _restore_help(group: typer.Typer) -> None:
    """python -OO strips docstrings, which Typer takes each command's help from (what it does,
    its Example: line): read back from the source, for `group`'s commands and its groups'."""
    for info in group.registered_commands:
        callback = info.callback
        if callback is not None and callback.__doc__ is None:
            callback.__doc__ = _docstrings(callback.__module__).get(callback.__name__)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _restore_help(sub.typer_instance)


class PathText(TyperPath):
    """The type of a path option kept as text, where a Path would change what was given
    (Path('') is '.', which wrote into the current directory): a path all the same, whose ~
    `_expand_home` expands."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        return value


def _home_first(convert: Any, value: Any, param: Any, ctx: Any) -> Any:
    return convert(os.path.expanduser(value) if isinstance(value, str) else value, param, ctx)


def _expand_home(command: Any) -> None:
    """A leading ~ in every path `command` and its sub-commands take is the home folder, where
    the shell leaves it (`--out=~/x`, a quoted '~/x'), as it is in data.root, model.name and
    --db: read literally, a read failed for the wrong reason and a write made a folder named ~."""
    for param in command.params:
        if isinstance(param.type, TyperPath):
            param.type.convert = functools.partial(_home_first, param.type.convert)  # type: ignore[method-assign]
    for sub in getattr(command, "commands", {}).values():
        _expand_home(sub)


class _App(typer.Typer):
    _command: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Typer.__call__ without its pretty-exception hook, which this app turns off; the
        # Click command built once a process (0.05 CPU-s; a notebook or the test suite calls
        # the entry point again and again, and an invocation changes nothing in it)
        if self._command is None:
            if sys.flags.optimize >= 2:
                _restore_help(self)
            self._command = typer.main.get_command(self)
            _expand_home(self._command)
        return self._command(*args, **kwargs)


app = _App(
    name="dlperf",
    help="A performance lab for deep-learning training: measure, model, compare.\n\n"
    "Example: dlperf demo",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)


def default_command_group(default: str) -> type[TyperGroup]:
    """A command group where `dlperf GROUP ARGS...` is short for `dlperf GROUP DEFAULT ARGS...`:
    anything that is not a sub-command name or a help flag goes to `default`."""

    class DefaultCommandGroup(TyperGroup):
        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
                args = [default, *args]
            return super().parse_args(ctx, args)

    return DefaultCommandGroup


@dataclass
class State:
    db: str | None = None
    debug: bool = False


state = State()


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"dlperf {version('dlperf')}")
        raise typer.Exit()


@app.callback()
def _global(
    db: str = typer.Option(
        None,
        "--db",
        envvar="DLPERF_DB",
        help="Run store: a SQLAlchemy URL or a SQLite file path (default ./dlperf.db).",
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    _: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    state.db = db
    state.debug = debug


def open_store(create: bool = True, writes: bool | None = None) -> RunStore:  # lazy: --help
    """The store --db names; `create=False` for commands that only read, `writes` for one that
    writes a store only if it is there (RunStore.open)."""
    from dlperf.store import RunStore

    return RunStore.open(state.db, create, writes=writes)


def open_listing() -> Listing:
    """The store --db names, for a command that only lists runs: a SQLite file read with the
    standard library when that answers as the store would (SQLAlchemy's import is most of
    such a command's start-up), else `open_store(create=False)`."""
    from dlperf.store.reading import sqlite_listing

    said_if_mistyped()
    return sqlite_listing(state.db) or open_store(create=False)


def said_if_mistyped() -> None:
    """A warning, for a command that lists the runs of a SQLite store that is not there, where
    a name in its path starts or ends with white space (`urls.absent_note`): an empty listing
    did not say the path is most likely mistyped. (`report` and `doctor` refuse such a store
    in the line that says so: `query.no_runs`.)"""
    from dlperf.cli import console
    from dlperf.store.reading import sqlite_path
    from dlperf.store.urls import absent_note

    path = sqlite_path(state.db)
    note = absent_note(str(path)) if path is not None and not path.exists() else None
    if note is not None:
        console.warn(note)


Json = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]
"""--json, for every command that prints a result: `as_json: Json = False`."""


def config_option(sections: str) -> Any:
    """--config: a TOML file whose `sections` (e.g. "[serve]") hold the command's options."""
    return typer.Option(None, "--config", help=f"A TOML file whose {sections} to use.")


def set_option(example: str) -> Any:
    """--set KEY=VALUE, repeatable; `example` is one such assignment."""
    return typer.Option(
        [], "--set", help=f"Override a config key, e.g. --set {example} (repeatable)."
    )


def db_words() -> list[str]:
    """The `--db` words of this command line, its password as ***, for a line that gives a
    command to run next (`run`'s resume hint): that command needs the same store. Empty when
    the store came from DLPERF_DB (the shell still has it) or is the default."""
    from dlperf.store.urls import masked_words

    words = masked_words(sys.argv[1:])
    for i, word in enumerate(words):
        if word == "--db" and i + 1 < len(words):
            return words[i : i + 2]
        if word.startswith("--db="):
            return [word]
    return []


def placed_after(e: BaseException) -> str | None:
    """The line for an option of dlperf itself given after the command (`dlperf runs list
    --db x.db`): Click said "No such option: --db (Possible options: --kind)" and pointed at
    the command's --help, which has no --db. It gives the command line with the option moved
    (a password in a URL as ***). None for any other error."""
    from dlperf.store.urls import masked_words

    ctx, name = getattr(e, "ctx", None), getattr(e, "option_name", None)
    if type(e).__name__ != "NoSuchOption" or ctx is None or ctx.parent is None:
        return None
    root = ctx.find_root()
    option = next((p for p in root.command.params if name in p.opts), None)
    words = masked_words(sys.argv[1:])
    at = next((i for i, w in enumerate(words) if w == name or w.startswith(f"{name}=")), None)
    if option is None or at is None:
        return None
    end = at + 1 + (words[at] == name and not getattr(option, "is_flag", False))
    moved = words[at:end]
    if end > len(words):  # its value left out too: named, not the next word taken for it
        moved.append(str(option.name).upper())
    line = shlex.join([root.command_path, *moved, *words[:at], *words[end:]])
    env = f" (or set {option.envvar})" if isinstance(option.envvar, str) else ""
    return f"error: {name} goes before the command: {line}{env}"
