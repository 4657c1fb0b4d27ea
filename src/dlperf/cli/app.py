"""The Typer application and the options every command shares."""

from __future__ import annotations

from dataclasses import dataclass

import typer

app = typer.Typer(
    name="dlperf",
    help="A performance lab for deep-learning training: measure, model, compare.\n\n"
    "Example: dlperf demo",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)


@dataclass
class State:
    db: str | None = None
    debug: bool = False


state = State()


@app.callback()
def _global(
    db: str = typer.Option(
        None,
        "--db",
        envvar="DLPERF_DB",
        help="Run store: a SQLAlchemy URL or a SQLite file path (default ./dlperf.db).",
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    state.db = db
    state.debug = debug


def open_store():  # -> dlperf.store.Store, imported lazily to keep --help fast
    from dlperf.store import Store

    return Store.open(state.db)
