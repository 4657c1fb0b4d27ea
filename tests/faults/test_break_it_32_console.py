"""Break-it round 32, found beside P2 C5 (a fixer's note): on a terminal, the progress bar read
every task's description and status as rich markup. A task naming a path or a run with
brackets in it (`decoding 3 images of data[/x]/train`) raised rich's MarkupError, a traceback,
and `[bold]` in a name was drawn as a style, not shown as typed."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dlperf.cli import console


def test_a_task_with_brackets_is_shown_as_typed_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, markup=False, width=200)
    monkeypatch.setattr(console, "err", terminal)
    with console.reporter() as reporter:
        reporter.task("decoding 3 images of data[/x]/train", total=3)
        reporter.advance(1)
        reporter.advance(2, status="loss [bold]0.5[/bold]")
    shown = screen.getvalue()
    assert "data[/x]/train" in shown, shown
    assert "[bold]0.5[/bold]" in shown, shown
