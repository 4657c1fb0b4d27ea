"""dlperf.progress: the Reporter protocol library code reports through, and its null form."""

from __future__ import annotations

import inspect

from dlperf.progress import NullReporter, Reporter


class Recording:
    """A reporter that keeps every call, as a CLI's would render them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object, object]] = []

    def task(self, description: str, total: int | None = None) -> None:
        self.calls.append(("task", description, total))

    def advance(self, n: int = 1, status: str = "") -> None:
        self.calls.append(("advance", n, status))

    def log(self, message: str) -> None:
        self.calls.append(("log", message, None))


def work(reporter: Reporter) -> int:
    """Library-shaped code: it reports through whatever reporter it is handed."""
    reporter.task("counting", total=3)
    for i in range(3):
        reporter.advance(status=f"i={i}")
    reporter.log("done")
    return 3


def test_null_reporter_accepts_every_call_and_keeps_nothing() -> None:
    r = NullReporter()
    r.task("x")
    r.task("x", total=5)
    r.advance()
    r.advance(3, status="loss 0.1")
    r.log("line")
    assert vars(r) == {}  # it keeps nothing
    assert work(r) == 3


def test_a_recording_reporter_sees_the_calls_in_order() -> None:
    r = Recording()
    work(r)
    assert r.calls == [
        ("task", "counting", 3),
        ("advance", 1, "i=0"),
        ("advance", 1, "i=1"),
        ("advance", 1, "i=2"),
        ("log", "done", None),
    ]


def test_null_reporter_has_the_protocols_signatures_and_defaults() -> None:
    for name in ("task", "advance", "log"):
        assert inspect.signature(getattr(NullReporter, name)) == inspect.signature(
            getattr(Reporter, name)
        ), name
