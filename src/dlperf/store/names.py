"""The names a command makes from the one it was given (a sweep's "NAME LABEL" runs, a scale
study's "scale NAME" and its points' "NAME LABEL", a distill study's "NAME-finetune-k10"),
checked against the store's limits before the command does any work.

The store checks a name only as it writes it (`RunStore.create_run`), which for these
commands came after work had run: a scale study failed after its first round, recorded with
no runs; distill after training and scoring its teacher. And its hint, "give a shorter
run.name", did not say how short: a run.name of 180 characters is already under 200.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from dlperf.errors import UserError

# The tables' words in a message: a command makes many runs, and one study.
_MADE = {"run": "run names", "study": "a study name"}


@dataclass(frozen=True)
class Made:
    """One name a command will make from the given one: in which table, and what the command
    adds to the given name, in words ("point label '2 workers ddp/allreduce'")."""

    table: Literal["run", "study"]
    name: str
    added: str


def given(run_name: str | None, model: str) -> tuple[str, str]:
    """The name a command's runs are made from, run.name else the model's, and what a line
    calls it ("run.name", "model name 'resnet20'")."""
    return (run_name, "run.name") if run_name else (model, f"model name {model!r}")


def limit(table: Literal["run", "study"]) -> int:
    """The longest name, in characters, the store keeps in `table` (its column's length)."""
    from dlperf.store.schema import Run, Study

    column: Any = (Run if table == "run" else Study).__table__.c.name
    return int(column.type.length)


def at_most(key: str) -> Callable[[int], str]:
    """The hint that says how short `key` must be: "give a run.name of at most 171
    characters", or that no length would do (what the command adds is too long itself)."""

    def hint(room: int) -> str:
        if room > 0:
            return f"give a {key} of at most {room} characters"
        return f"what the command adds to {key} is too long for the store by itself"

    return hint


def check_made_names(
    given: str, source: str, made: Iterable[Made], hint: Callable[[int], str], where: str = ""
) -> None:
    """Refuse, in one line, names made from `given` (called `source` in the message: "run.name",
    "sweep name") that the store would not keep: the one furthest over its table's limit is
    told, and `hint` is given the most characters `given` may have for every name to fit."""
    worst: tuple[int, Made, int] | None = None
    for each in made:
        most = limit(each.table)
        over = len(each.name) - most
        if worst is None or over > worst[0]:
            worst = (over, each, most)
    if worst is None or worst[0] <= 0:
        return
    over, each, most = worst
    raise UserError(
        f"{where}{source} of {len(given)} characters + {each.added} makes {_MADE[each.table]} "
        f"of {len(each.name)} characters; the run store keeps at most {most}",
        hint(len(given) - over),
    )
