"""Round 47 T3 C1's siblings (fixer F3's note): the writes that go through `paths.replaced`
directly, not through `save_figure` or `atomic_write`, named no file when the OS refused them
(EFBIG under `ulimit -f`, ENOSPC): `converge fit --to-csv`'s table, a scaling study's shard of
the training set and distill's pseudo-labelled npz. Each now names the path it was writing
(`paths.writing`). The CSV, the cheapest, is tested through the command: it named its file but
was told as the user's mistake, exit 2 ("cannot write t.csv: File too large"); it is now told as
every refused write is, with the limit's hint, exit 1.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult, file_size_limit
from tests.faults.test_break_it_47_figures import EFBIG_HINT


@pytest.mark.usefixtures("fewer_bootstrap_fits")
def test_converge_fit_to_csv_under_a_file_size_limit_names_the_table(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    rows = "".join(f"{k},{1 / (0.002 * k + 0.5) + 0.3!r}\n" for k in range(10, 1001, 10))
    (tmp_path / "c.csv").write_text("step,loss\n" + rows)
    args = ("converge", "fit", "--csv", "c.csv", "--x", "step", "--y", "loss")
    with file_size_limit(64):  # the table is a few hundred bytes
        r = cli(*args, "--to-csv", "t.csv")
    assert r.code == 1, r.err
    # before: "error: cannot write t.csv: File too large", exit 2
    assert r.err.splitlines()[-1] == f"error: cannot use t.csv: {EFBIG_HINT}"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("t")]  # no part left
