"""dlperf.report.site.pages: the report's pages as HTML: finding counts, the config folded
to what bears on the run, sweep axes, and links only to pages that exist."""

from __future__ import annotations

from typing import Any

import pytest

from dlperf.doctor import Finding
from dlperf.report.site import figures, pages
from dlperf.store import RunStore


def _finding(run_id: int, severity: str) -> Finding:
    return Finding(run_id, "diverged", severity, "<loss> is nan", "lower train.lr")


def test_counts_marks_each_severity_and_is_a_dash_when_clean() -> None:
    found = [_finding(1, "error"), _finding(1, "info"), _finding(2, "error")]
    assert pages.counts(found) == (
        '<span class="error">2 errors</span>, <span class="info">1 info</span>'
    )
    assert pages.counts([]) == "-"


def test_config_shows_changed_keys_folds_defaults_and_drops_what_does_not_apply() -> None:
    shown = pages.config(
        {"train": {"lr": 0.123, "epochs": 11}, "data": {"name": "digits", "shape": [3, 8, 8]}}
    )
    changed, _, rest = shown.partition("<details>")
    assert "<th>train.lr</th>" in changed and "<th>train.epochs</th>" in changed
    assert "<th>data.name</th>" not in changed  # digits is the default
    assert "keys at their defaults</summary>" in rest and "<th>data.name</th>" in rest
    assert "left out, not used by this run: data.shape" in rest  # synthetic data's key
    assert "data.shape</th>" not in shown


def test_a_config_that_is_not_an_experiments_is_shown_whole() -> None:
    shown = pages.config({"sizes": "1KB..1MB", "workers": [2]})
    assert "<details>" not in shown
    assert "<th>sizes</th>" in shown and "<th>workers</th>" in shown


def test_sweep_params_are_the_keys_that_vary_but_seed_and_threads(store: RunStore) -> None:
    ids = [
        store.create_run("p", "run", {"train": {"lr": lr, "epochs": 3}, "run": {"seed": seed}})
        for lr, seed in ((0.1, 1), (0.2, 2))
    ]
    runs = [store.get_run(i) for i in ids]
    assert pages.sweep_params(runs) == {ids[0]: {"train.lr": 0.1}, ids[1]: {"train.lr": 0.2}}


def _has(*pages_: tuple[str, int]) -> Any:
    return lambda kind, item: (kind, item) in pages_


def test_the_index_links_only_the_pages_written(store: RunStore) -> None:
    study = store.create_study("s<1>", "sweep")
    linked = store.create_run("a", "run", {}, study_id=study)
    store.finish_run(linked, summary={"test_accuracy": 0.932, "throughput": 1562.2})
    bare = store.create_run("b", "run", {})
    runs = [store.get_run(linked), store.get_run(bare)]
    index = pages.index_page(
        [store.get_study(study)],
        runs,
        {study: [runs[0]]},
        {linked: [_finding(linked, "warning")]},
        _has(("run", linked), ("study", study)),
    )
    assert "<title>dlperf report</title>" in index
    assert f'<a href="run-{linked}.html">{linked}</a>' in index
    assert f'href="run-{bare}.html"' not in index
    assert "s&lt;1&gt;" in index and "1/1 finished" in index
    assert "<td>93.2%</td>" in index and "<td>1,562</td>" in index
    assert "2 run(s) and 1 study(ies); dlperf doctor: " in index


def test_a_run_page_holds_its_error_findings_tags_and_a_study_link_if_written(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(figures, "png", lambda fig: "png:")
    study = store.create_study("s", "sweep")
    run_id = store.create_run("r<x>", "run", {"train": {"lr": 9.0}}, study_id=study)
    store.finish_run(run_id, "failed", {"train_time_s": 0.5}, error="loss became <nan>")
    store.set_tags(run_id, {"who": "me"})
    run = store.get_run(run_id)
    page = pages.run_page(store, run, [_finding(run_id, "error")], _has())
    assert f"<title>run {run_id}: r&lt;x&gt;</title>" in page
    assert f"<p>Part of study {study}.</p>" in page  # no study page: no link
    assert '<pre class="error">loss became &lt;nan&gt;</pre>' in page
    assert '<span class="error">error</span>' in page and "&lt;loss&gt; is nan" in page
    assert '<td class="value" title="0.5">500 ms</td>' in page  # the summary, with units
    assert "<th>who</th>" in page and "<th>train.lr</th>" in page
    linked = pages.run_page(store, run, [], _has(("study", study)))
    assert f'<a href="study-{study}.html">study {study}</a>' in linked
    assert '<p class="note">no findings</p>' in linked


def test_a_study_page_lists_its_runs_and_their_findings(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "png", lambda fig: "png:")
    study = store.create_study("s", "other")
    run_id = store.create_run("r", "train", {}, study_id=study)
    page = pages.study_page(
        store, store.get_study(study), [store.get_run(run_id)],
        {run_id: [_finding(run_id, "warning")]}, _has(("run", run_id)),
    )  # fmt: skip
    assert f"<title>study {study}: s</title>" in page
    row = f'<td class="num">{run_id}</td><td><span class="warning">warning</span></td>'
    assert row + "<td>diverged</td>" in page  # the findings, by run
    assert f'<a href="run-{run_id}.html">{run_id}</a>' in page
