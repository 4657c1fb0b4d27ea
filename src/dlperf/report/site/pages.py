"""The report's pages: one per run, one per study, and the index. Each returns its HTML."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dlperf.distributed.contracts import AllreduceSummary
from dlperf.doctor import SEVERITIES, Finding
from dlperf.errors import UserError
from dlperf.parsing import flatten
from dlperf.report.site import figures as figs
from dlperf.report.site.html import (
    as_set,
    esc,
    figure,
    heading,
    key_values,
    link,
    page,
    png,
    quantity,
    short_name,
    status,
    table,
    table_figure,
)
from dlperf.report.site.trace_section import trace_section
from dlperf.store import RunStore
from dlperf.store.query import system_rows, tracked
from dlperf.store.record import RunRecord

# Summary figures shown in the index, by run kind: (column, summary key); `heading` adds
# the unit its cells leave out.
KEY_FIGURES = (
    ("test accuracy", "test_accuracy"),
    ("throughput", "throughput"),
    ("train time", "train_time_s"),
)
SWEEP_FREE = {"run.seed", "run.threads", "run.name", "run.out_dir"}  # not a sweep's axes
STAGES = ("teacher", "baseline", "select", "pretrain", "finetune")  # a distill study's, in order
# Config keys that only mean something for one value of another key (their docstrings in
# dlperf.config say so: "synthetic: image shape C,H,W."): left out of other runs' pages.
APPLIES_WHEN = {
    "data.shape": ("data.name", "synthetic"),
    "data.num_classes": ("data.name", "synthetic"),
    "data.size": ("data.name", "synthetic"),
    "train.schedule.milestones": ("train.schedule.kind", "multistep"),
    "train.schedule.gamma": ("train.schedule.kind", "multistep"),
    "train.schedule.min_lr": ("train.schedule.kind", "cosine"),
}


def run_href(run_id: int) -> str:
    return f"run-{run_id}.html"


def study_href(study_id: int) -> str:
    return f"study-{study_id}.html"


def severity(value: str) -> str:
    return status(value) if value in SEVERITIES else esc(value)


def counts(findings: list[Finding]) -> str:
    """'1 error, 2 warnings' style, as `dlperf doctor` counts them (info has no plural), each
    marked by its severity; '-' when clean."""
    parts = []
    for level in ("error", "warning", "info"):
        n = sum(f.severity == level for f in findings)
        if n:
            plural = "s" if n != 1 and level != "info" else ""
            parts.append(f'<span class="{level}">{n} {level}{plural}</span>')
    return ", ".join(parts) or "-"


def _findings(found: list[Finding], by_run: bool = False) -> str:
    if not found:
        return '<p class="note">no findings</p>'
    rows: list[list[Any]] = [[severity(f.severity), f.rule, f.evidence, f.fix] for f in found]
    columns = ["severity", "rule", "evidence", "fix"]
    if by_run:
        rows = [[f.run_id, *row] for f, row in zip(found, rows, strict=True)]
        return table(["run", *columns], rows, raw=(1,))
    return table(columns, rows, raw=(0,))


def _figures(found: figs.Figures) -> str:
    return "".join(figure(uri, caption) for caption, uri in found)


def _notes(notes: list[str]) -> str:
    return "".join(f'<p class="note">{esc(n)}</p>' for n in notes)


def run_page(
    store: RunStore,
    run: RunRecord,
    found: list[Finding],
    has_page: Callable[[str, int], bool],
) -> str:
    head: dict[str, Any] = {
        "kind": run.kind,
        "status": run.status,
        "started": run.started,
        "ended": run.ended,
    }
    study = ""
    if run.study_id is not None:
        study_id = run.study_id
        text = f"study {study_id}"
        named = link(study_href(study_id), text) if has_page("study", study_id) else esc(text)
        study = f"<p>Part of {named}.</p>"
    body = [study, key_values(head)]
    if run.error:
        body.append(f'<h2>Error</h2><pre class="error">{esc(run.error)}</pre>')
    drawn, notes = figs.run_curves(store, run)
    drawn += figs.phases(store, run)
    if run.kind == "predict":
        drawn += figs.predicted(run, [v for _, v in store.metrics(run.id, "measured_s")])
    body += ["<h2>Figures</h2>", _figures(drawn) or '<p class="note">no figures</p>', _notes(notes)]
    body += [trace_section(store, run)]
    body += ["<h2>Findings of dlperf doctor</h2>", _findings(found)]
    body += ["<h2>Summary</h2>", key_values(flatten(run.summary), quantity)]
    # A dlperf.track run's config is the user's own, whatever keys it shares with an experiment.
    body += ["<h2>Config</h2>", config(run.config or {}, whole=tracked(run))]
    body += ["<h2>System</h2>", key_values(system_rows(run.system or {}))]
    artifacts = store.artifacts(run.id)
    listing = table(["kind", "path"], [[a["kind"], a["path"]] for a in artifacts])
    body += ["<h2>Artifacts</h2>", listing if artifacts else '<p class="note">none</p>']
    body += ["<h2>Tags</h2>", key_values(run.tags or {})]
    return page(f"run {run.id}: {run.name}", "".join(body))


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def config(stored: dict[str, Any], whole: bool = False) -> str:
    """A run's config as it bears on the run: the keys set away from their defaults first,
    the others folded away, and the keys that do not apply to it (see APPLIES_WHEN) left out;
    each value as set (`as_set`): an input, not a measurement to round.
    A config that is not an experiment's (a scale point's, an all-reduce run's), or one
    `whole` says is not, is shown whole."""
    from dlperf.config import Experiment

    flat = flatten(stored)
    defaults = flatten(Experiment().to_dict())
    if whole or not flat.keys() & defaults.keys():
        return key_values(flat, as_set)
    kept = {
        k: v for k, v in flat.items()
        if k not in APPLIES_WHEN or flat.get(APPLIES_WHEN[k][0]) == APPLIES_WHEN[k][1]
    }  # fmt: skip
    same = {k: v for k, v in kept.items() if k in defaults and _same(v, defaults[k])}
    changed = {k: v for k, v in kept.items() if k not in same}
    left_out = sorted(flat.keys() - kept.keys())
    shown = (key_values(changed, as_set) if changed
             else '<p class="note">every key at its default</p>')  # fmt: skip
    if same:
        shown += (f"<details><summary>{len(same)} keys at their defaults</summary>"
                  f"{key_values(same, as_set)}</details>")  # fmt: skip
    if left_out:
        shown += f'<p class="note">left out, not used by this run: {esc(", ".join(left_out))}</p>'
    return shown


def _runs_table(
    runs: list[RunRecord],
    findings: dict[int, list[Finding]],
    has_page: Callable[[str, int], bool],
) -> str:
    figures = (heading(label, key) for label, key in KEY_FIGURES)
    columns = ["run", "name", "kind", "status", "study", *figures, "findings"]
    rows = []
    for run in runs:
        summary = run.summary
        rid, sid = run.id, run.study_id
        rows.append([
            link(run_href(rid), rid) if has_page("run", rid) else esc(rid),
            short_name(run.name), esc(run.kind), status(run.status),
            (link(study_href(sid), sid) if has_page("study", sid) else esc(sid)) if sid else "-",
            *(esc(table_figure(key, summary.get(key))) for _, key in KEY_FIGURES),
            counts(findings.get(rid, [])),
        ])  # fmt: skip
    return table(columns, rows, raw=range(len(columns)))


def index_page(
    studies: list[dict[str, Any]],
    runs: list[RunRecord],
    study_runs: dict[int, list[RunRecord]],
    findings: dict[int, list[Finding]],
    has_page: Callable[[str, int], bool],
) -> str:
    every = [f for found in findings.values() for f in found]
    body = [
        f"<p>{len(runs)} run(s) and {len(studies)} study(ies); dlperf doctor: {counts(every)}.</p>",
        "<h2>Studies</h2>",
    ]
    if studies:
        rows = []
        for s in studies:
            mine = study_runs[s["id"]]
            done = sum(r.status == "finished" for r in mine)
            found = [f for r in mine for f in findings.get(r.id, [])]
            rows.append([link(study_href(s["id"]), s["id"]), short_name(s["name"]), esc(s["kind"]),
                         esc(s["created"]), esc(f"{done}/{len(mine)} finished"),
                         counts(found)])  # fmt: skip
        body.append(
            table(["study", "name", "kind", "created", "runs", "findings"], rows, raw=range(6))
        )
    else:
        body.append('<p class="note">none</p>')
    body += ["<h2>Runs</h2>", _runs_table(runs, findings, has_page)]
    return page("dlperf report", "".join(body), home=True)


# --- studies -----------------------------------------------------------------------------


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _scale(study: dict[str, Any], runs: list[RunRecord]) -> str:
    from dlperf.report.max_batch import max_batch_figures
    from dlperf.report.scaling import study_figures

    # The rows as `dlperf scale` returned them: each run's summary with its id and status.
    rows = [{**r.summary, "run_id": r.id, "status": r.status}
            for r in sorted(runs, key=lambda r: r.id)]  # fmt: skip
    title = f"scale study {study['id']}: {study['name']}"
    finished = [r for r in rows if r["status"] == "finished"]
    batches = {r.get("per_worker_batch") for r in rows}
    if len({r.get("workers") for r in rows}) == 1 and len(batches) > 1:  # scale max-batch's
        largest = max((r["per_worker_batch"] for r in finished), default=None)
        against = f" against the per-worker batch (the largest that fits: {largest})"
        drawn = [(kind.removeprefix("plot/").replace("_", " ") + against, png(fig))
                 for kind, fig in max_batch_figures(rows, title)]  # fmt: skip
    else:
        drawn = [(kind.removeprefix("plot/").replace("_", " ") + " against workers", png(fig))
                 for kind, fig in study_figures(rows, title)]  # fmt: skip
    drawn += figs.comm_model(rows, title)
    columns = ["run", "workers", "strategy/comm", "global batch", "throughput (samples/s)",
               "speedup", "efficiency", "step (ms)", "exposed comm (ms)", "CPU wait",
               "status"]  # fmt: skip
    table_rows = [
        [r["run_id"], r.get("workers"), f"{r.get('strategy')}/{r.get('comm')}",
         r.get("global_batch"), r.get("throughput"), r.get("speedup"), r.get("efficiency"),
         _ms(r.get("step_time_s")), _ms(r.get("comm_exposed_s")),
         None if (wait := r.get("cpu_wait_share")) is None else f"{wait:.0%}",
         r["status"] + (", unreliable" if r.get("reliable") is False else "")]
        for r in rows
    ]  # fmt: skip
    note = "" if finished else '<p class="note">no finished point</p>'
    # A point a busy host (or a wide spread) spoiled says so where its figures are read.
    marked = [f"run {r['run_id']} ({r.get('workers')} workers): {r['reliability_note']}"
              for r in rows if r.get("reliable") is False]  # fmt: skip
    notes = "".join(f'<p class="note">unreliable: {esc(m)}</p>' for m in marked)
    keys = {4: "throughput", 6: "efficiency"}  # as each point's own page shows them
    points = table(columns, table_rows, keys=keys)
    return _figures(drawn) + note + "<h2>Points</h2>" + points + notes


def _allreduce(study: dict[str, Any], runs: list[RunRecord]) -> str:
    title = f"all-reduce study {study['id']}: {study['name']}"
    drawn = figs.allreduce([r for r in runs if r.status == "finished"], title)
    summaries = [s for r in runs if (s := AllreduceSummary.stored(r.summary))]
    ring = next((s.ring_model for s in summaries), None)
    body = _figures(drawn) + "<h2>Ring model (α-β)</h2>"
    body += key_values(ring, quantity) if ring else '<p class="note">no model was fitted</p>'
    measured = [row for s in summaries for row in s.rows]
    keys = ("workers", "bytes", "time_s", "algbw_gbps", "busbw_gbps")
    rows = [[row.get(k) for k in keys] for row in measured]
    columns = ["workers", "bytes", "time (s)", "algbw (GB/s)", "busbw (GB/s)"]
    return body + "<h2>Measurements</h2>" + table(columns, rows)


def sweep_params(runs: list[RunRecord]) -> dict[int, dict[str, Any]]:
    """Each run's values of the config keys that vary over the study: the sweep's axes (the
    seed and threads left out: repeats and --jobs, not axes)."""
    flat = {r.id: flatten(r.config or {}) for r in runs}
    keys = sorted({k for f in flat.values() for k in f} - SWEEP_FREE)
    varying = [
        k for k in keys
        if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flat.values()}) > 1
    ]  # fmt: skip
    return {rid: {k: f.get(k) for k in varying} for rid, f in flat.items()}


def _sweep(store: RunStore, study: dict[str, Any], runs: list[RunRecord]) -> str:
    from dlperf.sweep import summary as ranking
    from dlperf.sweep.summary import SweepPointResult, SweepRow

    params = sweep_params(runs)
    rows = [
        SweepRow.of(SweepPointResult.of_run(r.id, r.status, r.summary), params[r.id])
        for r in sorted(runs, key=lambda r: r.id)
    ]
    groups = ranking.group_rows(rows)
    axes = {k: sorted({json.dumps(p[k], default=str) for p in params.values()}) for k in
            next(iter(params.values()), {})}  # fmt: skip
    axes = {k: [json.loads(v) for v in values] for k, values in axes.items()}
    curves = [(r.params, store.metrics(r.run_id, "val/acc1"))
              for r in rows if r.status == "finished"]  # fmt: skip
    first = (runs[0].config or {}) if runs else {}
    target = (first.get("target") or {}).get("accuracy")
    drawn = figs.sweep(curves, groups, axes, target) if curves else []
    # the points' run IDs, headed so: "runs 2 | finished 1" read as two runs, one finished
    columns = ["rank", "point", "run IDs", "finished", "test accuracy (mean)", "std", "min",
               "max", "epochs to target", "time to target (s)",
               "throughput (samples/s)"]  # fmt: skip
    table_rows = [
        [g["rank"], ", ".join(f"{k}={v}" for k, v in g["params"].items()) or "all",
         ", ".join(map(str, g["run_ids"])), g["finished"], g["test_accuracy"],
         g["test_accuracy_std"], g["test_accuracy_min"], g["test_accuracy_max"],
         g["epochs_to_target"], g["time_to_target_s"], g["throughput"]]
        for g in groups
    ]  # fmt: skip
    best = ranking.winner(rows, groups)
    verdict = f"<p>Best run: {esc(best)}.</p>" if best is not None else ""
    formats = {i: "test_accuracy" for i in range(4, 8)} | {10: "throughput"}
    return "<h2>Ranking</h2>" + verdict + table(columns, table_rows, keys=formats) + _figures(drawn)


def _staleness(store: RunStore, runs: list[RunRecord]) -> str:
    modes = {(r.config or {}).get("staleness", {}).get("mode"): r for r in runs
             if r.status == "finished"}  # fmt: skip
    if not {"sync", "async"} <= set(modes):
        return '<p class="note">the study lacks a finished sync and async run</p>'
    curves = {mode: [v for _, v in store.metrics(r.id, "val/acc1")] for mode, r in modes.items()}
    histogram = (modes["async"].summary or {}).get("staleness_histogram", {})
    return _figures(figs.staleness(curves, histogram))


def _top_k(run: RunRecord) -> int | None:
    k = run.tags.get("top_k")
    return None if k is None else int(k)


def _model(run: RunRecord) -> str | None:
    return ((run.config or {}).get("model") or {}).get("name")


def _distill(
    store: RunStore,
    study: dict[str, Any],
    runs: list[RunRecord],
    has_page: Callable[[str, int], bool],
) -> str:
    """A distill study: every stage run by K; then, for its newest recipe (the teacher, P,
    unlabelled images and student of the newest fine-tuning), student accuracy against K
    beside the teacher and the baseline, and the best K."""
    from dlperf.distill.summary import BaselineRow, Point, best, verdict

    staged = [r for r in runs if r.tags.get("stage") in STAGES]
    staged.sort(key=lambda r: (_top_k(r) or 0, STAGES.index(r.tags["stage"]), r.id))
    done = [r for r in staged if r.status == "finished"]
    fine = sorted((r for r in done if r.tags["stage"] == "finetune"), key=lambda r: r.id)
    recipe: dict[str, Any] = (
        {k: fine[-1].tags.get(k) for k in ("teacher", "top_p", "unlabeled")} if fine else {}
    )
    teacher = next((r for r in staged if r.id == int(recipe.get("teacher") or 0)), None)
    if teacher is None and recipe.get("teacher"):  # a run from outside the study (--teacher)
        with contextlib.suppress(UserError):
            teacher = store.get_run(int(recipe["teacher"]))
            staged.insert(0, replace(teacher, tags={"stage": "teacher (outside the study)"}))
    columns = ["stage", "K", "P", "run", "model", "status", "test accuracy", "images kept",
               "pseudo-label precision", "teacher scoring (images/s)"]  # fmt: skip
    rows = []
    for r in staged:
        summary, rid = r.summary, r.id
        rows.append([r.tags["stage"], _top_k(r), r.tags.get("top_p"),
                     link(run_href(rid), rid) if has_page("run", rid) else esc(rid), _model(r),
                     status(r.status), summary.get("test_accuracy"), summary.get("selected"),
                     summary.get("pseudo_label_precision"),
                     summary.get("scoring_images_per_s")])  # fmt: skip
    # as each run's own page shows them (83.8%, 100.0%, 34,958), not raw (0.8384, 1, 34958)
    keys = {6: "test_accuracy", 8: "pseudo_label_precision", 9: "scoring_images_per_s"}
    body = "<h2>Stages</h2>" + table(columns, rows, raw=(3, 5), keys=keys)
    if not fine:
        return body + '<p class="note">no student has finished fine-tuning</p>'
    model = _model(fine[-1])
    newest: dict[tuple[str, int | None], RunRecord] = {}
    for r in sorted(done, key=lambda r: r.id):  # the newest run of each stage and K wins
        if all(r.tags.get(k) == v for k, v in recipe.items()) and _model(r) in (model, None):
            newest[(r.tags["stage"], _top_k(r))] = r
    students = [
        Point(int(r.tags["top_k"]), int(recipe["top_p"]), r.trained.test_accuracy,
              (s.summary if (s := newest.get(("select", k))) else {}).get("pseudo_label_precision"))
        for (stage, k), r in sorted(newest.items(), key=lambda item: item[0][1] or 0)
        if stage == "finetune"
    ]  # fmt: skip
    baselines = [r for r in done if r.tags["stage"] == "baseline" and _model(r) == model]
    baseline = max(baselines, key=lambda r: r.id) if baselines else None
    same = baseline is None and teacher is not None and _model(teacher) == model
    # The teacher and the baseline as the figure and the verdict read them; None: not found.
    line, base = (
        None if r is None else BaselineRow(r.id, _model(r), r.trained.test_accuracy, False, s)
        for r, s in ((teacher, False), (teacher if same else baseline, same))
    )
    winner = best(students)
    assert winner is not None  # every student here finished fine-tuning
    said = (f"Newest recipe: teacher run {recipe['teacher']}, P = {recipe['top_p']}, "
            f"unlabelled images {recipe['unlabeled']}, student {model}. "
            f"B{verdict(winner, line, base, percent=True)[1:]}.")  # fmt: skip
    figures = figs.distill((study["id"], study["name"]), line, base, students)
    return body + f"<p>{esc(said)}</p>" + _figures(figures)


def _overlay(store: RunStore, runs: list[RunRecord]) -> str:
    from dlperf.report.runs import draw_runs

    ids = [r.id for r in runs if r.kind == "run"]
    if not ids:
        return ""
    try:
        fig, done = draw_runs(store, ids, [], "epoch")
    except UserError as e:
        return _notes([str(e)])
    return _figures([(f"{', '.join(done.keys)} of the study's runs against epoch", png(fig))])


def study_page(
    store: RunStore,
    study: dict[str, Any],
    runs: list[RunRecord],
    findings: dict[int, list[Finding]],
    has_page: Callable[[str, int], bool],
) -> str:
    kind = study["kind"]
    if kind == "scale":
        body = _scale(study, runs)
    elif kind == "allreduce":
        body = _allreduce(study, runs)
    elif kind == "sweep":
        body = _sweep(store, study, runs)
    elif kind == "staleness":
        body = _staleness(store, runs)
    elif kind == "distill":
        body = _distill(store, study, runs, has_page)
    else:
        body = _overlay(store, runs)
    head = key_values({"kind": kind, "created": study["created"], "runs": len(runs)})
    found = [f for r in runs for f in findings.get(r.id, [])]
    tail = "<h2>Findings of dlperf doctor</h2>" + _findings(found, by_run=True)
    tail += "<h2>Runs</h2>" + _runs_table(runs, findings, has_page)
    return page(f"study {study['id']}: {study['name']}", head + body + tail)
