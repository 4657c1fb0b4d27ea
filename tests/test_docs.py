"""The README and docs/ cannot go stale: links resolve, every command is covered (the quick
start runs in tests/scenarios/test_quickstart.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 320

ANY_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def doc_pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def github_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings (code blocks excluded)."""
    text = ANY_FENCE.sub("", page.read_text(encoding="utf-8"))
    anchors: set[str] = set()
    for heading in HEADING.findall(text):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in anchors:
            n += 1
            candidate = f"{slug}-{n}"
        anchors.add(candidate)
    return anchors


def test_relative_links_resolve() -> None:
    broken = []
    for page in doc_pages():
        text = INLINE_CODE.sub("", ANY_FENCE.sub("", page.read_text(encoding="utf-8")))
        for target in LINK.findall(text):
            if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in github_anchors(dest):
                broken.append(f"{where} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_docs_link_back_and_readme_links_every_page() -> None:
    readme = README.read_text(encoding="utf-8")
    pages = sorted(DOCS.glob("*.md"))
    assert pages
    for page in pages:
        assert f"(docs/{page.name})" in readme, f"README.md does not link to docs/{page.name}"
        assert "(../README.md)" in page.read_text(encoding="utf-8"), f"{page.name}: no README link"


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES})"


def help_commands(cli: Callable[..., CliResult]) -> list[str]:
    """The command names `dlperf --help` lists (in this process, through the real entry point:
    a process of its own would prove nothing more about the names)."""
    result = cli("--help")
    assert result.code == 0, result.err
    _, found, rest = result.out.partition("\nCommands:\n")
    assert found, result.out
    names = []
    for line in rest.splitlines():
        if not line.strip():
            break
        if not line.startswith("   "):  # wrapped descriptions are indented further
            names.append(line.split()[0])
    return names


def sub_commands(command: object, path: list[str]) -> list[list[str]]:
    """Every visible sub-command under a command group, depth first, in --help's order."""
    found = []
    for name, sub in (getattr(command, "commands", None) or {}).items():
        if not sub.hidden:
            found += [[*path, name], *sub_commands(sub, [*path, name])]
    return found


def test_every_command_is_in_the_readme(
    cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    import typer.main

    from dlperf.cli import app

    monkeypatch.setenv("COLUMNS", "200")
    names = help_commands(cli)
    assert "run" in names and "serve" in names, names
    group = typer.main.get_command(app)
    commands = []
    for name in names:
        commands += [[name], *sub_commands(group.commands[name], [name])]
    assert ["converge", "speed", "fit"] in commands, commands
    readme = README.read_text(encoding="utf-8")
    missing = [
        " ".join(c) for c in commands if not re.search(rf"dlperf {' '.join(c)}(?![\w-])", readme)
    ]
    assert not missing, f"commands without an example in README.md: {missing}"


# A ring all-reduce time, however it is spelled: "T = 2(n−1)α ...", "t = 2(p−1)/p · (...)".
RING_TIME = re.compile(r"\b[Tt](?:\(n, S\))? = 2\([np][−-]1\)")


def docstrings(path: Path) -> list[str]:
    """The module's, classes' and functions' docstrings of a source file."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef))]
    return [doc for node in nodes if (doc := ast.get_docstring(node, clean=False))]


def test_the_ring_model_is_written_one_way() -> None:
    """Issue 39: docs/course.md wrote the ring all-reduce as t = 2(p−1)/p · (α + n·β) where
    scale.md and the code fit T(n, S) = 2(n−1)·α + 2(n−1)/n · S/B. Every page and docstring
    states the formula the fit's module gives, with its symbols."""
    from dlperf.distributed import allreduce

    assert allreduce.__doc__ is not None
    (formula,) = re.findall(r"^\s*(T\(n, S\) = .*?)\s{2,}", allreduce.__doc__, re.M)
    pages = {page.name: page.read_text(encoding="utf-8") for page in doc_pages()}
    for name in ("course.md", "scale.md"):
        assert formula in pages[name], f"docs/{name} does not state {formula}"
    texts = [(f"docs/{name}", text) for name, text in pages.items()]
    for source in sorted((ROOT / "src" / "dlperf").rglob("*.py")):
        # Parsed only where the file holds " = 2(", as every match of RING_TIME does (a
        # docstring's text is in its file as written): most files are not parsed at all.
        if " = 2(" in source.read_text(encoding="utf-8"):
            where = str(source.relative_to(ROOT))
            texts += [(where, doc) for doc in docstrings(source)]
    assert any(where.startswith("src/") for where, _ in texts)  # the fit's module at least
    other = [
        f"{where}: {text[m.start() : m.start() + len(formula)]}"
        for where, text in texts
        for m in RING_TIME.finditer(text)
        if not text.startswith(formula, m.start())
    ]
    assert not other, f"the ring model written otherwise than {formula}:\n" + "\n".join(other)
