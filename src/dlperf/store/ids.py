"""A store id as dlperf makes one: `migrations.migrate` names a new store `uuid4().hex[:12]`.

Run files live under `<run.out_dir>/<store id>/`, so an id set by hand ('../../etc') would
put them anywhere: any other value is refused when the store opens, and `runs repair` leaves
it behind (the new store makes its own). Standard library only: `reading` checks it too.
"""

from __future__ import annotations

import re

STORE_ID_FORM = re.compile(r"[0-9a-f]{12}")


def made_store_id(value: object) -> bool:
    """Whether `value` is a store id as dlperf makes one."""
    return isinstance(value, str) and STORE_ID_FORM.fullmatch(value) is not None
