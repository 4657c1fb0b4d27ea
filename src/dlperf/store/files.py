"""The files of a SQLite store on disk, read without SQLAlchemy (dlperf.store.reading's fast
listing and RunStore's opening both ask): the files beside it that are the store too, and
whether a reader reads it as immutable.
"""

from __future__ import annotations

import os
from pathlib import Path

# The files beside a SQLite store that are the store too: SQLite replays or reads them.
STORE_NEIGHBOURS = ("-wal", "-shm", "-journal")


def frozen(path: Path) -> bool:
    """Whether a reader (a command that does not write) reads the store file `path` as
    immutable, as `?mode=ro` reads one on read-only media: a file that cannot be written
    (`chattr +i`, another user's read-only file), which SQLite opens read-only, and then
    left an empty -wal and a 32 KiB -shm beside a WAL store for good (a read-only connection
    does not remove them as it closes). Only in a folder that can be written (read-only
    media, where SQLite can make no -shm, is read with `?mode=ro`, as its refusal says), and
    only where no file is beside it: then no process has the store open (a WAL store's -wal
    and -shm are there while one has), none writes it, and nothing waits in a -wal or a
    rollback journal."""
    if not path.is_file() or os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
        return False
    return not any(path.with_name(path.name + end).exists() for end in STORE_NEIGHBOURS)
