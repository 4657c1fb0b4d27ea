"""Which study a rerun of a sweep or a distillation continues, read from the store without
writing to it."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from dlperf.errors import UserError
from dlperf.store import RunStore
from dlperf.store.schema import Study


def choose_study(
    store: RunStore, name: str, kind: str, resume: int | None, new: bool
) -> int | None:
    """The `kind` study to continue (`resume`, else the newest called `name`; None: a new one
    is to be made), checked without writing."""
    if resume is not None:
        if new:
            raise UserError("give --resume STUDY_ID or --new, not both")
        study = store.get_study(resume)
        if study["kind"] != kind:
            raise UserError(f"study {resume} is a {study['kind']} study, not a {kind} study")
        return resume
    return None if new else store.find_study(name, kind)


def studies_named(store: RunStore, name: str, kind: str) -> list[int]:
    """The ids of the `kind` studies called `name`, newest first."""
    query = select(Study.id).where(Study.name == name, Study.kind == kind).order_by(Study.id.desc())
    with Session(store.engine) as s:
        return list(s.scalars(query))
