"""The package's layers, read from its source: every import points down the order that
docs/design.md draws, or is an exception named below with its reason, and nothing imports in
a circle.

Every `import` counts, a lazy one inside a function too (it is the same dependency, only
later), except those under `if TYPE_CHECKING:`. Rules beyond the order read the imports the
same way, typing-only ones included where the rule says so.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# The layers, top to bottom; a module may import its own layer and those below. A module
# takes the layer of the longest entry naming it or a package holding it (`dlperf` is the
# package's own `__init__` only). A new module needs a place here: the test names it until
# it has one.
LAYERS: dict[str, tuple[str, ...]] = {
    # parse, call, render; may import anything
    "facades": (
        "dlperf",
        "dlperf.__main__",
        "dlperf.cli",
        "dlperf.api",
        "dlperf.demo",
    ),
    # read the store, draw and diagnose
    "readers": ("dlperf.report", "dlperf.doctor"),
    # run engines, measure, record; return data
    "studies": (
        "dlperf.experiment",
        "dlperf.distributed",
        "dlperf.sweep",
        "dlperf.distill",
        "dlperf.study_stop",
        "dlperf.detect",
        "dlperf.deploy",
        "dlperf.exporters",
        "dlperf.converge.plan",
        "dlperf.converge.speed_views",
        "dlperf.analytic.recorded",
    ),
    # the one training step, its loop and run
    "engine": ("dlperf.engine",),
    # compute and return data (or yield progress events)
    "models": (
        "dlperf.data",
        "dlperf.models",
        "dlperf.presets",
        "dlperf.analytic",
        "dlperf.store",
        "dlperf.converge",
    ),
    # the standard library, third-party libraries and each other only
    "leaves": (
        "dlperf.blas",
        "dlperf.clocks",
        "dlperf.config",
        "dlperf.contention",
        "dlperf.errors",
        "dlperf.formatting",
        "dlperf.image_modes",
        "dlperf.parsing",
        "dlperf.paths",
        "dlperf.precision",
        "dlperf.procs",
        "dlperf.progress",
        "dlperf.records",
        "dlperf.shipped",
        "dlperf.stack",
        "dlperf.std_streams",
        "dlperf.stopping",
        "dlperf.system",
        "dlperf.table",
        "dlperf.timing",
        "dlperf.traces",
        "dlperf.version",
    ),
}

# Imports against the order, (importer, imported) module: why.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def resolve(name: str) -> str | None:
    """The dlperf module `name` refers to: itself, or the package that holds the name."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


@functools.cache
def parsed(name: str) -> ast.Module:
    """`name`'s file, parsed once for every reading of it here (graph()'s, then the tests')."""
    return ast.parse(MODULES[name].read_text(encoding="utf-8"))


def imports(name: str, typing_too: bool = False) -> dict[str, int]:
    """The dlperf modules `name` imports, anywhere in its file, each with its first line;
    those under `if TYPE_CHECKING:` only `typing_too`."""
    tree = parsed(name)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if not typing_too and type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{a.name}" for a in node.names]
        for target in targets:
            module = resolve(target) if target.startswith("dlperf") else None
            if module and module != name:
                found[module] = min(found.get(module, node.lineno), node.lineno)
    return found


@functools.cache
def graph() -> dict[str, dict[str, int]]:
    """Every module's dlperf imports: built when a test first asks, not as pytest imports this
    file (its 200 parses were 6-7 CPU-s of every pytest-xdist worker's collection)."""
    return {name: imports(name) for name in MODULES}


ROWS = list(LAYERS)


def layer(name: str) -> int | None:
    """The row of `name` in LAYERS (0 is the top), or None where no entry places it."""
    places = [
        (len(entry), row)
        for row, entries in enumerate(LAYERS.values())
        for entry in entries
        if name == entry or (entry != "dlperf" and name.startswith(entry + "."))
    ]
    return max(places)[1] if places else None


def where(name: str, line: int) -> str:
    return f"{MODULES[name].relative_to(SRC.parent)}:{line}"


def test_every_module_has_a_layer() -> None:
    unplaced = [
        f"{MODULES[name].relative_to(SRC.parent)}" for name in MODULES if layer(name) is None
    ]
    assert unplaced == [], "add these modules to a layer in tests/test_layers.py LAYERS"


def test_every_entry_names_a_module() -> None:
    entries = [entry for entries in LAYERS.values() for entry in entries]
    assert [e for e in entries if e not in MODULES] == [], "stale or misspelt LAYERS entries"


def test_imports_point_down_the_layers() -> None:
    upward = []
    for name, targets in sorted(graph().items()):
        for target, line in sorted(targets.items()):
            mine, theirs = layer(name), layer(target)
            if mine is None or theirs is None:
                continue  # the test above names unplaced modules
            if theirs < mine and (name, target) not in EXCEPTIONS:
                upward.append(
                    f"{where(name, line)}: {name} ({ROWS[mine]}) imports {target} ({ROWS[theirs]})"
                )
    assert upward == [], "\n".join(
        ["imports up the layers (move the code, or name an exception):", *upward]
    )


def test_every_exception_is_still_needed() -> None:
    stale = [edge for edge in EXCEPTIONS if edge[1] not in graph().get(edge[0], {})]
    assert stale == [], "these imports are gone: remove their EXCEPTIONS entries"


def test_the_engine_never_imports_the_store() -> None:
    """The engine trains against a MetricSink and reads stored runs through protocols
    (engine/stored.py); opening runs, leases and studies are dlperf.experiment's. Not even an
    annotation names the store."""
    engine = [
        name for name in MODULES if name == "dlperf.engine" or name.startswith("dlperf.engine.")
    ]
    found = [
        f"{where(name, line)}: {name} imports {target}"
        for name in engine
        for target, line in sorted(imports(name, typing_too=True).items())
        if target == "dlperf.store" or target.startswith("dlperf.store.")
    ]
    assert found == [], "\n".join(["the engine imports the store:", *found])


# The RunStore methods that change a store; the readers (report, doctor) may call only the
# others (get_run, list_runs, metrics, artifacts, ...).
STORE_WRITES = {
    "add_artifact", "claim", "create_run", "create_study", "delete_metrics_after", "delete_runs",
    "finish_run", "log_metrics", "new_run", "recording", "set_tags", "take_over", "update_run",
}  # fmt: skip


def calls(name: str) -> list[tuple[int, str]]:
    """Every call in `name`'s file, as (line, the called expression as written)."""
    return [
        (node.lineno, ast.unparse(node.func))
        for node in ast.walk(parsed(name))
        if isinstance(node, ast.Call)
    ]


def test_the_readers_use_the_stores_read_methods_only() -> None:
    """report/ and doctor/ read runs; what a study's figures are recorded as is the study's
    to write (dlperf.distributed.study.record_figures), not the report's."""
    readers = [n for n in MODULES if n.startswith(("dlperf.report", "dlperf.doctor"))]
    found = [
        f"{where(name, line)}: {name} calls {called}"
        for name in readers
        for line, called in calls(name)
        if called.rpartition(".")[2] in STORE_WRITES and "." in called
    ]
    assert found == [], "\n".join(["a reader writes to the store:", *found])


def test_nothing_below_the_cli_prints() -> None:
    """Commands print (dlperf.cli: console is the one output sink); the library returns data
    or reports progress through a Reporter, so a notebook decides what is shown."""
    below = [n for n in MODULES if not n.startswith("dlperf.cli")]
    writes = ("print", "sys.stdout.write", "sys.stderr.write", "rich.print", "Console")
    found = [
        f"{where(name, line)}: {name} calls {called}"
        for name in below
        for line, called in calls(name)
        if called in writes or called.endswith(".print")
    ]
    assert found == [], "\n".join(["printing below the cli:", *found])


def test_every_command_module_stays_short() -> None:
    """A command module parses, calls and prints (issue 42: at most 300 lines); logic that
    grows it belongs in the library, where a notebook can call it too."""
    long = {
        path.name: n
        for path in sorted((SRC / "dlperf" / "cli").glob("*.py"))
        if (n := len(path.read_text().splitlines())) > 300
    }
    assert long == {}, f"command modules over 300 lines: {long}"


def cycles() -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in graph()[name]:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == name:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for name in sorted(graph()):
        if name not in index:
            visit(name)
    return found


def test_no_import_cycles() -> None:
    found = cycles()
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_walk_sees_real_imports() -> None:
    """The reader of the source finds what is plainly there, lazy imports included."""
    assert "dlperf.store" in graph()["dlperf.exporters"]
    assert "dlperf.engine.checkpoint" in graph()["dlperf.cli.run"]  # inside a function
    assert "dlperf.cli.console" in graph()["dlperf.cli.run"]
    # cli/run.py names the store in annotations only: the store rule sees it, the order not
    assert "dlperf.store" in imports("dlperf.cli.run", typing_too=True)
    assert "dlperf.store" not in graph()["dlperf.cli.run"]


def test_the_longest_entry_places_a_module() -> None:
    assert layer("dlperf.converge.plan") == 2 and layer("dlperf.converge.curve") == 4
    assert layer("dlperf") == 0 and layer("dlperf.nowhere") is None
