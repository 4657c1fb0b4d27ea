"""The run store's tables, modelled on MLflow's tracking schema."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    # Every model here maps a Table of its own (SQLAlchemy types it as any FromClause, which
    # has no insert, delete or name).
    __table__: ClassVar[Table]


STORE_ID = "store_id"
VERSION_KEY = "schema_version"  # see dlperf.store.migrations
DELETED_MAX = "deleted_max_run_id"  # SQLite must not hand a deleted run's id out again
# `deleting_run_<id>`: the files a run's delete still has to remove, written with the deletion
# of its rows and dropped once they are gone (RunStore.delete_runs): a meta row, not a status
# or a column, so that no migration is needed and an older dlperf reads the store as before.
DELETING = "deleting_run_"
# The SQLite file whose artifact directory <out_dir>/<store id>/ is: a byte copy of the file
# carries the same store id, and must not delete the original's files (RunStore.delete_runs).
HOME = "home"
# The home's file as "<device>:<inode>", recorded with it: a home path gone is the store moved
# (renamed in place, its folder moved) only for that file; another store with the id (a backup)
# is a copy while a file of that identity is still there (RunStore._copy_of).
HOME_FILE = "home_file"
# A byte copy of a store whose original is still there writes its new runs under a directory of
# its own, `<store id>-<token>` (COPY_DIR), recorded with the copy's file (COPY_FILE), so that a
# copy of the copy makes its own too (`RunStore._copy_dir`).
COPY_DIR, COPY_FILE = "copy_dir", "copy_file"


class Meta(Base):
    """Facts about the store itself, one row each; `store_id` names the store, so the files
    its runs leave on disk can be told from another store's."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(40), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Study(Base):
    __tablename__ = "studies"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(40))
    created: Mapped[datetime] = mapped_column(DateTime)


class Run(Base):
    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int | None] = mapped_column(ForeignKey("studies.id"), nullable=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(20))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    config_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    system: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # Final figures (accuracy, throughput, phases...) so listings need not scan metrics.
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    started: Mapped[datetime] = mapped_column(DateTime)
    ended: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The one process that may write the run while it is `running` (`procs.this_process()`
    # as JSON), taken by compare-and-set: see RunStore.take_over. Null once the run has ended.
    owner: Mapped[str | None] = mapped_column(Text, nullable=True)


class Metric(Base):
    __tablename__ = "metrics"
    # 64-bit on PostgreSQL (BIGSERIAL), as SQLite's rowid is: a store takes a row per logged
    # value and never reuses the ids of deleted runs' rows, and a SERIAL's 2^31 ran out. On
    # SQLite INTEGER, which alone makes the column the rowid. Stores made before keep their
    # SERIAL (widening rewrites the table): RunStore says how to widen it once it runs out.
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    key: Mapped[str] = mapped_column(String(100))
    step: Mapped[int] = mapped_column(Integer)
    # Nullable because SQLite stores NaN as NULL; readers turn NULL back into NaN.
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    wall_time: Mapped[float] = mapped_column(Float)
    __table_args__ = (Index("ix_metrics_run_key_step", "run_id", "key", "step"),)


class Artifact(Base):
    __tablename__ = "artifacts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    kind: Mapped[str] = mapped_column(String(40))
    path: Mapped[str] = mapped_column(Text)


class Tag(Base):
    """A run's labels, set by `dlperf runs tag`: one value per key. Added after the first
    release: stores made before it gain the table when a newer dlperf opens them."""

    __tablename__ = "tags"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Claim(Base):
    """A sweep point taken by one process (`RunStore.claim`), so that two sweeps of one study
    never train the same point: `key` is the point's identity within the study, `owner` the
    claiming process as in `Run.owner`. Kept after the point ends; a claim whose process is
    gone is taken over."""

    __tablename__ = "claims"
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(Text)
