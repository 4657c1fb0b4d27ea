"""Commands that need no tensors start without torch and the other heavy libraries.

Each command runs in a fresh interpreter through the real entry point; what it imported is
read from `sys.modules` afterwards. A property, not a wall-clock limit: importing torch is
what costs these commands seconds, and SQLAlchemy most of a listing's start-up
(benchmarks/bench_startup.py measures the time).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore

HEAVY = ("torch", "torchvision", "numpy", "scipy", "sklearn", "matplotlib")


def probe(heavy: tuple[str, ...]) -> str:
    """A script that runs `dlperf ARGS` (ARGS from its command line), then fails naming any
    package of `heavy` it imported."""
    return f"""
import sys
from dlperf.cli import main

sys.argv[0] = "dlperf"
try:
    main()
except SystemExit as e:
    if e.code not in (0, None):
        raise
heavy = sorted({{name.split(".")[0] for name in sys.modules}} & set({heavy!r}))
if heavy:
    sys.exit(f"dlperf {{' '.join(sys.argv[1:])}} imported {{', '.join(heavy)}}")
"""


def imports_none(argv: list[str], heavy: tuple[str, ...]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", probe(heavy), *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


COMMANDS = [
    ["--help"],
    ["--version"],
    ["models"],
    ["models", "--json"],
    ["datasets"],
    ["datasets", "--json"],
    ["devices"],
    ["config", "keys"],
    ["config", "show", "{exp}"],
    ["runs", "list"],
    ["runs", "show", "1"],
    ["runs", "compare", "1", "2", "--json"],
    ["sweep", "--help"],
    ["doctor", "--last", "2"],
    ["runs", "plot", "--help"],
    ["runs", "export", "--help"],
    ["report", "--help"],
]


@pytest.fixture
def two_runs(store: RunStore) -> None:
    """Two finished runs with per-epoch metrics, so `runs show` and `compare` render fully."""
    for name, lr in (("a", 0.1), ("b", 0.2)):
        config = {"model": {"name": "smallcnn"}, "data": {"name": "digits"}, "train": {"lr": lr}}
        run = store.create_run(name, "run", config, name, {"host": "h"})
        store.log_metrics(run, [("val/acc1", 1, 0.5), ("epoch/train_loss", 1, 1.0)])
        summary = {"test_accuracy": 0.9, "phases": {"data": 0.001, "forward": 0.002}}
        store.finish_run(run, "finished", summary=summary)


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_command_imports_nothing_heavy(
    args: list[str], two_runs: None, tiny_exp: Callable[..., Path]
) -> None:
    imports_none([a.format(exp=tiny_exp()) for a in args], HEAVY)


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "list"],
        ["runs", "list", "--json", "--kind", "run", "--limit", "1"],
        ["--db", "{missing}", "runs", "list"],
    ],
    ids=" ".join,
)
def test_listing_a_sqlite_store_imports_no_orm(
    args: list[str], two_runs: None, tmp_path: Path
) -> None:
    """`runs list` reads a SQLite store through sqlite3 (dlperf.store.reading): SQLAlchemy
    would double its start-up (issue 42)."""
    imports_none([a.format(missing=tmp_path / "missing.db") for a in args], ("sqlalchemy",))


@pytest.mark.parametrize(
    "args", [["--help"], ["models"], ["datasets"], ["runs", "list"]], ids=" ".join
)
def test_the_quickest_commands_import_no_pydantic(args: list[str], two_runs: None) -> None:
    """pydantic's import is a third of these commands' start-up: they read no config. Typer
    0.29 imports it to parse any command line (constraints.txt keeps Typer below it)."""
    imports_none(args, ("pydantic",))


def test_version_is_the_installed_package_s() -> None:
    from importlib.metadata import version

    done = subprocess.run(
        [sys.executable, "-m", "dlperf", "--version"], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (0, f"dlperf {version('dlperf')}\n")
