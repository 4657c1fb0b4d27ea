"""Review of round 34's serve, signal and locale fixes (task R3).

C4's family: under a C locale with UTF-8 mode off (PYTHONUTF8=0, -X utf8=0) Python's stdout is
ASCII with the surrogateescape handler, which raises on a character ASCII lacks as "strict"
does: every table holding one (a run named café, runs compare's Δ) ended in a
UnicodeEncodeError traceback. Only "strict" was made to escape (round 18's PYTHONIOENCODING=ascii).
And `runs tag 1 note=café` there said the value "holds a control character or a byte that is
not UTF-8 (give printable text)", as a name was told to be renamed before C4's fix.
C5's family: `converge regress` takes run IDs and CSV sources together, and kept ignoring
--key when every source was a CSV file, and --x/--y when every one was a run, as fit and
predict did before C5's fix: the curve fitted was not the one named. And `converge fit`'s
header named the metric (loss) but not the stored key it was read from (val/loss by default,
--key train/loss), so a fit of one looked like a fit of the other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import dlperf
from dlperf.errors import UserError
from dlperf.store.query import tag_changes
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


@pytest.mark.parametrize(
    ("mode", "text", "written"),
    [
        ("utf8=0", "caf\\xe9 \\u0394", b"caf\\xe9 \\u0394\n"),  # escaped, as on stderr
        ("utf8=1", "\\udcff", b"\xff\n"),  # a file name's byte that is not UTF-8: as it was
    ],
    ids=["ascii", "utf-8 mode"],
)
def test_stdout_in_a_c_locale_escapes_only_what_its_encoding_lacks(
    mode: str, text: str, written: bytes
) -> None:
    """What dlperf's console module sets up at import, in a fresh interpreter (the encoding and
    its handler are set at start), without the rest of the CLI: a fraction of a second."""
    done = subprocess.run(
        [sys.executable, "-X", mode, "-c", f"import dlperf.cli.console; print('{text}')"],
        env={**os.environ, "LC_ALL": "C", "PYTHONIOENCODING": ""},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, written, b"")


def test_a_utf8_tag_value_read_as_ascii_is_told_to_change_the_locale() -> None:
    with pytest.raises(UserError) as refused:
        tag_changes(["note=caf\udcc3\udca9"])  # café's UTF-8 bytes, as Python reads them there
    assert (refused.value.message, refused.value.hint) == (
        "runs tag note: the value is UTF-8, but Python read it as ASCII: 'café'",
        "Python reads names as ASCII in a C or POSIX locale with UTF-8 mode off: run with "
        "PYTHONUTF8=1 or LC_ALL=C.UTF-8",
    )
    with pytest.raises(UserError, match="not UTF-8") as latin1:  # bytes that are not UTF-8
        tag_changes(["note=caf\udce9"])
    assert latin1.value.hint == "give printable text"


@pytest.mark.parametrize(
    ("sources", "given", "said"),
    [
        (
            ["{a}:depth=20", "{b}:depth=56"],
            ["--y", "m", "--key", "train/loss"],
            "error: converge.key (--key) names a stored run's metric, and only CSV sources were "
            "given (a CSV file's metric is its column, converge.y, e.g. --y m)\n",
        ),
        (
            ["1", "2"],
            ["--y", "m"],
            "error: converge.y (--y) names a CSV column, and only stored runs were given (a "
            "stored run's metric is converge.key, e.g. --key train/loss)\n",
        ),
    ],
    ids=["csv sources with --key", "runs with --y"],
)
def test_converge_regress_refuses_an_option_no_source_reads(
    cli: Cli, tmp_path: Path, sources: list[str], given: list[str], said: str
) -> None:
    for name in "ab":
        (tmp_path / f"{name}.csv").write_text("step,m\n1,2.0\n2,1.2\n3,0.9\n4,0.7\n5,0.6\n")
    named = [s.format(a=tmp_path / "a.csv", b=tmp_path / "b.csv") for s in sources]
    r = cli("converge", "regress", *named, "--features", "depth", *given)
    assert (r.code, r.out, r.err) == (2, "", said)


def test_converge_regress_of_csv_sources_compared_with_a_run_reads_y_and_key(
    cli: Cli, tmp_path: Path
) -> None:
    """The sources CSV files, --compare a stored run: --y is the files', --key the run's, and
    neither is refused (the store is empty: the run is then missing, after the fits)."""
    for depth in (20, 56):
        rows = "".join(f"{step},{2.0 / step + depth / 1000}\n" for step in range(1, 6))
        (tmp_path / f"{depth}.csv").write_text("step,m\n" + rows)
    sources = [f"{tmp_path / f'{depth}.csv'}:depth={depth}" for depth in (20, 56)]
    r = cli(
        "converge", "regress", *sources, "--features", "depth", "--y", "m", "--key",
        "train/loss", "--predict", "depth=40", "--compare", "1",
    )  # fmt: skip
    assert (r.code, r.out) == (2, ""), r.err
    assert r.err.startswith("error: no run 1: run store "), r.err


@pytest.mark.usefixtures("fewer_bootstrap_fits")
def test_converge_fit_of_a_run_names_the_key_it_fitted(cli: Cli, db: str) -> None:
    with dlperf.track("r", store=db) as run:
        for s in range(1, 21):
            run.log(s, loss=1 / (0.05 * s + 1) + 0.2)
    r = cli("converge", "fit", "1", "--key", "train/loss")
    assert r.code == 0, r.err
    assert r.out.splitlines()[0] == "run 1: 20 points to step 20, loss from train/loss"
    r = cli("converge", "fit", "1", "--key", "train/loss", "--json")
    assert r.code == 0, r.err
    assert {k: json.loads(r.out)[k] for k in ("source", "metric", "key")} == {
        "source": "run 1",
        "metric": "loss",
        "key": "train/loss",
    }
