"""Break-it round 47, fixer F3: a figure's refused write names the figure; a run failed by a
full store disk is stored, and a sweep's point line says it, as the one-line error does.

T3 C1 (message). A figure refused by a file size limit (ulimit -f) or a full disk said "error:
File too large (...) (the system named no file: dlperf --debug ... shows where)": the write in
`paths.save_figure` raises an OSError naming no file, and only `runs plot` and `report` named
theirs. `predict --plot`, `data describe`, `sweep`'s figures, `converge fit --plot`, distill's
and the other reports' did not. Now `save_figure` (and `paths.atomic_write`, the checkpoints'
and records' writes) names the path it writes: "error: cannot use roof.png: File too large
(...)", exit 1, and still no part file is left.
T3 C5 (cosmetic). A sweep point failed by a full store disk printed "point 1/2 failed: OSError:
[Errno 28] No space left on device: 'tiny/t.db'" above the command's "error: cannot use
tiny/t.db: No space left on device", and the run's stored error (`runs show`, of `run` too) was
that Python text. Now both say it as the one line does (`paths.error_line`); an OSError that
names no file, or that a user's model file raised, keeps its type and text.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from dlperf import paths
from dlperf.progress import NullReporter
from dlperf.store import RunStore
from dlperf.sweep import runner
from tests.conftest import CliResult, file_size_limit
from tests.sweep.test_runner import sweep_of

Cli = Callable[..., CliResult]
EFBIG_HINT = (
    "File too large (a file size limit (ulimit -f) stopped the write: raise it, or write less)"
)

# --- T3 C1: a figure's refused write names the figure ---------------------------------------------


@pytest.mark.usefixtures("fewer_bootstrap_fits")
def test_converge_fit_plot_under_a_file_size_limit_names_the_figure(
    cli: Cli, tmp_path: Path
) -> None:
    """As the tester's `(ulimit -f 10; dlperf predict ... --plot roof.png)`, by the cheapest
    command that draws a figure (every one saves through `paths.save_figure`), the limit set
    in this process: one line naming the figure, exit 1, and no part file left."""
    rows = "".join(f"{k},{1 / (0.002 * k + 0.5) + 0.3!r}\n" for k in range(10, 1001, 10))
    (tmp_path / "c.csv").write_text("step,loss\n" + rows)
    args = ("converge", "fit", "--csv", "c.csv", "--x", "step", "--y", "loss", "--plot", "f.png")
    with file_size_limit(10 * 1024):  # the figure is about 36 KB
        r = cli(*args)
    assert r.code == 1, r.err
    assert r.err.splitlines()[-1] == f"error: cannot use f.png: {EFBIG_HINT}"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("f")]  # no part left


def test_save_figure_and_atomic_write_name_their_path_in_a_write_that_names_none(
    tmp_path: Path,
) -> None:
    """The library's own writes, through a link as well: the path asked for is named (the
    one line's `told` says "cannot use ..."), where the OS's EFBIG named no file."""
    fig = Figure(figsize=(3, 3))
    fig.subplots().plot([0, 1], [1, 0])
    (tmp_path / "real.png").write_bytes(b"earlier")
    os.symlink("real.png", tmp_path / "link.png")
    for name in ("f.png", "link.png"):
        with file_size_limit(1000), pytest.raises(OSError) as caught:
            paths.save_figure(fig, tmp_path / name)
        assert (caught.value.errno, caught.value.filename) == (errno.EFBIG, str(tmp_path / name))
        assert paths.told(caught.value) == (f"cannot use {tmp_path / name}: {EFBIG_HINT}", False)
    with file_size_limit(1000), pytest.raises(OSError) as caught:
        paths.atomic_write(tmp_path / "c.pt", b"w" * 5000, fsync=True)
    assert (caught.value.errno, caught.value.filename) == (errno.EFBIG, str(tmp_path / "c.pt"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.png", "real.png"]
    assert (tmp_path / "real.png").read_bytes() == b"earlier"


# --- T3 C5: a full store disk in a sweep point --------------------------------------------------


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (
            OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "tiny/t.db"),
            "cannot use tiny/t.db: No space left on device",  # before: "OSError: [Errno 28] ..."
        ),
        (  # naming no file: nothing to say it by but Python's text, as before
            ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
            "ConnectionRefusedError: [Errno 111] Connection refused",
        ),
    ],
)
def test_a_point_failed_by_the_store_disk_says_it_as_the_one_line_does(
    raised: OSError, said: str, tmp_path: Path, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run made and recorded as `run_experiment` records it, then its store write
    refused: the run's stored error and the point's (its line) are the one line's words."""
    import dlperf.experiment.run

    exp = sweep_of(tmp_path).points[0].exp
    study = store.create_study("lr", "sweep")

    def full(exp: Any, store: RunStore, reporter: Any, study_id: int, **kw: Any) -> Any:
        with store.new_run("p", "run", exp.to_dict(), exp.config_hash(), None, study_id):
            raise raised

    monkeypatch.setattr(dlperf.experiment.run, "run_experiment", full)
    result = runner.run_point(exp, store, study, 0, NullReporter())
    assert (result.status, result.error) == ("failed", said)
    stored = store.get_run(result.run_id)
    assert (stored.status, stored.error) == ("failed", said)
