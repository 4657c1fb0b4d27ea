"""Break-it round 26, part P3, fix task D: the store's views and the names it keeps.

C6. A run name took Unicode format characters (U+202E, the right-to-left override; U+200B,
    the zero-width space) that a tag value refused: stored and printed raw, the override
    reversed the rest of a `runs list` row. Every name check and the tag check are one now.
C7. `runs plot` of a series of one point drew nothing (a line needs two), yet counted it.
C8. `runs plot` of a key whose values are NaN drew an empty figure, counted "points: 1" and
    said nothing: NaN values are counted out now, with a warning.
C9. `runs plot` of runs of which some lack the key dropped those runs without a word.
C13. `--where train.lr!=0.1` was told "did you mean 'train.lr'?", which selects the opposite.
C14. `--where train.lr=.05` selected nothing where 0.05 selected the runs (`--set` refuses .05).
C15. `runs compare 3 3` compared run 3 with itself; `compare --study 1` of a study holding one
     run blamed the run IDs, which were not given.
Converge. `converge fit` of a dlperf.track run logged from step 0 said "the first step is 1,
     not 0", which a stored run cannot change.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from dlperf import track
from dlperf.config import Experiment
from dlperf.errors import UserError
from dlperf.parsing import has_control, one_line
from dlperf.report.runs import draw_runs
from dlperf.store import RunStore
from dlperf.store.query import Condition, tag_changes
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_store_faults import one_line as one_error_line

Cli = Callable[..., CliResult]

# Format characters (category Cf) a terminal or a browser acts on without showing them.
FORMAT = ["\u202e", "\u200b", "\u2066", "\ufeff"]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "fx26d")


def _run(store: RunStore, rows: list[Any], config: dict[str, Any] | None = None) -> int:
    """A tracked run (a config of the user's) holding `rows`, finished."""
    run_id = store.create_run("t", "run", config or {"lr": 0.1})
    store.log_metrics(run_id, rows)
    store.finish_run(run_id, summary={})
    return run_id


# C6


def test_a_run_name_refuses_the_format_characters_a_tag_value_refuses(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    for c in FORMAT:
        assert has_control(f"a{c}b"), repr(c)
        with pytest.raises(UserError):  # the tag check and the name check are one
            tag_changes([f"x=a{c}b"])
        with (
            pytest.raises(UserError, match="a run's name is printable text"),
            track(name=f"{c}evil", config={}, store=str(tmp_path / "t.db")),
        ):
            pass
        with pytest.raises(ValidationError):
            Experiment.model_validate({"run": {"name": f"{c}evil"}})
    assert not has_control("café 🚀 naïve")  # text, however far from ASCII, is a name
    result = cli("run", str(tiny_exp()), "--set", "run.name=\u202eevil")
    one_error_line(result, 2, "run.name")
    # A name stored before (or a file's stem) is shown escaped, never acted on.
    assert one_line("\u202eevil\u200b") == "\\u202eevil\\u200b"


# C7, C8, C9


def test_runs_plot_marks_lone_points_counts_nan_out_and_names_runs_without_the_key(
    url: str,
) -> None:
    store = RunStore.open(url)
    one = _run(store, [("train/loss", 0, 0.5, 1.0)])
    nan = _run(store, [("train/loss", 1, math.nan, 1.0), ("train/loss", 2, 0.4, 2.0),
                       ("train/loss", 3, math.nan, 3.0)])  # fmt: skip
    without = _run(store, [("train/other", 1, 1.0, 1.0)])
    fig, plot = draw_runs(store, [one, nan, without], ["train/loss"], "step", fitted=False)
    lines = fig.axes[0].get_lines()
    assert len(lines) == 2
    for line in lines:  # each one finite point between gaps: a marker, or nothing shows
        assert line.get_marker() not in (None, "None", ""), line
        finite = [i for i, y in enumerate(line.get_ydata()) if math.isfinite(y)]
        assert line.get_markevery() in (None, finite), line.get_markevery()
    assert [r["points"] for r in plot.runs] == [{"train/loss": 1}, {"train/loss": 1}, {}]
    assert plot.warnings == [
        f"run {nan}: 2 train/loss values are NaN (not a number), left out",
        f"run {without} has no train/loss",
    ]
    only_nan = _run(store, [("train/special", 0, math.nan, 1.0)])
    with pytest.raises(UserError) as e:
        draw_runs(store, [only_nan], ["train/special"], "step", fitted=False)
    said = f"nothing to draw: run {only_nan}: 1 train/special value is NaN (not a number), left out"
    assert (e.value.message, e.value.hint) == (said, None)
    store.engine.dispose()


# C13


def test_where_refuses_comparisons_in_one_line(cli: Cli, tmp_path: Path) -> None:
    with track(name="a", config={"train": {"lr": 0.1}}, store=str(tmp_path / "dlperf.db")):
        pass
    for given in ("train.lr!=0.1", "train.lr<=0.1", "train.lr>=0.1", "train.lr<0.1",
                  "train.lr>0.1"):  # fmt: skip
        with pytest.raises(UserError) as e:
            Condition.parse(given)
        assert "only KEY=VALUE" in e.value.message, (given, e.value.message)
        assert "did you mean" not in str(e.value)
    one_error_line(cli("runs", "list", "--where", "train.lr!=0.1"), 2, "only KEY=VALUE")


# C14


def test_where_reads_a_number_as_set_does(url: str, cli: Cli) -> None:
    with track(name="a", config={"train": {"lr": 0.05}}, store=url):
        pass
    with track(name=".05", config={"train": {"lr": 0.1}, "note": ".05"}, store=url):
        pass
    found = cli("--db", url, "runs", "list", "--where", "train.lr=0.05", "--json")
    assert found.code == 0 and '"name": "a"' in found.out, found
    # --set refuses .05 for a number; --where, which read it as text, selected nothing.
    refused = cli("--db", url, "runs", "list", "--where", "train.lr=.05")
    one_error_line(refused, 2, "train.lr=.05", "0.05")
    # Text is still text: a name or a string in the config that reads ".05" is matched.
    for where in ("name=.05", "note=.05"):
        found = cli("--db", url, "runs", "list", "--where", where, "--json")
        assert found.code == 0 and '"name": ".05"' in found.out, (where, found)


# C15


def test_compare_counts_runs_not_ids(cli: Cli, store: RunStore) -> None:
    first = _run(store, [])
    one_error_line(cli("runs", "compare", str(first), str(first)), 2, f"run {first}", "twice")
    study = store.create_study("sw", "sweep")
    lone = store.create_run("p", "run", {"lr": 0.2}, study_id=study)
    store.finish_run(lone, summary={})
    result = cli("runs", "compare", "--study", str(study))
    one_error_line(result, 2, f"study {study} holds one run ({lone})")
    assert "run IDs" not in result.err
    empty = store.create_study("none", "sweep")
    one_error_line(cli("runs", "compare", "--study", str(empty)), 2, f"study {empty} holds no runs")


# converge


def test_converge_fit_of_a_run_logged_from_step_0_says_what_can_be_done(
    cli: Cli, store: RunStore
) -> None:
    run_id = _run(store, [("train/loss", s, 1 / (s + 1), float(s)) for s in range(8)])
    result = cli("converge", "fit", str(run_id), "--key", "train/loss")
    one_error_line(result, 2, f"run {run_id}", "step 0")
    assert "the first step is 1, not 0" not in result.err
