"""One registry and one constructor behind every model name (after timm's create_model).

Names resolve in this order: dlperf's own models (registered with `@register_model`),
torchvision's classification zoo, then "path/to/file.py:factory" for a user's module.

This module imports no model file: each one registers its factories when the `dlperf.models`
package imports it (timm's way), so the registry is full whenever this module is reachable.
"""

from __future__ import annotations

import argparse
import atexit
import builtins
import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import importlib.abc
import importlib.util
import inspect
import os
import random
import re
import signal
import sys
import threading
import time
import traceback
import types
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from importlib.machinery import ModuleSpec, PathFinder, SourceFileLoader
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import Any, NoReturn

import numpy as np
import torch
from torch import nn
from torch.nn.parameter import is_lazy

from dlperf import stack
from dlperf.config.base import check_utf8_name
from dlperf.errors import (
    MODEL_CODE,
    USER_MODULE_PREFIX,
    ModelOsExit,
    UserError,
    error_text,
    exit_call,
    in_model_file,
    no_forward_fix,
    out_of_memory,
    raised_by_model,
)
from dlperf.formatting import few, ran_out
from dlperf.models import walk
from dlperf.models.torch_hooks import HooksAndModes, ImportModes
from dlperf.parsing import did_you_mean, is_file_spec, model_file_text, quoted
from dlperf.paths import not_regular, unexpanded
from dlperf.procs import alive
from dlperf.stopping import STOP_SIGNALS, TIMER_SIGNALS, timer_of

Factory = Callable[..., nn.Module]
AUTOMATIC = ("num_classes", "in_channels")  # what dlperf gives every factory that takes them
_REGISTRY: dict[str, Factory] = {}
_INPUTS: dict[str, list[int]] = {}


def register_model(fn: Factory, name: str | None = None) -> Factory:
    """Decorator: `fn` under its own name, or under `name` (a partial of a model class)."""
    _REGISTRY[name or fn.__name__] = fn
    return fn


def meant_for(*shape: int) -> Callable[[Factory], Factory]:
    """Decorator: the input (C, H, W) a registered model is counted at by default, for a
    network drawn for one size (the paper's AlexNet at 227x227)."""

    def record(fn: Factory) -> Factory:
        _INPUTS[fn.__name__] = list(shape)
        return fn

    return record


def registered_input(name: str) -> list[int] | None:
    """The input a registered model is meant for; None when it names none."""
    return _INPUTS.get(name)


def registered_factory(name: str) -> Factory | None:
    return _REGISTRY.get(name)


def _torchvision_names() -> list[str]:
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def list_models() -> dict[str, list[str]]:
    return {"dlperf": sorted(_REGISTRY), "torchvision": _torchvision_names()}


def factory_parameters(fn: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    """The parameters a factory takes; none for an nn.Module subclass whose `__init__` is
    nn.Module's own, which takes *args and **kwargs only to refuse them."""
    if isinstance(fn, type) and issubclass(fn, nn.Module) and fn.__init__ is nn.Module.__init__:
        return {}
    return inspect.signature(fn).parameters


def _call(fn: Callable[..., nn.Module], kwargs: dict[str, Any]) -> nn.Module:
    """`fn(**kwargs)`, its positional-only parameters given by position: a
    `def __init__(self, num_classes, /)` cannot take the data's num_classes by keyword. One
    not given that comes before one given takes its default there (analyze leaves num_classes
    to `def build(num_classes=10, in_channels=1, /)`, and passes in_channels); one without a
    default stops them, and Python's TypeError says which is missing."""
    only = [p for p in factory_parameters(fn).values() if p.kind is p.POSITIONAL_ONLY]
    given = [i for i, p in enumerate(only) if p.name in kwargs]
    positional: list[Any] = []
    rest = dict(kwargs)
    for p in only[: given[-1] + 1 if given else 0]:
        if p.name in rest:
            positional.append(rest.pop(p.name))
        elif p.default is not p.empty:
            positional.append(p.default)
        else:
            break
    return fn(*positional, **rest)


def _call_accepting(fn: Factory, kwargs: dict[str, Any], name: str) -> nn.Module:
    params = factory_parameters(fn)
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return _call(fn, kwargs)
    unknown = [k for k in kwargs if k not in params]
    if unknown:
        raise UserError(
            f"model '{name}' does not accept {', '.join(unknown)}",
            f"accepted: {', '.join(params) or 'no arguments'}",
        )
    try:
        return _call(fn, kwargs)
    except (TypeError, ValueError) as e:  # a value the factory refuses (conv_stack's n=0)
        raise UserError(f"model '{name}': {e}") from None
    except Exception as e:
        if out_of_memory(e):
            raise no_room(f"building model '{name}'", e, without_automatic(kwargs)) from None
        raise


def check_automatic(kwargs: Mapping[str, Any], key: str, value: int, said: str, hint: str) -> None:
    """Refuse `kwargs[key]` (num_classes or in_channels, which dlperf gives every factory)
    unless it is `value`, the number dlperf gives; `said` tells where that comes from."""
    given = kwargs.get(key, value)
    if type(given) is not int or given != value:
        raise UserError(f"model.kwargs.{key}={given!r}: {said}", hint)


def without_automatic(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """`kwargs` less num_classes and in_channels, once `check_automatic` agreed with them:
    create_model takes those two by name."""
    return {k: v for k, v in kwargs.items() if k not in AUTOMATIC}


def accepted(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Those of `kwargs` that `fn` takes (all of them when it takes **kwargs)."""
    params = factory_parameters(fn)
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def load_factory(spec: str) -> Callable[..., nn.Module]:
    """The factory that "path/to/file.py:factory" names, its file imported."""
    check_utf8_name("model", spec)  # as model.name is: its module's name, JSON, the store
    path_text, _, factory = spec.rpartition(":")
    # "c:d/net.py": the colon is a directory's, and what follows it a path, not a factory's
    # name (split there, the line was "model file c not found")
    if ":" not in spec or (not factory.isidentifier() and _path_like(factory)):
        raise UserError(
            f"model '{spec}' names a file but no factory",
            f"name the function or class that builds the model after a colon: {spec}:build",
        )
    path = Path(path_text).expanduser()  # as model.name's and data.root's ~ are
    if path.is_dir():
        package = path / "__init__.py"
        hint = f"name its file: {package}:{factory}" if package.is_file() else None
        raise UserError(f"model file {path} is a directory", hint or "use path/to/file.py:factory")
    kind = not_regular(path)  # stat'ed, never opened: a FIFO would block the import for ever
    if kind is not None:
        raise UserError(
            f"model file {path} is not a regular file ({kind})", "use path/to/file.py:factory"
        )
    if not path.is_file():
        # $HOME/net.py from a TOML file or single quotes, a file:// URL: said as one, the URL
        # as written (Path drops one of its slashes), not "not found"
        if (found := unexpanded(path_text)) is not None:
            raise UserError(f"model file {path_text} {found[0]}", found[1])
        run = _REBUILDING.get()
        hint = (
            "use path/to/file.py:factory"
            if run is None
            # The spec is the run's own, as stored: no other path or factory rebuilds it
            else f"restore the file {run} was trained with: a run keeps its model file's path, "
            "not its code"
        )
        raise UserError(f"model file {path} not found", hint)
    if path.suffix != ".py":
        notebook = path.suffix == ".ipynb"
        raise UserError(
            f"model file {path} is not a Python (.py) file",
            f"make one of the notebook: `jupyter nbconvert --to script {path}`, then name "
            f"{path.with_suffix('.py')}:{factory}"
            if notebook
            else "use path/to/file.py:factory",
        )
    module = _import_file(path)
    fn: Callable[..., nn.Module] | None = getattr(module, factory, None)
    if isinstance(fn, nn.Module):  # callable, but its call is the forward: not a constructor
        kind = type(fn).__name__
        kind = f"nn.{kind}" if type(fn).__module__.startswith("torch.nn.") else kind
        raise UserError(
            f"{path}: '{factory}' is an instance of {kind}, not a class or factory",
            f"name a function that builds it, e.g. `def make(num_classes=10): return {kind}(...)`",
        )
    if not callable(fn):
        _refuse_name(path, factory, fn, module)
    return fn


def _path_like(text: str) -> bool:
    return "/" in text or os.sep in text or text.endswith(".py")


def _defined(module: ModuleType) -> list[str]:
    """The names of `module` that may build a model and that the user's code defines (the file,
    or a module beside it): functions, nn.Module classes, partials. Not what it imported from
    elsewhere (`from torch.nn import Linear` is no factory of the file's), nor a class that
    builds something else (a dataclass of settings)."""
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or not callable(value) or isinstance(value, nn.Module):
            continue
        target = value.func if isinstance(value, functools.partial) else value
        if isinstance(target, type) and not issubclass(target, nn.Module):
            continue
        made_here = str(getattr(target, "__module__", "")).startswith(USER_MODULE_PREFIX)
        if made_here or isinstance(value, functools.partial):
            names.append(name)
    return names


def _other_classes(module: ModuleType) -> list[str]:
    """The public classes the model file `module` defines itself that are no nn.Module."""
    return [
        name
        for name, value in vars(module).items()
        if isinstance(value, type)
        and not name.startswith("_")
        and value.__module__ == module.__name__
        and not issubclass(value, nn.Module)
    ]


def _refuse_name(path: Path, factory: str, value: Any, module: ModuleType) -> NoReturn:
    """Refuse `factory`, a name of the model file at `path` that is missing (`value` None) or
    not callable, offering the names that may build a model, or the factory to write."""
    names = _defined(module)
    example = factory if factory.isidentifier() else "build"
    builds = f"`def {example}(num_classes=10): ...` returning a torch.nn.Module"
    write = f"add {builds}"
    found = did_you_mean(factory, names, f"found: {', '.join(names)}") if names else write
    if factory in vars(module):  # `build = 5`: there, but nothing to call
        kind = type(value).__name__
        what = "None" if value is None else f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"
        hint = found if names else f"make it a function: {builds}"
        raise UserError(f"{path}: '{factory}' is {what}, not a factory", hint)
    if not names:
        # Its classes that are no nn.Module (a config, a helper) are named: "defines no
        # class" read wrong of a file that has one
        others = _other_classes(module)
        found = f" (found: class {', '.join(others)}, not an nn.Module)" if others else ""
        raise UserError(f"model file {path} defines no function or nn.Module class{found}", write)
    raise UserError(f"{path} has no factory '{factory}'", found)


# --- a model file's neighbours ---------------------------------------------------------------
#
# Python keeps one module per name: two model files in one process (a sweep's points, distill's
# teacher and student, two API calls), each with a `helper.py` beside it, would share the first
# `helper` imported. So each model file's directory is a package of its own name (its home:
# dlperf_user_<folder>_<hash>, its __path__ that directory), and the file and every module under
# that package run with builtins whose `__import__` makes `import helper` the home's `helper`
# where Python would find no other first: every `import` statement of theirs finds its own
# neighbours, lazily in a forward too, and a json.py beside them shadows nothing.

_REAL_IMPORT = builtins.__import__
_BUILTINS: dict[str, dict[str, Any]] = {}  # a home's or a model module's name -> its builtins
_DIRECTORIES: set[str] = set()  # every home's directory
# The model files imported under a home (its submodules): `import einops` in a model file
# named einops.py is the real einops, as it was while model files were top-level modules.
_MODEL_FILES: set[str] = set()
# The package each model file was last imported under (by the file's resolved path), whose
# modules in its folder a run hashes (`neighbour_digests`) so that an edit of helper.py is told
# as one of the model file is (experiment.run)
_NEIGHBOURS: dict[Path, str] = {}
# The modes each model file's last import entered and left on (by its resolved path), lent
# to its factory's calls (torch_hooks.ImportModes)
_IMPORT_MODES: dict[Path, ImportModes] = {}


def _home(directory: Path) -> str:
    """The package a model file's directory is imported as, made the first time."""
    # The bytes: a path reached through a link may name a folder that is not UTF-8
    digest = hashlib.sha1(os.fsencode(directory)).hexdigest()[:8]
    home = USER_MODULE_PREFIX + re.sub(r"\W", "_", directory.name) + f"_{digest}"
    if home not in _BUILTINS:
        own_import = functools.partial(_import, home, str(directory))
        _BUILTINS[home] = {**vars(builtins), "__import__": own_import, MODEL_CODE: True}
        _DIRECTORIES.add(str(directory))
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(sys.meta_path.index(PathFinder), _FINDER)
    if home not in sys.modules:
        spec = ModuleSpec(home, None, is_package=True)
        spec.submodule_search_locations = [str(directory)]
        sys.modules[home] = importlib.util.module_from_spec(spec)
    return home


def _import(
    home: str,
    directory: str,
    name: str,
    globals: Mapping[str, Any] | None = None,
    locals: Mapping[str, Any] | None = None,
    fromlist: Sequence[str] = (),
    level: int = 0,
) -> ModuleType:
    """`__import__` for the modules of `home`: a top-level name Python finds nowhere else first
    (sys.path, no home's directory counted) is the one beside them, or missing."""
    top = name.partition(".")[0]
    own = f"{home}.{top}"
    imported = own in sys.modules and own not in _MODEL_FILES
    if level == 0 and top not in sys.modules and (imported or not _elsewhere(top)):
        if own not in sys.modules and PathFinder.find_spec(top, [directory]) is None:
            raise ModuleNotFoundError(f"No module named {top!r}", name=top)
        module = _REAL_IMPORT(f"{home}.{name}", globals, locals, fromlist, 0)
        return module if fromlist else sys.modules[own]
    return _REAL_IMPORT(name, globals, locals, fromlist, level)


def _elsewhere(top: str) -> bool:
    """Whether Python finds `top` other than beside a model file: built in, frozen, on sys.path
    (no home's directory counted) or through another finder."""
    path = [p for p in sys.path if os.path.realpath(p or os.curdir) not in _DIRECTORIES]
    return any(
        finder.find_spec(top, path if finder is PathFinder else None) is not None
        for finder in sys.meta_path
        if finder is not _FINDER and hasattr(finder, "find_spec")
    )


class _Loader(SourceFileLoader):
    """Runs a model file, or a module under its home or its package, with their builtins."""

    def exec_module(self, module: ModuleType) -> None:
        vars(module)["__builtins__"] = _BUILTINS[module.__name__.partition(".")[0]]
        super().exec_module(module)

    def get_code(self, fullname: str) -> CodeType:
        # From the source at each import, never through __pycache__: a .pyc records its
        # source's mtime in whole seconds and its size, so a model file rewritten within the
        # second it was imported, at the same size, ran its old code.
        return self.source_to_code(self.get_data(self.path), self.path)


class _Finder(importlib.abc.MetaPathFinder):
    """The submodules of a home or of a model package, found as Python finds them."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if path is None or fullname.partition(".")[0] not in _BUILTINS:
            return None
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and type(spec.loader) is SourceFileLoader:
            spec.loader = _Loader(fullname, str(spec.origin))
        return spec


_FINDER = _Finder()


class _ArgumentsRefused(BaseException):
    """argparse refusing a model file's command line (it would print its usage and exit)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_ARGPARSE_ERROR = argparse.ArgumentParser.error
_ONE_SCRIPT = threading.RLock()  # sys.argv is the process's: one model file's at a time


@contextlib.contextmanager
def _as_script(path: Path) -> Iterator[None]:
    """sys.argv as when `python path` runs the file, [path], while the block runs (put back
    after), so that a model file parsing its command line (argparse at import) parses none of
    dlperf's and takes its defaults; argparse refusing that (an argument without a default)
    raises _ArgumentsRefused with its reason in this thread, printing no usage of its own."""
    thread = threading.get_ident()
    active = True

    def refused(parser: argparse.ArgumentParser, message: str) -> NoReturn:
        if active and threading.get_ident() == thread:
            raise _ArgumentsRefused(message)
        _ARGPARSE_ERROR(parser, message)

    with _ONE_SCRIPT:
        argv, error = sys.argv, argparse.ArgumentParser.error
        sys.argv = [str(path)]
        argparse.ArgumentParser.error = refused  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            active = False
            sys.argv = argv
            argparse.ArgumentParser.error = error  # type: ignore[method-assign]


# os._exit ends the process at once, with no word and no exception (sys.exit raises one): from
# a model's forward, `dlperf run` ended with the model's exit code (0, a success) and its run
# left `running`. Once a model file is imported, os._exit called by a model file's own code
# (the file, or a module beside it) raises ModelOsExit, a SystemExit, instead, told as a
# model's sys.exit is (a failed run, exit 1); called from anywhere else it is os._exit.
#
# That holds only while dlperf calls the model: once the process is exiting nothing is left to
# catch the ModelOsExit, and a model file's `atexit.register(lambda: os._exit(3))` ended a
# finished command in Python's "Exception ignored in atexit callback" traceback. There it is the
# real os._exit, with the model's status: dlperf's work is done (stored, its output flushed
# first), os._exit does not return (the model's code after it must not run), and any module
# Python imports ends its process so. One line says whose status it is.
#
# A process forked from dlperf's (a model file's multiprocessing.Process or Pool worker, under
# the "fork" start method) inherits the guard, and multiprocessing ends each child with
# os._exit: there it is the child's own exit, never dlperf's. Refused, the child ran on into
# dlperf's error handling ("error: model file ... called os._exit(0)") as a second dlperf.
_EXITS: list[Callable[[int], NoReturn]] = []  # the os._exit the guard wraps, once installed
_GUARDED: list[int] = []  # the pid of the process that installed the guard: dlperf's
_REFUSING = threading.local()  # `on`: inside _no_os_exit in this thread
_EXITING = threading.Event()  # set by the exit handler `_exiting`: the process is ending


def _exiting() -> None:
    _EXITING.set()


def _exit_handler_last() -> None:
    """`_exiting` registered again, after every exit handler a model file registered so far:
    Python runs them last first, so it runs before each of theirs."""
    atexit.unregister(_exiting)
    atexit.register(_exiting)


def _by_interpreter(frame: FrameType) -> bool:
    """Whether nothing but model code is on `frame`'s stack: no caller of dlperf's, the
    interpreter called it (an exit handler the model registered in its forward, a finaliser as
    the process ends)."""
    here: FrameType | None = frame
    while here is not None:
        if not in_model_file(here):
            return False
        here = here.f_back
    return True


def _guarded_exit(status: int) -> NoReturn:
    if os.getpid() not in _GUARDED:  # a forked child's exit (above): its own to make
        _EXITS[0](status)
    try:
        caller: FrameType | None = sys._getframe(1)
    except ValueError:  # called from C with no Python frame: atexit.register(os._exit, 3)
        caller = None
    model = caller is not None and in_model_file(caller)
    ending = _EXITING.is_set() or (caller is not None and _by_interpreter(caller))
    if caller is not None and (getattr(_REFUSING, "on", False) or (model and not ending)):
        # Its traceback ends at the caller's line, as a sys.exit there would: the CLI names
        # a model's exit by the innermost frame (cli._foreign_caller).
        here = types.TracebackType(None, caller, caller.f_lasti, caller.f_lineno)
        raise ModelOsExit(status).with_traceback(here)
    if caller is not None and model:
        # A warnings filter of the model's ("error") must not stop the exit it asked for
        with contextlib.suppress(Exception):
            note(
                f"model file {caller.f_code.co_filename} (line {caller.f_lineno}) called "
                f"os._exit({status!r}) as the process exited: its exit status is the model's, "
                "not dlperf's",
                Path(caller.f_code.co_filename),
            )
    if model or caller is None:
        # os._exit leaves Python's buffers unwritten: dlperf's output (a --json document) first
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed pipe: nothing more to say
                stream.flush()
    _EXITS[0](status)


@contextlib.contextmanager
def _no_os_exit() -> Iterator[None]:
    """The guard on os._exit installed (for good), and os._exit called from any code in this
    thread while the block runs (a model file's import: a library it calls too) a ModelOsExit.
    Called from any other thread, or later from code not a model file's, it is os._exit."""
    if os._exit is not _guarded_exit:
        _EXITS[:], _GUARDED[:] = [os._exit], [os.getpid()]
        os._exit = _guarded_exit
    before = getattr(_REFUSING, "on", False)
    _REFUSING.on = True
    try:
        yield
    finally:
        _REFUSING.on = before


# --- what a model file does to the process ------------------------------------------------
#
# A model file's top level and its factory run inside dlperf's process, and some of what they
# do outlasts them: signal handlers that replace dlperf's stop handlers (Ctrl-C and SIGTERM no
# longer stop the command), a working directory that moves where relative outputs land, torch's
# default dtype or device (a run trained in float64, a caller's next model built on "meta"), a
# lowered recursion limit (dlperf's next deep import fails), a child process left running after
# dlperf exits. Each is checked after the import and after the
# factory call: all but the last are put back, the last named (it is the model's to end).

_NOTES: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("notes", default=None)
_REBUILDING: contextvars.ContextVar[str | None] = contextvars.ContextVar("run", default=None)


@contextlib.contextmanager
def rebuilding(run: str) -> Iterator[None]:
    """The block rebuilds the model of a stored run (`run` names it: "run 51"), from its spec
    as stored: a model file gone is refused with the fix that run needs (restore the file it
    was trained with), not one that names another file (it cannot take another)."""
    token = _REBUILDING.set(run)
    try:
        yield
    finally:
        _REBUILDING.reset(token)


@contextlib.contextmanager
def noting() -> Iterator[list[str]]:
    """Collect, in the list it gives, what model files imported or built in the block did to
    the process (one line each), for the caller to tell (a run's reporter); outside such a
    block each is a RuntimeWarning."""
    notes: list[str] = []
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)


def note(message: str, path: Path) -> None:
    """Tell `message`, what a model (its file `path`) did to the process: into the list of the
    innermost `noting()` block, or outside one as a RuntimeWarning of `path`."""
    notes = _NOTES.get()
    if notes is not None:
        notes.append(message)
    else:  # line 0: no source line under the message, which stays one line
        warnings.warn_explicit(message, RuntimeWarning, str(path), 0)


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # deleted, or deeper than PATH_MAX: nothing to put back
        return None


def _children() -> set[int]:
    """The pids of this process's running children (Linux's /proc; none elsewhere)."""
    found: set[int] = set()
    try:
        for task in Path("/proc/self/task").iterdir():
            found.update(int(p) for p in (task / "children").read_text().split())
    except (OSError, ValueError):  # a kernel without CONFIG_PROC_CHILDREN: every process's PPid
        found.clear()
        with contextlib.suppress(OSError):
            for entry in Path("/proc").iterdir():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    if entry.name.isdigit():
                        stat = (entry / "stat").read_text().rpartition(")")[2].split()
                        if int(stat[1]) == os.getpid():
                            found.add(int(entry.name))
    return {pid for pid in found if alive(pid)}


def _multiprocessings() -> tuple[set[int], set[int]]:
    """The pids of this process's multiprocessing children that end as it exits, and of
    those it waits for then. multiprocessing's exit handler ends its daemonic processes (a
    Pool's workers) and joins the others; its forkserver and resource tracker end as the pipe
    from this process closes. Named as left running "and outliving this command", a Pool's
    workers sent the user hunting for processes that were gone."""
    if "multiprocessing" not in sys.modules:  # nothing it started: not imported for this
        return set(), set()
    import multiprocessing

    ended: set[int | None] = set()
    joined: set[int | None] = set()
    for process in multiprocessing.active_children():
        (ended if process.daemon else joined).add(process.pid)
    helpers = (
        ("multiprocessing.forkserver", "_forkserver", "_forkserver_pid"),
        ("multiprocessing.resource_tracker", "_resource_tracker", "_pid"),
    )
    for name, instance, pid in helpers:
        module = sys.modules.get(name)
        ended.add(getattr(getattr(module, instance, None), pid, None))
    return {p for p in ended if p is not None}, {p for p in joined if p is not None}


def _command(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return "?"
    said = " ".join(os.fsdecode(w) for w in words)
    return said if len(said) <= 100 else said[:97] + "..."


def torch_defaults_kept(
    path: Path, when: str, dtype: torch.dtype, device: torch.device, who: str | None = None
) -> list[str]:
    """torch's default dtype and device put back to `dtype` and `device` where the model file
    (`who` says it: "model file PATH" unless given) changed them, one note each. Left so, a
    float64 default trained the run in float64 (its images too) while it was stored as fp32,
    refused a sweep's later sound points, and stayed in an API caller's process, as a "meta"
    device did: the next sound model was built on it. Also after a model's forward
    (engine.checks), which set them at every call."""
    who = who or f"model file {path}"
    notes: list[str] = []
    if torch.get_default_dtype() != dtype:
        notes.append(
            f"{who} set torch's default dtype to {torch.get_default_dtype()} "
            f"{when}; put back to {dtype}, in which dlperf builds and trains models"
        )
        torch.set_default_dtype(dtype)
    moved = torch.get_default_device()
    if moved != device:
        # None clears the override: cpu, with no cost on every torch call (torch's warning)
        torch.set_default_device(None if device == torch.device("cpu") else device)
        notes.append(
            f"{who} set torch's default device to {moved} {when}; put back to "
            f"{device}, where dlperf builds models and then moves them to the run's device"
        )
    return notes


def _flushes_denormals() -> bool:
    """Whether this thread's CPU flushes denormal results to zero, as torch.set_flush_denormal
    sets it (torch has no getter): a product below float64's smallest normal number is 0."""
    return float((torch.tensor([1e-300], dtype=torch.float64, device="cpu") * 1e-20)[0]) == 0.0


@dataclasses.dataclass(frozen=True)
class _Autograd:
    """torch's process-global settings a model file may switch for its own script (anomaly
    detection to debug a NaN, deterministic algorithms for reproducibility, flush denormal
    for speed) that outlive it: left on, a run's timings were taken under anomaly mode (many
    times slower), and an API caller's process kept all three, unsaid."""

    anomaly: bool
    check_nan: bool
    deterministic: bool
    warn_only: bool
    flush_denormal: bool

    @classmethod
    def now(cls) -> _Autograd:
        return cls(
            torch.is_anomaly_enabled(),
            torch.is_anomaly_check_nan_enabled(),
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            _flushes_denormals(),
        )

    def put_back(self, path: Path, when: str) -> list[str]:
        """These settings restored where the model file changed them, one note each."""
        now, notes = _Autograd.now(), []
        said = f"model file {path}"
        if (now.anomaly, now.check_nan) != (self.anomaly, self.check_nan):
            torch.autograd.set_detect_anomaly(self.anomaly, self.check_nan)
            notes.append(
                f"{said} turned torch's anomaly detection {_on(now.anomaly)} {when}; put back "
                f"{_on(self.anomaly)}: it slows every training step, and the run's timings "
                "with it (to debug a NaN, use it in a script of your own)"
            )
        if (now.deterministic, now.warn_only) != (self.deterministic, self.warn_only):
            torch.use_deterministic_algorithms(self.deterministic, warn_only=self.warn_only)
            notes.append(
                f"{said} turned torch's deterministic algorithms {_on(now.deterministic)} "
                f"{when}; put back {_on(self.deterministic)}, as the process had them"
            )
        if now.flush_denormal != self.flush_denormal:
            torch.set_flush_denormal(self.flush_denormal)
            notes.append(
                f"{said} turned torch's flush denormal {_on(now.flush_denormal)} {when}; put "
                f"back {_on(self.flush_denormal)}, as the process had it"
            )
        return notes


# torch.backends settings a model file may set for its own script (oneDNN off, cuDNN's
# autotuner on, TF32 by set_float32_matmul_precision), by their path under torch.backends:
# the older TF32 switches before the fp32_precision ones, which torch sets with them and which
# so are set back last. Some cannot be read once both kinds were set ("a mix of the legacy and
# new APIs"): those are compared only where they could be read before.
_BACKEND_FLAGS = (
    "cudnn.enabled",
    "cudnn.benchmark",
    "cudnn.benchmark_limit",
    "cudnn.deterministic",
    "cudnn.allow_tf32",
    "mkldnn.enabled",
    "mkldnn.deterministic",
    "cuda.matmul.allow_tf32",
    "cuda.matmul.allow_fp16_reduced_precision_reduction",
    "cuda.matmul.allow_bf16_reduced_precision_reduction",
    "cuda.matmul.allow_fp16_accumulation",
    "opt_einsum.enabled",
    "opt_einsum.strategy",
    "fp32_precision",
    "cudnn.fp32_precision",
    "cudnn.conv.fp32_precision",
    "cudnn.rnn.fp32_precision",
    "mkldnn.fp32_precision",
    "mkldnn.matmul.fp32_precision",
    "mkldnn.conv.fp32_precision",
    "mkldnn.rnn.fp32_precision",
    "cuda.matmul.fp32_precision",
)
# Those torch sets by a call: the getter's path, the setter's
_BACKEND_CALLS = (
    ("cuda.flash_sdp_enabled", "cuda.enable_flash_sdp"),
    ("cuda.mem_efficient_sdp_enabled", "cuda.enable_mem_efficient_sdp"),
    ("cuda.math_sdp_enabled", "cuda.enable_math_sdp"),
    ("cuda.cudnn_sdp_enabled", "cuda.enable_cudnn_sdp"),
    ("mha.get_fastpath_enabled", "mha.set_fastpath_enabled"),
)
_UNREAD = object()  # a setting this torch lacks or cannot read now; an attribute removed


def _backend(path: str) -> Any:
    return functools.reduce(getattr, path.split("."), torch.backends)


def _backend_value(path: str, call: bool) -> Any:
    try:
        return _backend(path)() if call else _backend(path)
    except (AttributeError, RuntimeError):
        return _UNREAD


def _backends_now() -> dict[str, Any]:
    """The settings of _BACKEND_FLAGS and _BACKEND_CALLS ("cuda.flash_sdp_enabled()"), each
    _UNREAD where it cannot be read."""
    flags = {path: _backend_value(path, call=False) for path in _BACKEND_FLAGS}
    calls = {f"{get}()": _backend_value(get, call=True) for get, _ in _BACKEND_CALLS}
    return flags | calls


def _backends_put_back(held: dict[str, Any], path: Path, when: str) -> list[str]:
    """torch.backends settings restored to `held` (`_backends_now()`) where the model file at
    `path` changed them, one note for all. Left so, every model built after it in the process
    ran under them (a sweep's other points: `mkldnn.enabled = False` slowed and changed them,
    unsaid), and the run's timings were not dlperf's settings'."""
    now = _backends_now()
    changed = [k for k, v in held.items() if v is not _UNREAD and now[k] != v]
    if not changed:
        return []
    setters = {f"{get}()": put for get, put in _BACKEND_CALLS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation of the older TF32 switches
        for key in changed:
            # RuntimeError: a pair torch refuses to take back; the note still names it
            with contextlib.suppress(RuntimeError):
                if key in setters:
                    _backend(setters[key])(held[key])
                else:
                    parent, _, name = key.rpartition(".")
                    setattr(_backend(parent) if parent else torch.backends, name, held[key])
    said = [f"{k}={now[k]!r} (was {held[k]!r})" for k in changed if now[k] is not _UNREAD]
    return [
        f"model file {path} changed torch.backends settings {when}: "
        f"{few(said or changed, 4)}; put back as the process had them: they decide which "
        "kernels run (oneDNN, cuDNN, TF32), and so the results and speed of every model "
        "built after it in the process (a sweep's other points)"
    ]


def _layer_classes() -> dict[type, str]:
    """torch.nn's layer classes, with the bases of torch's they inherit methods from
    (BatchNorm2d's forward is `_BatchNorm.forward`, Conv2d's `_ConvNd`'s, a loss's `_Loss`'s),
    by name: `torch.nn.ReLU`, a private base by its module and qualified name."""
    named = {
        cls: f"torch.nn.{name}"
        for name, cls in vars(nn).items()
        if isinstance(cls, type) and issubclass(cls, nn.Module) and cls is not nn.Module
    }
    for cls in list(named):
        for base in cls.__mro__[1:]:
            if base not in named and base is not nn.Module and base.__module__.startswith("torch."):
                named[base] = f"{base.__module__}.{base.__qualname__}"
    return named


# Where a model file's own version of a torch function (`F.relu = my_relu`, `nn.ReLU.forward =
# ...`, `_BatchNorm.forward = ...`) would reach every model built after it in the process:
# torch's namespaces and the layer classes of torch.nn with their bases (a dict copy each,
# some 200 in all: a few milliseconds a block)
_PATCHABLE: tuple[tuple[str, Any], ...] = (
    ("torch", torch),
    ("torch.nn", nn),
    ("torch.nn.functional", nn.functional),
    ("torch.nn.init", nn.init),
    ("torch.Tensor", torch.Tensor),
    ("torch.nn.Module", nn.Module),
    *((name, cls) for cls, name in _layer_classes().items()),
)
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# Set on nn.Module by torch._dynamo once it has wrapped Module's __init__ and __setstate__
_TAGGED = "___needs_generation_tag_patch"


def _wraps(new: Any, old: Any) -> bool:
    """Whether the function `new` calls `old` in its place: `old` is its `__wrapped__`
    (functools.wraps) or a variable it closes over."""
    if getattr(new, "__wrapped__", None) is old:
        return True
    for cell in getattr(new, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # a cell not filled yet
            if cell.cell_contents is old:
                return True
    return False


def _torchs_own(space: str, attr: str, old: Any, new: Any, held: dict[str, dict[str, Any]]) -> bool:
    """Whether `new` in place of `old` is one of torch's own run-time wraps, made once by
    torch's code in the block: importing torch._dynamo wraps torch.manual_seed, a first
    compiled frame nn.Module.__init__ and __setstate__. Kept, unsaid. Anything else is the
    model file's, though torch's code made it: a function of torch's it chose (F.relu =
    F.leaky_relu), its own through a torch helper (torch.no_grad()(my_relu),
    torch.compile(F.leaky_relu)), torch's wrap written by its own line."""
    code = getattr(new, "__code__", None)
    if code is None or not code.co_filename.startswith(_TORCH_DIR) or not _wraps(new, old):
        return False
    if (space, attr) == ("torch", "manual_seed"):
        dynamo = "_dynamo" not in held["torch"] and "_dynamo" in vars(torch)
        return dynamo and old is torch.random.manual_seed  # torch._dynamo's own test
    if space == "torch.nn.Module" and attr in ("__init__", "__setstate__"):
        return _TAGGED not in held[space] and _TAGGED in vars(nn.Module)
    return False


def _shadows(space: Any, name: str) -> bool:
    """Whether a new attribute `name` of `space` hides one of its bases' (torch.Tensor.relu is
    torch._C.TensorBase's): a replacement. A module's new attribute, or a class's that hides
    nothing (a method of the model's own), replaces nothing of torch's."""
    return isinstance(space, type) and any(name in vars(base) for base in space.__mro__[1:])


def _functions_now() -> dict[str, dict[str, Any]]:
    """The attributes of each of _PATCHABLE's namespaces, by identity (a dict copy each)."""
    return {name: dict(vars(space)) for name, space in _PATCHABLE}


def _functions_put_back(held: dict[str, dict[str, Any]], path: Path, when: str) -> list[str]:
    """The attributes of torch's namespaces (`_functions_now()`) that the model file at `path`
    replaced or removed set back, one note naming them. Left so, every model built after it
    in the process ran the file's function (a sweep's registry point "diverged" under its
    `F.relu`), and a sweep checks every point's factory before the first trains."""
    replaced = []
    for name, space in _PATCHABLE:
        was, now = held[name], dict(vars(space))
        for attr in [a for a in now if a not in was and _shadows(space, a)]:
            delattr(space, attr)
            replaced.append(f"{name}.{attr}")
        for attr, value in was.items():
            new = now.get(attr, _UNREAD)
            if new is not value and not _torchs_own(name, attr, value, new, held):
                setattr(space, attr, value)
                replaced.append(f"{name}.{attr}")
    if not replaced:
        return []
    return [
        f"model file {path} replaced {few(replaced, 4)} {when}; torch's own put back, as the "
        "process had it, and this model's forward runs it too: left so, every model built "
        "after it in the process (a sweep's other points) ran the file's (call your own "
        "function from the model's code instead)"
    ]


def _on(value: bool) -> str:
    return "on" if value else "off"


def _recursion_kept(path: Path, when: str, limit: int) -> list[str]:
    """Python's recursion limit put back to `limit` where the model file lowered it, one note.
    Left lowered (`sys.setrecursionlimit(80)`), the next deep import of dlperf's (torch._dynamo,
    as the optimizer is built) failed in an 85-line RecursionError traceback, and an API
    caller's process kept the limit. A raised limit is kept, unsaid: a deep model's forward (or
    a copy.deepcopy of it) may need it, and it takes nothing from dlperf; but not above what a
    small stack limit holds (dlperf.stack), one note: there a deep model crashed the process
    (SIGSEGV, nothing said) where it was otherwise one line of its nesting (`too_deep`)."""
    now = sys.getrecursionlimit()
    if now < limit:
        sys.setrecursionlimit(limit)
        return [
            f"model file {path} lowered Python's recursion limit to {now} {when}; put back "
            f"to {limit}, which dlperf's own code (torch's imports) needs"
        ]
    held = stack.holds()
    if held is None or now <= max(held[1], limit):  # the limit before is the caller's own
        return []
    kib, most = held
    sys.setrecursionlimit(max(most, limit))
    return [
        f"model file {path} raised Python's recursion limit to {now} {when}, more than the "
        f"stack limit, ulimit -s {kib} (KiB), holds; lowered to {max(most, limit)}, where a "
        "deeper recursion is a RecursionError, not a crash (raise ulimit -s to keep it)"
    ]


def _modules_put_back(held: dict[str, Any], path: Path, when: str) -> list[str]:
    """sys.modules put back to `held` (a copy of it) where the model file at `path` replaced,
    removed or blocked (`sys.modules["json"] = None`) a module, one note. Left so, the next
    import of it, dlperf's or torch's own, failed ("import of json halted; None in
    sys.modules"), told as torch's broken installation or the input's fault, or took the
    file's stand-in. Modules it imported are its own and stay; dlperf's homes of model files
    (USER_MODULE_PREFIX) are dlperf's to keep."""
    changed = []
    for name, module in list(sys.modules.items()):
        if name.startswith(USER_MODULE_PREFIX):
            continue
        if name not in held:
            if module is None:  # a block of an import not made yet
                del sys.modules[name]
                changed.append(f"{name} (set to None)")
        elif module is not held[name]:
            sys.modules[name] = held[name]
            changed.append(f"{name} ({'set to None' if module is None else 'replaced'})")
    for name, module in held.items():
        if name not in sys.modules and not name.startswith(USER_MODULE_PREFIX):
            sys.modules[name] = module
            changed.append(f"{name} (removed)")
    if not changed:
        return []
    return [
        f"model file {path} changed sys.modules {when}: {few(changed, 4)}; put back as the "
        "process had it: left so, a later import of them (dlperf's, torch's) failed or took the "
        "file's stand-in"
    ]


# The interval timers a model file may arm (`signal.alarm(3)` as a timeout guard around a
# download, never cancelled) are stopping.TIMER_SIGNALS's, by the signal each sends: by
# default it ends the process.
# How far a timer may read from what running down alone left of it (clock and timer differ)
_TIMER_SLACK = 0.05


def _timer_clock(sig: int) -> float:
    """The clock the timer of `sig` runs down by: wall time, the process's user CPU time, or
    its user and system CPU time."""
    if sig == signal.SIGALRM:
        return time.monotonic()
    cpu = os.times()
    return cpu.user if sig == signal.SIGVTALRM else cpu.user + cpu.system


def _timers_now() -> dict[int, tuple[float, float, float]]:
    """Each timer by its signal (TIMER_SIGNALS): seconds left (0: not armed), its interval,
    its clock's reading."""
    return {sig: (*signal.getitimer(timer_of(sig)), _timer_clock(sig)) for sig in TIMER_SIGNALS}


def _timer_said(left: float, every: float) -> str:
    return f"due in {left:.3g} s" + (f", then every {every:g} s" if every else "")


def _timers_put_back(
    held: dict[int, tuple[float, float, float]], path: Path, when: str
) -> list[str]:
    """The timers (`_timers_now()`) the model file at `path` armed, changed or cancelled set
    back to what running down alone left of them, one note each. Armed and left so, its
    signal ended dlperf mid-run with no word ("Alarm clock", exit 142), the run `lost`; a
    timer of the caller's (pytest-timeout's) runs on."""
    notes = []
    for sig, (left, every, at) in held.items():
        now, now_every = signal.getitimer(timer_of(sig))
        due = max(left - (_timer_clock(sig) - at), 0.0)
        if left and not due:
            continue  # it went off in the block: what it holds now is its own interval
        if now_every == every and abs(now - due) <= _TIMER_SLACK:
            continue
        signal.setitimer(timer_of(sig), due, every if due else 0.0)
        how, name = f"{when} (signal.alarm or setitimer)", signal.Signals(sig).name
        if not left:
            told = (
                f"armed a {name} timer {how}, {_timer_said(now, now_every)}; cancelled: by "
                "default its signal ends the process, dlperf mid-run with no word"
            )
        else:
            told = (
                f"{'re-armed' if now else 'cancelled'} the process's {name} timer {how}; put "
                f"back as it was, {_timer_said(due, every)}"
            )
        notes.append(f"model file {path} {told}")
    return notes


@contextlib.contextmanager
def _process_kept(
    path: Path, when: str, lent: ImportModes | None = None
) -> Iterator[list[ImportModes]]:
    """The block (a model file's import, its factory's call) with sys.modules, the stop
    signals' handlers, the working directory, a lowered recursion limit, torch's default dtype
    and device, its
    anomaly mode, deterministic algorithms and flush denormal (`_Autograd`), its torch.backends
    settings, its global module hooks and modes (`HooksAndModes`), the functions of its
    namespaces the model replaced and the timers it armed put back as they were, and the
    child processes it started that outlive dlperf or hold its exit named, each told in one
    line (`note`). `lent`: the modes the file's import entered, on again for the block (its
    factory's call); the list it yields gets, after the block, the modes the block entered
    and left on (`_import_file` keeps an import's, for its factory's calls)."""
    main = threading.current_thread() is threading.main_thread()  # signals are set there only
    handlers = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    cwd, children = _cwd(), _children()
    dtype, device = torch.get_default_dtype(), torch.get_default_device()
    limit, timers = sys.getrecursionlimit(), _timers_now()
    autograd, backends, functions = _Autograd.now(), _backends_now(), _functions_now()
    hooks, modules = HooksAndModes.now(), dict(sys.modules)
    entered: list[ImportModes] = []
    try:
        if lent is not None:  # after `hooks`: put back after the call, as held before it
            lent.lend()
        yield entered
    finally:
        # First: under the model's lower limit the checks below may not have the depth to run
        notes = _recursion_kept(path, when, limit)
        # Then the modules dlperf's own code (torch's lazy imports) imports as it checks
        notes += _modules_put_back(modules, path, when)
        notes += _timers_put_back(timers, path, when)
        _exit_handler_last()  # to run before any exit handler the block registered
        # The default device first (torch holds it as a mode of its own, at the stack's
        # bottom), then the file's modes, before the checks below run torch code under them
        notes += torch_defaults_kept(path, when, dtype, device)
        entered.append(hooks.entered())
        notes += hooks.put_back(path, when, lent)
        notes += autograd.put_back(path, when)
        notes += _backends_put_back(backends, path, when)
        notes += _functions_put_back(functions, path, when)
        changed = []
        for sig, handler in handlers.items():
            # None: a handler set outside Python, which cannot be set back
            if main and handler is not None and signal.getsignal(sig) != handler:
                signal.signal(sig, handler)
                changed.append(signal.Signals(sig).name)
        if changed:
            many = "s" if len(changed) > 1 else ""
            notes.append(
                f"model file {path} set its own {' and '.join(changed)} handler{many} {when}; "
                f"the one{many} before put back, so that a stop signal still stops dlperf"
            )
        moved = _cwd()
        if cwd is not None and moved != cwd:
            with contextlib.suppress(OSError):  # a directory gone meanwhile: nowhere to go
                os.chdir(cwd)
                notes.append(
                    f"model file {path} changed the working directory to {moved} {when}; set "
                    f"back to {cwd}, where relative paths (run.out_dir, --out) are read from"
                )
        ended, joined = _multiprocessings()
        for pid in sorted(_children() - children - ended):
            notes.append(
                f"model file {path} started process {pid} ({_command(pid)}) {when}: it is the "
                + (
                    "model's, left running, and dlperf waits for it to end as it exits "
                    "(multiprocessing joins the processes it started), unless the model ends it"
                    if pid in joined
                    else "model's, left running, and outlives this command unless the model ends it"
                )
            )
        for said in notes:
            note(said, path)


def _forget_neighbours(package: str) -> None:
    """Drop the modules under `package` (a model file's home, or a model package) that an
    earlier import of a model file there imported (its `helper.py`), other model files
    kept, so that this import runs them again as it runs the model file: a network built as
    a neighbour is imported (NET = ... in helper.py, the factory returning it) was otherwise
    the first import's, drawn before run.seed was set, and a sweep's next point in the same
    process started from the weights the point before it trained."""
    parent = sys.modules.get(package)
    for name in [n for n in sys.modules if n.startswith(f"{package}.")]:
        if name in _MODEL_FILES:
            continue
        del sys.modules[name]
        child = name.removeprefix(f"{package}.")
        if parent is not None and "." not in child:
            # `from . import helper` takes the package's attribute before sys.modules
            with contextlib.suppress(AttributeError):
                delattr(parent, child)


def _raised_at(e: BaseException) -> str:
    """Where the model's own code (the file or a module beside it) raised `e` while it was
    imported, " (helper.py, line 6)": its innermost frame of the model's, a library's below it
    being the model's call; "" for a SyntaxError, whose message already names its line. Told
    before the message, whose end may be long or of several lines."""
    if isinstance(e, SyntaxError):
        return ""
    frames = [(f, line) for f, line in traceback.walk_tb(e.__traceback__) if in_model_file(f)]
    if not frames:
        return ""
    frame, line = frames[-1]
    return f" ({Path(frame.f_code.co_filename).name}, line {line})"


def _import_file(path: Path) -> ModuleType:
    """Import a user's model file as Python imports a module: under its dlperf_user_ name in
    sys.modules (dataclasses, pickle and typing look a class's module up there), the modules
    beside it importable (`import helper`; its own, whatever other model files the process
    imported: see _home), and an `__init__.py` as the package it is (for its relative
    imports). Any other file is a submodule of its directory's home, as pkg/model.py is of
    pkg when Python imports it: its relative imports (`from .layers import Head`) are its
    neighbours'. Imported as a top-level module, they failed, "attempted relative import with
    no known parent package"."""
    directory = path.resolve().parent
    package = path.name == "__init__.py"
    if package:
        name = f"{USER_MODULE_PREFIX}{directory.name}"
        _forget_neighbours(name)
    else:
        # A dot in the stem ("net.v2.py") would name a package that is not there
        name = f"{_home(directory)}.{path.stem.replace('.', '_')}"
        _MODEL_FILES.add(name)
        _forget_neighbours(_home(directory))
    module_spec = importlib.util.spec_from_file_location(
        name,
        path,
        loader=_Loader(name, str(path)),
        submodule_search_locations=[str(directory)] if package else None,
    )
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    if package:  # its own absolute imports start beside it
        _BUILTINS[name] = _BUILTINS[_home(directory.parent)]
    sys.modules[name] = module
    try:
        # stdout is dlperf's (a --json document): what the module prints goes to stderr
        with (
            _process_kept(path, "as it was imported") as entered,
            contextlib.redirect_stdout(_Lent(sys.stderr)),
            _no_os_exit(),
            _as_script(path),
        ):
            module_spec.loader.exec_module(module)
    except BaseException as e:
        sys.modules.pop(name, None)  # as importlib does: no half-run module stays importable
        if isinstance(e, _ArgumentsRefused):
            raise UserError(
                f"model file {path} parses the command line while importing, and argparse "
                f"refuses it with no arguments: {e.message}",
                "guard the script's own code with `if __name__ == '__main__':`, or give its "
                "arguments defaults",
            ) from None
        if isinstance(e, SystemExit):  # sys.exit or os._exit: either would end dlperf
            raise UserError(
                f"model file {path} called {exit_call(e)}({e.code!r}) while importing",
                "guard the script's own code with `if __name__ == '__main__':`",
            ) from None
        if isinstance(e, Exception) and out_of_memory(e) and not raised_by_model(e):
            # Its weights made as it is imported (NET = nn.Linear(...) at its top) that do not
            # fit: the machine's or a memory limit's, not the file's fault
            raise no_room(f"importing model file {path}{_raised_at(e)}", e, {}) from None
        if isinstance(e, Exception):
            raise UserError(
                f"model file {path} failed to import{_raised_at(e)}: {type(e).__name__}: "
                f"{error_text(e)}"
            ) from None
        raise
    if not package:  # as importlib binds a submodule to its package
        home, _, attribute = name.rpartition(".")
        setattr(sys.modules[home], attribute, module)
    _NEIGHBOURS[path.resolve()] = name if package else _home(directory)
    _IMPORT_MODES[path.resolve()] = entered[0]
    return module


def _loaded_beside(package: str, path: Path) -> dict[str, str]:
    """The sha256 of the modules under `package` (the home of the model file at `path`, or
    its package) that are files in its folder, other model files and `path` itself left
    out: what its import and its code since loaded there (_forget_neighbours dropped an
    earlier import's)."""
    directory = path.resolve().parent
    loaded = {}
    for name, module in list(sys.modules.items()):
        source = getattr(module, "__file__", None)
        if not name.startswith(f"{package}.") or name in _MODEL_FILES or source is None:
            continue
        where = Path(source).resolve()
        if where != path.resolve() and where.is_relative_to(directory):
            with contextlib.suppress(OSError):  # gone already: nothing to compare it with
                digest = hashlib.sha256(where.read_bytes()).hexdigest()
                loaded[where.relative_to(directory).as_posix()] = digest
    return loaded


def neighbour_digests(path: Path) -> dict[str, str]:
    """The sha256 of each module beside the model file at `path` that its last import in this
    process, and its code since (a factory's or constructor's `from helper import ...`),
    loaded, by its path relative to the file's folder; {} for a file not imported."""
    package = _NEIGHBOURS.get(path.resolve())
    return {} if package is None else _loaded_beside(package, path)


def build_from_factory(
    fn: Callable[..., nn.Module], spec: str, kwargs: dict[str, Any], seed: int | None = None
) -> nn.Module:
    """Call a model file's factory with `kwargs`: of the automatic ones (num_classes,
    in_channels) those it accepts, of the others all, or refuse the ones it does not take;
    the RNGs seeded with `seed` (when given: `seed_generators`) just before the call."""
    # A user's factory may not know about num_classes/in_channels: pass what it accepts. The
    # user's own keywords are not filtered, so that a misspelt one is refused, not dropped.
    kwargs = fresh(kwargs)
    automatic = {k: v for k, v in kwargs.items() if k in AUTOMATIC}
    own = {k: v for k, v in kwargs.items() if k not in AUTOMATIC}
    taken = accepted(fn, own)
    if len(taken) < len(own):
        unknown = [k for k in own if k not in taken]
        raise UserError(
            f"model '{spec}' does not accept {', '.join(unknown)}",
            f"accepted: {', '.join(factory_parameters(fn)) or 'no arguments'}",
        )
    caught: list[warnings.WarningMessage] = []
    try:
        # as when its module is imported
        path = Path(model_file_text(spec))
        with (
            _process_kept(path, "in its factory", _IMPORT_MODES.get(path.expanduser().resolve())),
            contextlib.redirect_stdout(held := _HeldFetch(sys.stderr)),
            _fetches_told(held),
            _as_script(path),
            _warnings_held(caught),
        ):
            _seed(seed)
            model = _call(fn, {**accepted(fn, automatic), **own})
    except _FetchFailed as e:
        raise UserError(
            # torch.hub.load's own repository comes as a zipball, its weights as a file
            f"factory {spec} fetches "
            f"{'code' if '/zipball/' in e.url else 'pretrained weights'} from the network "
            f"({e.url}), which failed: {e.reason}",
            f"put the file in torch's hub cache, {os.path.dirname(e.dst)} "
            "($TORCH_HOME/hub/checkpoints), or build the model without them "
            "(torchvision: weights=None)",
        ) from None
    except SystemExit as e:
        raise UserError(f"factory {spec} called {exit_call(e)}({e.code!r})") from None
    except _ArgumentsRefused as e:
        raise UserError(
            f"factory {spec} parses the command line, and argparse refuses it with no "
            f"arguments: {e.message}",
            "take the settings as the factory's own arguments (model.kwargs)",
        ) from None
    except Exception as e:
        if _read_from_given(e, own):
            _refuse_factory(spec, own, e)
        if raised_by_model(e):
            # The model's own code raised it (a `raise` in its __init__, a class it defines):
            # the CLI tells it with the model file's frames, exit 1, as from its forward.
            raise
        _refuse_factory(spec, own, e)
    if not isinstance(model, nn.Module):
        hint = None
        if inspect.iscoroutine(model):
            # Closed: collected unawaited, Python would warn of it in three more lines
            model.close()
            hint = "an `async def` factory returns a coroutine: make it a plain `def`"
        raise UserError(
            f"factory {spec} returned {type(model).__name__}, not a torch.nn.Module", hint
        )
    refuse_no_forward(model, f"model '{spec}'")
    check_no_cycle(model, spec)
    if any(ZERO_SIZED in str(w.message) for w in caught):  # torch's init of a layer of size 0
        _refuse_no_size(model, spec, own)
    _warn_again(caught)  # the factory's other warnings, as they were raised
    return model


# torch's warning for nn.init on a tensor of no elements: a layer sized 0 (model.kwargs.width=0)
ZERO_SIZED = "Initializing zero-element tensors is a no-op"


@contextlib.contextmanager
def _warnings_held(caught: list[warnings.WarningMessage]) -> Iterator[None]:
    """The warnings a factory raises, into `caught` for its caller to tell or raise again
    once the model is checked; raised again at once where the factory fails (its own error is
    the line then)."""
    try:
        with warnings.catch_warnings(record=True) as log:
            try:
                yield
            finally:
                caught.extend(log)
    except BaseException:
        _warn_again(caught)
        raise


def _warn_again(caught: list[warnings.WarningMessage]) -> None:
    """Raise `caught` again, as the factory raised them, outside the block that held them."""
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _refuse_no_size(model: nn.Module, spec: str, own: dict[str, Any]) -> None:
    """Refuse `model` (factory `spec`, given the user's kwargs `own`) where it has parameters
    of no elements, whose layer torch warned of as it was built: its first forward fails, and
    was told as the images' fault ("the model rejects digits images ... weight of size [0, 1,
    3, 3]"). Parameters of no size a model makes itself, with no init, are its own to have."""
    empty = [
        f"{name} {list(p.shape)}"
        for name, p in model.named_parameters()
        if not isinstance(p, nn.parameter.UninitializedParameter) and p.numel() == 0
    ]
    if not empty:
        return
    given = ", ".join(f"{k}={v!r}" for k, v in own.items())
    raise UserError(
        f"model '{spec}' has layers of no size: {few(empty)}",
        f"check model.kwargs: {given}" if given else "give each layer a size of at least 1",
    )


class _FetchFailed(Exception):
    """torch.hub's download of weights a factory asked for (torchvision's weights="DEFAULT"),
    failed: offline, or the host unreachable."""

    def __init__(self, url: str, dst: str, e: OSError) -> None:
        super().__init__(url)
        self.url, self.dst = url, dst
        self.reason = str(getattr(e, "reason", None) or e.strerror or e)


class _Lent:
    """dlperf's stderr lent to a model file as its standard output: its close closes only this
    (a model file's `sys.stdout.close()` closed dlperf's stderr, and every line after it, the
    error's too, was lost to CPython's "lost sys.stderr" dump); a write after it fails as a
    closed file's does, in the model's code."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.closed = False

    def write(self, text: str) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        return int(self.stream.write(text))

    def close(self) -> None:
        self.closed = True

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding ...: the stream's
        return getattr(self.stream, name)


class _HeldFetch(_Lent):
    """A factory's standard output (`stream`, stderr) holding back torch.hub's
    'Downloading: "URL" to FILE' line until the download is through: a failed one is told in
    one line of its own (_FetchFailed), the URL and the cache named there."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.held = ""

    def write(self, text: str) -> int:
        if text.startswith('Downloading: "'):
            self.held += text
            return len(text)
        self.release()
        return super().write(text)

    def release(self) -> None:
        held, self.held = self.held, ""
        if held:
            self.stream.write(held)


@contextlib.contextmanager
def _fetches_told(held: _HeldFetch) -> Iterator[None]:
    """torch.hub's downloads during a factory: a failed one is _FetchFailed, its held
    'Downloading:' line dropped; one that is through has it said after."""
    import torch.hub

    original = torch.hub.download_url_to_file

    def download(url: str, dst: str, *args: Any, **kwargs: Any) -> None:
        try:
            original(url, dst, *args, **kwargs)
        except OSError as e:  # urllib's URLError, a refused connection, a timeout
            held.held = ""
            raise _FetchFailed(url, dst, e) from e
        held.release()

    torch.hub.download_url_to_file = download
    try:
        yield
    finally:
        torch.hub.download_url_to_file = original
        held.release()


def _reached(path: str) -> str:
    """The Python expression of a module's `path` in its model: model.head, model.body[1]."""
    names = path.split(".") if path else []
    return "model" + "".join(f"[{n}]" if n.isdigit() else f".{n}" for n in names)


def check_no_cycle(model: nn.Module, spec: str) -> None:
    """Refuse model `spec` (its name as the line says it) when one of its modules holds one of
    its own ancestors as a submodule (`self.me = self`, a head keeping its parent as
    `self.head.owner = self`): every walk of the tree (.to(), .modules(), state_dict) recurses
    into it for ever, a RecursionError traceback. Walked without recursion, each module once
    (a module shared by two parents is no cycle), `path` naming the attribute that closes the
    loop. Called on every factory's model; a module given to dlperf.analyze needs its own."""
    done: set[int] = set()
    ancestors: dict[int, str] = {}  # id -> path of the modules on the way to the current one
    # (module, path, whether its children were pushed): the second visit leaves it
    stack: list[tuple[nn.Module, str, bool]] = [(model, "", False)]
    while stack:
        module, path, left = stack.pop()
        if left:
            del ancestors[id(module)]
            done.add(id(module))
            continue
        if id(module) in done:  # pushed by two parents, walked under the first
            continue
        ancestors[id(module)] = path
        stack.append((module, path, True))
        for name, child in module._modules.items():
            if child is None or id(child) in done:
                continue
            where = f"{path}.{name}" if path else name
            if id(child) in ancestors:
                held = ancestors[id(child)]
                what = "the model itself" if not held else f"its ancestor {held}"
                raise UserError(
                    f"model {spec} contains itself: {where} is {what} "
                    f"({type(child).__name__}), so every walk of its modules loops for ever",
                    "hold it outside nn.Module's submodules: "
                    f"object.__setattr__({_reached(path)}, {name!r}, {_reached(held)}), or as "
                    f"weakref.ref({_reached(held)})",
                )
            stack.append((child, where, False))


@dataclasses.dataclass(frozen=True)
class Unregistered:
    """Layers or parameters a module holds in a plain list, tuple or dict attribute, which
    PyTorch does not register: what `where` (its attribute path) leaves out of the model."""

    where: str
    kind: str  # "list", "tuple" or "dict"
    params: int  # elements of its parameters that model.parameters() lacks
    buffers: int  # and of its buffers that model.buffers() lacks
    fix: str  # the container that registers them: nn.ModuleList, nn.ParameterDict ...
    # the layers it holds, which `refusing_unregistered` watches for a call
    layers: tuple[nn.Module, ...] = dataclasses.field(default=(), compare=False, repr=False)

    def line(self) -> str:
        """What it leaves out, for a line of its own: "keeps layers in a plain Python list
        (blocks): PyTorch does not register them: their 2,080 parameters are not trained,
        moved or saved"."""
        held = "parameters" if self.fix.startswith("nn.Parameter") else "layers"
        left = [
            f"{n:,} {what}"
            for n, what in ((self.params, "parameters"), (self.buffers, "buffer elements"))
            if n
        ]
        return (
            f"keeps {held} in a plain Python {self.kind} ({self.where}): PyTorch does not "
            f"register them: their {' and '.join(left)} are not "
            f"{'trained, ' if self.params else ''}moved or saved"
        )


# What nn.Module.__init__ itself keeps in a module's __dict__ (_parameters, _modules, its
# hooks' dicts ...): torch's bookkeeping, not the model's own attributes
_MODULE_OWN = frozenset(vars(nn.Module()))


def _own_tensors(model: nn.Module) -> set[int]:
    """The ids of `model`'s parameters and buffers, those of model.parameters() and .buffers(),
    walked without recursion (`walk`): `dlperf export` of a model nested 1,202 deep ended in
    torch's walk's RecursionError traceback here, before the dry forward that tells the nesting
    (`too_deep`)."""
    own = {
        id(t)
        for _, module in walk.named_modules(model)
        for t in (*module._parameters.values(), *module._buffers.values())
    }
    own.discard(id(None))  # an unset bias (bias=False) is a None in _parameters
    return own


def unregistered(model: nn.Module) -> list[Unregistered]:
    """The attributes of `model`'s modules that hold layers (nn.Module) or nn.Parameters in a
    plain list, tuple, set, dict or object (a namespace, a dataclass), at any depth, or as a
    module set past registration (`object.__setattr__`), whose parameters or buffers are not
    the model's own otherwise. `self.blocks = [nn.Linear(..)]`
    runs, but its weights are not in model.parameters(): never trained, moved or saved, and
    counted as 0 params. A list of modules registered elsewhere too (`[self.a, self.b]`), of
    numbers, strings or tensors, and torch's own modules are not flagged. Walked without
    recursion, each module once (as `nesting`)."""
    own = _own_tensors(model)
    found: list[Unregistered] = []
    counted: set[int] = set()  # a tensor held in two lists is left out once
    seen: set[int] = set()
    stack: list[tuple[nn.Module, str]] = [(model, "")]
    while stack:
        module, path = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        stack.extend(
            (child, f"{path}.{name}" if path else name)
            for name, child in module._modules.items()
            if child is not None
        )
        if type(module).__module__.startswith("torch."):
            continue  # torch's own (LSTM's _flat_weights, ...) are its to keep
        for name, value in vars(module).items():
            if name in _MODULE_OWN:
                continue
            if isinstance(value, nn.Module | nn.Parameter):  # set past registration
                kind, held = "attribute", [value]
            elif isinstance(value, list | tuple | set | dict) or _plain(value):
                kind = next(
                    (k.__name__ for k in (dict, tuple, set, list) if isinstance(value, k)),
                    "object",
                )
                held = _held(value)
            else:
                continue
            layers = [x for x in held if isinstance(x, nn.Module)]
            params = [x for x in held if isinstance(x, nn.Parameter)]
            tensors = [t for m in layers for t in (*m.parameters(), *m.buffers())] + params
            left = [t for t in tensors if id(t) not in own and id(t) not in counted]
            # a lazy layer's weights have no size yet: left out all the same, counted as 0
            sizes = {id(t): 0 if is_lazy(t) else t.numel() for t in left}
            if not left:
                continue
            counted.update(id(t) for t in left)
            container = "Parameter" if not layers else "Module"
            named = kind in ("dict", "object")
            fix = f"nn.{container}{'Dict' if named else 'List'}"
            if kind == "attribute":
                fix = f"an attribute set by self.{name} = ..., not object.__setattr__"
            ids = {id(t) for t in left}  # a layer registered elsewhere too is not watched
            watched = [
                m for m in layers if any(id(t) in ids for t in (*m.parameters(), *m.buffers()))
            ]
            found.append(
                Unregistered(
                    where=f"{path}.{name}" if path else name,
                    kind=kind,
                    params=sum(sizes[id(t)] for t in left if isinstance(t, nn.Parameter)),
                    buffers=sum(sizes[id(t)] for t in left if not isinstance(t, nn.Parameter)),
                    fix=fix,
                    layers=tuple(watched),
                )
            )
    return found


# Values that hold nothing: not walked into, nor remembered (a 10^7-number list is common)
_ATOMIC = frozenset({int, float, complex, bool, str, bytes, type(None)})


def _plain(value: object) -> bool:
    """Whether `value` is a plain object whose attributes may hold layers (a namespace, a
    dataclass, a config object): not a class, function, Python module or tensor."""
    skipped = type | types.ModuleType | types.FunctionType | types.MethodType | torch.Tensor
    return type(value).__dictoffset__ != 0 and not isinstance(value, skipped)


def _held(value: object) -> list[nn.Module | nn.Parameter]:
    """The layers and nn.Parameters reachable from `value` through lists, tuples, sets, dicts
    and plain objects' attributes, at any depth; a layer is not walked into. Iterative, each
    container once (a back-link is no loop)."""
    found: list[nn.Module | nn.Parameter] = []
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, nn.Module | nn.Parameter):
            found.append(item)
        elif type(item) in _ATOMIC or id(item) in seen:
            continue
        elif isinstance(item, dict):
            seen.add(id(item))
            stack.extend(_inner(item.values()))
        elif isinstance(item, list | tuple | set | frozenset):
            seen.add(id(item))
            stack.extend(_inner(item))
        elif _plain(item):
            seen.add(id(item))
            stack.extend(_inner(vars(item).values()))
    return found


def _inner(values: Collection[object]) -> Iterable[object]:
    """Those of `values` that may hold something: none of a vocabulary's 10^7 numbers or
    strings, skipped at C speed when all are such (a Python loop over them took 30 s)."""
    if _ATOMIC.issuperset(map(type, values)):
        return ()
    return [v for v in values if type(v) not in _ATOMIC and not _atomic_tuple(v)]


def _atomic_tuple(value: object) -> bool:
    """Whether `value` is a tuple of numbers or strings (`[(token, id), ...]` holds 10^6)."""
    return type(value) is tuple and _ATOMIC.issuperset(map(type, value))


def _more(found: list[Unregistered]) -> str:
    return f", and {len(found) - 1} more such attribute(s)" if len(found) > 1 else ""


@contextlib.contextmanager
def refusing_unregistered(model: nn.Module, what: str) -> Iterator[list[str]]:
    """Around a dry forward of `model` (`what` names it): refuse it for training and export
    where the forward calls a layer it keeps in a plain list, tuple or dict (`unregistered`:
    it trained without them, with no word), or where the forward fails after calling one (on
    a GPU, as .to(device) did not move it). One the forward never
    calls is kept so on purpose (an EMA copy, a frozen feature extractor held out of the
    optimizer and checkpoint): the yielded list gets a warning line instead. Parameters held
    bare in such a container cannot be watched, and are refused."""
    found = unregistered(model)
    called: set[int] = set()  # indices into found

    def watch(index: int) -> Callable[..., None]:
        return lambda *_: called.add(index)

    handles = [
        inner.register_forward_pre_hook(watch(index))
        for index, entry in enumerate(found)
        for layer in entry.layers
        for inner in layer.modules()  # the forward may call a part of it alone
    ]

    def refuse_used() -> None:  # the called ones, and bare parameters, which are unwatched
        _refuse([f for i, f in enumerate(found) if i in called or not f.layers], what)

    notes: list[str] = []
    try:
        yield notes
    except Exception:
        refuse_used()
        raise
    finally:
        for handle in handles:
            handle.remove()
    refuse_used()
    if found:
        first = found[0]
        notes.append(
            f"{what} {first.line()}{_more(found)}: its forward does not call them, so they "
            f"are taken as kept out on purpose (if they are part of the model, hold them in "
            f"{first.fix})"
        )


def _refuse(found: list[Unregistered], what: str) -> None:
    if found:
        first = found[0]
        raise UserError(f"{what} {first.line()}{_more(found)}", f"hold them in {first.fix}")


def unregistered_note(model: nn.Module) -> str | None:
    """A warning line for a count of `model` (analyze, predict) where it keeps layers or
    parameters in a plain list, tuple or dict: their products are counted, in the row of the
    module that ran them, but their parameters are not, and a run refuses the model."""
    found = unregistered(model)
    if not found:
        return None
    first = found[0]
    counted = ", nor counted in params here" if first.params else ""
    return f"the model {first.line()} by a run{counted}{_more(found)} (hold them in {first.fix})"


def refuse_no_forward(model: nn.Module, what: str) -> None:
    """Refuse `model` (`what` names it: "model 'm.py:net'", "the model") where it has no
    forward to call: a class of the model's whose `forward` is misspelt (`def foward`), or a
    container of torch's that has none (nn.ModuleList, nn.ModuleDict). Its first forward
    raised torch's "missing the required forward function", which was told as the input's
    fault ("the model rejects digits images of shape ..."). A module that runs its layers
    from its own `__call__`, or was given a `forward` of its own, is called as it is."""
    cls = type(model)
    # Static: a scripted module's forward is a descriptor that fails when read from its class
    forward = inspect.getattr_static(model, "forward", None)
    if cls.__call__ is not nn.Module.__call__ or forward is not vars(nn.Module)["forward"]:
        return
    if cls.__module__.startswith("torch."):
        raise UserError(
            f"{what} is an nn.{cls.__name__}, which has no forward(): it holds layers, not "
            "how to call them",
            "return the layers in an nn.Sequential, or a Module whose forward calls them",
        )
    # The fix as for a module inside the model (errors.missing_forward): one rule
    raise UserError(f"{what} (class {cls.__name__}) defines no forward()", no_forward_fix(cls))


def nesting(model: nn.Module) -> int:
    """How deep `model`'s modules nest: 1 for a module without children, each level of
    submodules one more. Walked without recursion (a model too deep for the recursion limit is
    what it measures), each module once, so a cycle (check_no_cycle) ends too."""
    deepest, seen = 0, set()
    stack = [(model, 1)]
    while stack:
        module, depth = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in module._modules.values() if child is not None)
    return deepest


# Python frames a level of nesting takes, at most, in a forward (Module.__call__'s two and the
# container's forward) or a walk of the modules; at a depth of a limit's eighth or more, a
# RecursionError on the way through torch is the nesting's
FRAMES_PER_LEVEL = 4
# What the suggested limit allows a level: analyze's counting hooks add frames of their own
# (measured: about 5.3 a level; a 3000-deep model needed 17,000 under analyze, 14,000 was short)
SUGGESTED_FRAMES_PER_LEVEL = 6


def too_deep(model: nn.Module, what: str) -> UserError | None:
    """The error for `model` (`what` names it: "model 'deep.py:build'", "the model"), which
    ran out of Python's recursion limit in a walk of its modules (.parameters(), .to(),
    state_dict) or its forward, where its nesting is why: modules nested level in level
    (nn.Sequential(m, nn.ReLU()) in a loop) take frames at each, and torch recurses through
    them. None where it nests too shallow for that (a forward that recurses of itself). For
    run's checks and analyze's counting: it was a RecursionError traceback, or the input blamed
    for it ("the model rejects ... images")."""
    depth, limit = nesting(model), sys.getrecursionlimit()
    if depth * 2 * FRAMES_PER_LEVEL < limit:
        return None
    # Room for its forward and backward, and for dlperf's own frames below them
    enough = -(-(SUGGESTED_FRAMES_PER_LEVEL * depth + 1000) // 1000) * 1000
    # Under a stack limit too small for that many frames a raised limit crashes: it is named
    raise_it = stack.too_small(enough) or (
        f"raise the limit in the model file: import sys; sys.setrecursionlimit({enough})"
    )
    return UserError(
        f"{what} nests its modules {depth} deep, too deep for Python's recursion limit "
        f"({limit}), through which torch walks and calls them",
        "flatten the nesting: one nn.Sequential of the layers, not each inside the last; or "
        + raise_it,
    )


def _read_from_given(e: Exception, own: dict[str, Any]) -> bool:
    """Whether `e` is an attribute read that failed on one of the tables or arrays the user
    gave in [model] kwargs (a dict where the factory wants an object with fields): that value
    is of the wrong type, as in a TypeError, whatever code read it. Tables and arrays only:
    each is an object of its own, where an int or a bool may be one the model made itself."""
    failed_on = getattr(e, "obj", None) if isinstance(e, AttributeError) else None
    return isinstance(failed_on, dict | list) and any(failed_on is v for v in own.values())


def _refuse_factory(spec: str, own: dict[str, Any], e: Exception) -> NoReturn:
    """A factory that failed on what dlperf gave it, or inside torch, in one line of bad
    input: the call itself (an argument without a default), a keyword of the user's of the
    wrong type or value (any error, where [model] kwargs were given), a layer torch refuses.
    Memory that ran out building the model (weights too big for the machine or a memory
    limit) is not the factory's fault: said as such (`no_room`), exit 1."""
    if out_of_memory(e):
        raise no_room(f"building model '{spec}'", e, own) from None
    hint = None
    said = error_text(e)  # a library's exception whose own __str__ raises is told too
    if isinstance(e, TypeError) and "required" in said and "argument" in said:
        # An argument without a default, which dlperf cannot know
        hint = "give the argument a default, or its value in [model] kwargs"
    elif own:
        # As likely one of the user's kwargs of the wrong type or value (a list for an int, a
        # dict for a dataclass, 3.5 channels that torch refuses with a ValueError); with none
        # given, the error is torch's own (a str for a dtype).
        given = ", ".join(f"{k}={v!r}" for k, v in own.items())
        hint = f"check the values given in [model] kwargs: {given}"
    raise UserError(f"factory {spec} failed: {type(e).__name__}: {said}", hint) from None


def no_room(doing: str, e: BaseException, own: Mapping[str, Any]) -> UserError:
    """The one line for memory that ran out `doing` ("building model 'm.py:Big'"), exit 1:
    the memory limit to raise where one is set, else a smaller model, the user's [model]
    kwargs `own` (its size, likely) named, or more memory."""
    given = ", ".join(f"{k}={v!r}" for k, v in own.items())
    smaller = f"a smaller model (its [model] kwargs: {given})" if given else "a smaller model"
    # what e says where torch's CPU allocator does not: its first line (CUDA's own line says
    # what it is), or a bare MemoryError's type
    first = (error_text(e).strip().splitlines() or [""])[0]
    if not (isinstance(e, RuntimeError) and first):
        first = f"{type(e).__name__}: {first}" if first else type(e).__name__
    return ran_out(doing, e, first, f"{smaller}, or a machine with more memory")


def _geometry(conv: nn.Conv2d) -> dict[str, Any]:
    # torch types these as any convolution's (tuple[int, ...]), which Conv2d does not take.
    return {
        "kernel_size": conv.kernel_size,
        "stride": conv.stride,
        "padding": conv.padding,
        "dilation": conv.dilation,
        "groups": conv.groups,
        "bias": conv.bias is not None,
    }


def _adapt_stem(model: nn.Module, in_channels: int) -> None:
    """Give a torchvision model a first convolution that takes `in_channels`."""
    for parent in model.modules():
        for child_name, child in parent.named_children():
            if isinstance(child, nn.Conv2d):
                if child.in_channels != in_channels:
                    conv = nn.Conv2d(in_channels, child.out_channels, **_geometry(child))
                    setattr(parent, child_name, conv)
                return


def seed_generators(seed: int) -> None:
    """Seed every generator a run draws from (checkpoint.rng_state saves and restores the
    same three): a model drawing from numpy's or Python's `random` (noise in its forward, a
    factory's own init) trained differently at every run of one seed when torch alone was
    seeded. numpy takes seeds below 2**32, as run.seed is."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def fresh(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` with each list, tuple, set and dict in it copied, however nested: a factory is
    given its own, since one that changed what it was given (`widths.append(...)`) changed
    the run's config, which dlperf then stored, hashed, showed as a sweep's axis value and
    rebuilt from (export blamed a nondeterministic factory). Other values (a tensor, a module
    the caller hands `create_model`) are passed as they are, as Python passes them."""

    def copied(value: Any) -> Any:
        if type(value) is dict:  # exact types: a namedtuple or the user's own class is theirs
            return {k: copied(v) for k, v in value.items()}
        if type(value) in (list, tuple, set):
            return type(value)(copied(v) for v in value)
        return value

    return {k: copied(v) for k, v in kwargs.items()}


def _seed(seed: int | None) -> None:
    if seed is not None:
        seed_generators(seed)


_NOTICES_SPENT = {"nested": False, "projected": False}


def _torch_notices_spent() -> None:
    """torch's once-a-process notices about its own internals, said where nobody hears them,
    before any model is built: that its nested tensors are "in prototype stage" (an
    nn.TransformerEncoder, enable_nested_tensor by default, given a padding mask in eval mode
    makes one on its fast path), and that an "LSTM with projections is not supported with
    oneDNN" (an nn.LSTM with proj_size on a CPU). Their raw two-line UserWarnings came out of
    run's training or evaluation, export's parity, predict --measure and infer bench: about
    torch's internals, nothing the model's code asked for. torch says each once a process (a
    TORCH_WARN_ONCE in C++), so a tiny tensor or LSTM made here under a filter spends it;
    torch._C._set_warnAlways(True) still hears them (analyze's count takes neither path). Each
    is tried again at the next build where it failed (a torch without it, a mode of torch's)."""
    if all(_NOTICES_SPENT.values()):
        return
    mask = torch.ones(1, 1, dtype=torch.bool, device="cpu")  # not a meta build's device
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(Exception):
            torch._nested_tensor_from_mask(
                torch.zeros(1, 1, 1, device="cpu"), mask, mask_check=False
            )
            _NOTICES_SPENT["nested"] = True
        # fork_rng: the LSTM's initial weights draw from torch's generator, which a build after
        # this one (unseeded, a factory_seed of None) must find as it was
        with contextlib.suppress(Exception), torch.no_grad(), torch.random.fork_rng(devices=[]):
            nn.LSTM(1, 2, proj_size=1, device="cpu")(torch.zeros(1, 1, 1, device="cpu"))
            _NOTICES_SPENT["projected"] = True


def create_model(
    name: str,
    num_classes: int | None = 10,
    in_channels: int = 3,
    *,
    factory_seed: int | None = None,
    **kwargs: Any,
) -> nn.Module:
    """Build a model by name with its head sized for `num_classes` (None: the factory's own
    default) and stem for `in_channels`; the RNGs seeded with `factory_seed` (when given:
    `seed_generators`) just before the factory is called (a name no factory's own keyword is
    likely to have). For a model file that is after its import: a file that seeds torch as it is
    imported (`torch.manual_seed(0)` at its top, common in scripts) overrode a seed set before,
    and every run.seed of a sweep started from its weights. It is seeded before the import as
    well: a model the file builds as it is imported (NET = nn.Sequential(...) at its top, the
    factory returning it) drew its weights from wherever torch's RNG stood, and the same
    run.seed gave other weights each time. The file and the modules beside it that it imports
    run again at each call (`_forget_neighbours`), each seeded so, a sweep's points alike."""
    _torch_notices_spent()
    sized = {"num_classes": num_classes} if num_classes is not None else {}
    kwargs = fresh(kwargs)
    if is_file_spec(name):
        _seed(factory_seed)
        return build_from_factory(
            load_factory(name), name, {**sized, "in_channels": in_channels, **kwargs}, factory_seed
        )
    _seed(factory_seed)
    if name in _REGISTRY:
        # The course's blocks have no classifier: num_classes and in_channels go to the
        # factories that take them; any other argument must be the factory's own.
        fn = _REGISTRY[name]
        return _call_accepting(
            fn, {**accepted(fn, {**sized, "in_channels": in_channels}), **kwargs}, name
        )
    tv_names = _torchvision_names()
    if name in tv_names:
        import torchvision

        builder = torchvision.models.get_model_builder(name)
        try:
            model: nn.Module = builder(weights=None, **sized, **kwargs)
        except TypeError as e:
            raise UserError(f"torchvision model '{name}': {e}") from None
        except Exception as e:
            if out_of_memory(e):
                raise no_room(f"building model '{name}'", e, kwargs) from None
            raise
        if in_channels != 3:
            _adapt_stem(model, in_channels)
        return model
    hint = did_you_mean(name, list(_REGISTRY) + tv_names, "see `dlperf models`", n=3)
    raise UserError(f"unknown model {quoted(name)}", hint)
