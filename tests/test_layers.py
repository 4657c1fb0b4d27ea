"""The package's layers, read from its source: nothing imports upward and nothing imports in
a circle.

`cli` (and the facades: the package's `__init__`, `api` and `demo`) may import anything;
`report` and `doctor` read the store and draw; every other module computes and returns
data, so it never imports `cli`, `report` or `doctor`. Every `import` counts, a lazy one
inside a function too (it is the same dependency, only later), except those under
`if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
TOP = ("dlperf.cli", "dlperf.api", "dlperf.demo", "dlperf.__main__")
READERS = ("dlperf.report", "dlperf.doctor")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


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


def imports(name: str) -> set[str]:
    """The dlperf modules `name` imports, anywhere in its file."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if type_checking_only(node, parents):
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{a.name}" for a in node.names]
        for target in targets:
            module = resolve(target) if target.startswith("dlperf") else None
            if module and module != name:
                found.add(module)
    return found


GRAPH = {name: imports(name) for name in MODULES}


def test_nothing_below_the_readers_imports_them_or_the_cli() -> None:
    upward = sorted(
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if name != "dlperf" and not within(name, TOP + READERS)
        for target in targets
        if within(target, TOP + READERS)
    )
    assert upward == []


def test_the_readers_do_not_import_the_cli() -> None:
    upward = sorted(
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if within(name, READERS)
        for target in targets
        if within(target, TOP)
    )
    assert upward == []


def cycles() -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm), where a
    package's `__init__` importing its own submodules does not count as an edge back."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def edges(name: str) -> set[str]:
        # A submodule's import of its own package's __init__ (for a shared name) is how
        # packages work; only the __init__'s own imports make the dependency.
        return {t for t in GRAPH[name] if not name.startswith(t + ".")}

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in edges(name):
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

    for name in sorted(GRAPH):
        if name not in index:
            visit(name)
    return found


def test_no_import_cycles() -> None:
    assert cycles() == []


def test_the_walk_sees_real_imports() -> None:
    """The reader of the source finds what is plainly there, lazy imports included."""
    assert "dlperf.store" in GRAPH["dlperf.exporters"]
    assert "dlperf.engine.checkpoint" in GRAPH["dlperf.cli.run"]  # inside a function
    assert "dlperf.cli.console" in GRAPH["dlperf.cli.run"]
