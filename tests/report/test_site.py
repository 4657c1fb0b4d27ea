"""`dlperf report`: a static offline HTML site over a store of real runs and studies.

The lab: a real run with phase timing and a hostile name, a real two-point sweep on digits,
and a scale study, an all-reduce study, a staleness study and a `predict --measure` run
stored through the RunStore API in the shapes their commands store. Pages are checked as files
(links, escaping, images that decode, no external reference) and in a real headless Chromium
(Debian's `chromium`) driven over the DevTools protocol on a pipe: loaded from file:// with the
network off, no console error, every image decoded, a screenshot that is not blank.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import io
import json
import os
import re
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageStat

from dlperf.config import Experiment
from dlperf.experiment.run import run_experiment
from dlperf.report.site import build_report
from dlperf.report.site import select as select_report
from dlperf.report.site.figures import PHASES, spread
from dlperf.report.site.html import COLUMN_PX, MIN_FONT_PT, NAME_CHARS, fmt, quantity
from dlperf.store import RunStore
from tests.conftest import rank_result, write_distill_exp

HOSTILE = "<script>alert(1)</script>"
BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 400
[train]
epochs = 2
batch_size = 32
[target]
accuracy = 0.5
[run]
threads = 1
warmup_steps = 2
checkpoint = false
out_dir = "{out}"
"""
SWEEP = 'base = "base.toml"\nname = "lr"\n[grid]\n"train.lr" = [0.1, 0.02]\n'


def _scale_study(store: RunStore, exp: Experiment) -> int:
    """A weak-scaling study stored as `dlperf scale` stores one (1 and 2 workers, the second
    far from linear, with a ring-model prediction, and marked: a busy host held its cores)."""
    from dlperf.distributed.planning import Point
    from dlperf.distributed.study import rank_metrics
    from dlperf.distributed.summary import add_relative, summarize
    from dlperf.system import system_info

    study = store.create_study("scale smallcnn", "scale")
    base = None
    for workers, step, compute in ((1, 0.100, None), (2, 0.400, 0.100)):
        point = Point(workers, 32, 32 * workers, "allreduce", "ddp", None)
        ranks = [rank_result(r, [step] * 20, [compute] * 20 if compute else None, 32,
                             world=workers) for r in range(workers)]  # fmt: skip
        system = {**system_info(None, 1), "usable_cores": 2, "backend": "gloo"}
        config = {"experiment": exp.to_dict(), "point": asdict(point)}
        run = store.create_run(f"smallcnn {point.label()}", "scale", config, None, system, study)
        summary = add_relative(summarize(point, ranks, 1, 1, "gloo", 1437, 0.5), base)
        base = base or summary
        predicted = {"ring_predicted_s": 0.05, "overlap_predicted_s": 0.08} if workers > 1 else {}
        if workers > 1:
            note = "contended: its threads waited for a CPU 40% of their runnable time"
            predicted |= {"cpu_wait_share": 0.4, "reliable": False, "reliability_note": note}
        store.log_metrics(run, rank_metrics(ranks))
        store.finish_run(run, "finished", summary=summary.to_dict() | predicted)
    return study


def _allreduce_study(store: RunStore) -> int:
    """An all-reduce study as `dlperf scale allreduce` stores one, with its model."""
    from dlperf.distributed.allreduce import fit_ring_model

    study = store.create_study("allreduce gloo", "allreduce")
    alpha, bandwidth = 20e-6, 2e9
    measured = {}
    for n in (2, 4):
        rows = []
        for size in (1024 * 4**i for i in range(6)):
            t = (2 * (n - 1) * alpha + 2 * (n - 1) / n * size / bandwidth) * 1.1
            algbw = size / t / 1e9
            rows.append({"workers": n, "bytes": size, "time_s": t, "algbw_gbps": algbw,
                         "busbw_gbps": algbw * 2 * (n - 1) / n})  # fmt: skip
        measured[n] = rows
    ring = asdict(fit_ring_model([r for rows in measured.values() for r in rows]))
    for n, rows in measured.items():
        run = store.create_run(f"allreduce gloo {n} workers", "allreduce", {"workers": n},
                               None, {"backend": "gloo"}, study)  # fmt: skip
        store.log_metrics(run, [("allreduce/time_s", r["bytes"], r["time_s"]) for r in rows])
        summary = {"backend": "gloo", "workers": n, "rows": rows, "ring_model": ring}
        store.finish_run(run, "finished", summary=summary)
    return study


def _staleness_study(store: RunStore, exp: Experiment) -> int:
    study = store.create_study("staleness smallcnn", "staleness")
    for mode, accs in (("sync", [0.5, 0.8, 0.9]), ("async", [0.4, 0.7, 0.85])):
        config = {**exp.to_dict(), "staleness": {"mode": mode, "learners": {"a": 1.0}}}
        run = store.create_run(f"smallcnn {mode}", "staleness", config, None, {}, study)
        store.log_metrics(run, [("val/acc1", e, a) for e, a in enumerate(accs, 1)])
        hist = {"0": 10, "1": 30, "2": 5} if mode == "async" else {"0": 45}
        summary = {"steps_per_epoch": 15, "val_accuracy": accs[-1], "staleness_histogram": hist}
        store.finish_run(run, "finished", summary=summary)
    return study


def _predict_run(store: RunStore) -> int:
    run = store.create_run("predict smallcnn on cpu", "predict", {"model": {"name": "smallcnn"}})
    store.log_metrics(run, [("measured_s", i, 0.010 + 0.001 * i) for i in range(5)])
    summary = {"predicted_s": 0.008, "error_pct": -22.0, "measured_median_s": 0.012}
    store.finish_run(run, "finished", summary=summary)
    return run


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from dlperf.sweep import load_sweep, run_sweep

    root = tmp_path_factory.mktemp("report")
    url = f"sqlite:///{root / 'dlperf.db'}"
    store = RunStore.open(url)
    (root / "base.toml").write_text(BASE.format(out=root / "runs"))
    (root / "sweep.toml").write_text(SWEEP)
    sweep = run_sweep(load_sweep(root / "sweep.toml"), store)
    exp = Experiment.model_validate(
        {
            "model": {"name": "smallcnn"},
            "data": {"name": "digits", "limit": 400},
            "train": {"epochs": 2, "batch_size": 32, "lr": 0.05},
            "run": {"threads": 1, "warmup_steps": 2, "checkpoint": False, "timing": "phases",
                    "name": HOSTILE, "out_dir": str(root / "runs")},
        }
    )  # fmt: skip
    hostile = run_experiment(exp, store)["run_id"]
    store.set_tags(hostile, {"note": HOSTILE})
    ids = {
        "sweep": sweep.study_id,
        "hostile": hostile,
        "scale": _scale_study(store, exp),
        "allreduce": _allreduce_study(store),
        "staleness": _staleness_study(store, exp),
        "predict": _predict_run(store),
    }
    out = root / "site"
    studies = [ids[k] for k in ("sweep", "scale", "allreduce", "staleness")]
    with pytest.MonkeyPatch.context() as monkeypatch:
        figures = _caught_figures(monkeypatch)
        # one job, as a report of under POOL_FROM pages draws anyway: drawn in this process
        done = build_report(store, out, [hostile, ids["predict"]], studies, jobs=1)
    return {"root": root, "url": url, "store": store, "ids": ids, "out": out, "report": done,
            "figures": figures}  # fmt: skip


def _caught_figures(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, int], list]:
    """The matplotlib Figures a report drawn in this process saves, by the page they are on:
    ("run", id) or ("study", id)."""
    from matplotlib.figure import Figure

    from dlperf.report.site import pages

    caught: dict[tuple[str, int], list[Figure]] = {}
    page: list[tuple[str, int]] = []
    save = Figure.savefig

    def keep(fig: Figure, *args: Any, **kwargs: Any) -> None:
        caught.setdefault(page[-1], []).append(fig)
        save(fig, *args, **kwargs)

    def drawing(kind: str, draw: Callable, item: Callable[..., int]) -> Callable:
        def wrapped(*args: Any, **kwargs: Any) -> str:
            page.append((kind, item(*args)))
            try:
                return draw(*args, **kwargs)
            finally:
                page.pop()

        return wrapped

    monkeypatch.setattr(Figure, "savefig", keep)
    run_page = drawing("run", pages.run_page, lambda store, run, *_: run.id)
    monkeypatch.setattr(pages, "run_page", run_page)
    study_page = drawing("study", pages.study_page, lambda store, study, *_: study["id"])
    monkeypatch.setattr(pages, "study_page", study_page)
    return caught


def _pages(out: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(out.glob("*.html"))}


def test_site_has_an_index_and_a_page_per_run_and_study(lab: dict[str, Any]) -> None:
    done, ids, out = lab["report"], lab["ids"], lab["out"]
    assert done.pages[0] == "index.html"
    assert sorted(done.pages) == sorted(_pages(out))
    for study in (ids["sweep"], ids["scale"], ids["allreduce"], ids["staleness"]):
        assert f"study-{study}.html" in done.pages
    assert f"run-{ids['hostile']}.html" in done.pages
    index = (out / "index.html").read_text(encoding="utf-8")
    for name in done.pages[1:]:
        assert f'href="{name}"' in index or any(
            f'href="{name}"' in page for page in _pages(out).values()
        )
    # Every run of a named study has its page, linked from the study's page.
    scale_page = (out / f"study-{ids['scale']}.html").read_text(encoding="utf-8")
    for run in lab["store"].list_runs(study_id=ids["scale"]):
        assert f'href="run-{run.id}.html"' in scale_page


def test_run_page_holds_curves_phases_findings_config_and_system(lab: dict[str, Any]) -> None:
    page = (lab["out"] / f"run-{lab['ids']['hostile']}.html").read_text(encoding="utf-8")
    for text in ("against epoch", "against wall time", "phase breakdown", "Findings of dlperf",
                 "Config", "System", "train.lr", "test_accuracy", "Tags"):  # fmt: skip
        assert text in page, text
    predict = (lab["out"] / f"run-{lab['ids']['predict']}.html").read_text(encoding="utf-8")
    assert "predicted against measured" in predict


def test_a_marked_point_says_so_on_its_study_page(lab: dict[str, Any]) -> None:
    """Issue 39: the report marks a point a busy host spoiled where its figures are read."""
    page = (lab["out"] / f"study-{lab['ids']['scale']}.html").read_text(encoding="utf-8")
    assert "<th>CPU wait</th>" in page and "finished, unreliable" in page and ">40%<" in page
    assert "unreliable: run " in page and "waited for a CPU 40% of their runnable time" in page


def test_study_pages(lab: dict[str, Any]) -> None:
    out, ids = lab["out"], lab["ids"]
    scale = (out / f"study-{ids['scale']}.html").read_text(encoding="utf-8")
    for caption in ("throughput against workers", "speedup against workers",
                    "efficiency against workers", "cost against workers",
                    "communication per step, predicted against measured"):  # fmt: skip
        assert caption in scale, caption
    assert "low-efficiency" in scale  # the doctor's finding on the 2-worker point
    allreduce = (out / f"study-{ids['allreduce']}.html").read_text(encoding="utf-8")
    assert "bus bandwidth against message size" in allreduce and "alpha_s" in allreduce
    sweep = (out / f"study-{ids['sweep']}.html").read_text(encoding="utf-8")
    assert "Ranking" in sweep and "train.lr=0.1" in sweep and "train.lr=0.02" in sweep
    assert "validation error against epoch" in sweep
    staleness = (out / f"study-{ids['staleness']}.html").read_text(encoding="utf-8")
    assert "sync vs async" in staleness


def test_images_decode_and_nothing_is_external(lab: dict[str, Any]) -> None:
    count = 0
    for name, page in _pages(lab["out"]).items():
        for src in re.findall(r'src="([^"]*)"', page):
            assert src.startswith("data:image/png;base64,"), (name, src[:60])
            image = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1])))
            image.load()
            assert image.width > 100 and image.height > 100
            count += 1
        for href in re.findall(r'href="([^"]*)"', page):
            assert re.fullmatch(r"(index|run-\d+|study-\d+)\.html", href), (name, href)
        assert not re.search(r"https?://|<script|<link|@import", page), name
    assert count >= 15


def test_stored_strings_are_escaped(lab: dict[str, Any]) -> None:
    pages = _pages(lab["out"])
    for page in pages.values():
        assert HOSTILE not in page
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert escaped in pages["index.html"]
    run_page = pages[f"run-{lab['ids']['hostile']}.html"]
    assert run_page.count(escaped) >= 3  # title, heading, config run.name, tag


def test_cli_json_and_text(cli: Callable, lab: dict[str, Any], tmp_path: Path) -> None:
    """The command's JSON and text forms, on the lab's cheapest pages to draw: the predict
    run's (one figure) and the all-reduce study's (its runs' pages hold no curve)."""
    out, ids = tmp_path / "r", lab["ids"]
    result = cli("--db", lab["url"], "report", str(ids["predict"]), "--out", str(out), "--json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert set(document) == {"out", "pages", "runs", "studies"}
    assert document["runs"] == [ids["predict"]] and document["studies"] == []
    assert document["pages"] == ["index.html", f"run-{ids['predict']}.html"]
    result = cli("--db", lab["url"], "report", "--study", str(ids["allreduce"]), "--out",
                 str(out))  # fmt: skip
    assert result.code == 0, result.err
    assert result.out.startswith("2 run(s), 1 study(ies): 4 pages in ")
    assert (out / f"study-{ids['allreduce']}.html").exists()


def test_default_is_the_newest_20_runs_and_their_studies(store: RunStore) -> None:
    study = store.create_study("old", "demo")
    ids = [store.create_run(f"r{i}", "run", {}, study_id=study if i < 3 else None)
           for i in range(25)]  # fmt: skip
    newer = store.create_study("new", "demo")
    ids.append(store.create_run("last", "run", {}, study_id=newer))
    runs, studies = select_report(store)
    assert runs == sorted(ids[-20:], reverse=True)
    assert studies == [newer]  # the old study's runs are not among the newest 20
    runs, studies = select_report(store, last=2, study_ids=[study])
    assert runs == sorted([ids[-1], ids[-2], *ids[:3]], reverse=True)
    assert studies == sorted([study, newer], reverse=True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["999", "--out", "r"], "error: no run 999: run store "),
        (["--study", "999", "--out", "r"], "error: no study 999: run store "),  # not there
        (["--last", "0", "--out", "r"], "error: --last must be at least 1, got 0"),
        (["--out", "r"], "error: run store "),  # not there: since round 66 it says so
        (["--out", "file.txt"], "error: --out file.txt is a file, not a directory"),
    ],
)
def test_bad_input_exits_2(cli: Callable, tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "file.txt").write_text("not a directory")
    result = cli("report", *args)
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert lines[0].startswith(message), result.err
    assert "Traceback" not in result.err and len(lines) <= 2  # the message and its hint
    assert not (tmp_path / "r").exists(), "a refused report leaves no directory behind"


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("file.txt/r", "error: cannot use file.txt/r: Not a directory"),
        ("nodir/r", "error: cannot use nodir/r: No such file or directory"),
    ],
)
def test_an_unusable_site_directory_exits_2(
    cli: Callable, store: RunStore, tmp_path: Path, out: str, message: str
) -> None:
    """With runs to report, the site's directory is made, but never a missing tree above it."""
    (tmp_path / "file.txt").write_text("not a directory")
    store.finish_run(store.create_run("r", "run", {}), "finished")
    result = cli("report", "--out", out)
    assert (result.code, result.err.strip()) == (2, message)
    assert not (tmp_path / "nodir").exists()


def test_help_ends_with_an_example(cli: Callable) -> None:
    result = cli("report", "--help")
    assert result.code == 0
    assert "Example: dlperf report --last 10 --out report" in result.out


STAGE_ROW = re.compile(
    r'<tr><td>([^<]*)</td><td[^>]*>([^<]*)</td><td[^>]*>[^<]*</td><td><a href="run-(\d+)\.html">'
)


def test_distill_study_page(
    cli: Callable, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real distill study on a tiny budget (the teacher is also the baseline; students at
    K = 2 and 4): its page lists every stage's run, embeds the figure and names the best K,
    taken from the newest finished run of each stage and K. The first report is the whole
    command's; the two after it, read for the study's page alone, leave its runs' pages
    (the report's cost, and read by no check here) undrawn."""
    from dlperf.report.site import pages

    path = write_distill_exp(tmp_path)
    result = cli("distill", str(path), "--unlabeled", "digits:holdout=0.5", "--top-k", "2,4",
                 "--set", "distill.pretrain_epochs=1", "--json")  # fmt: skip
    assert result.code == 0, result.err
    done = json.loads(result.out)
    study, teacher = done["study_id"], done["teacher"]
    assert done["baseline"]["same_as_teacher"]

    def render() -> str:
        out = tmp_path / "site"
        result = cli("report", "--study", str(study), "--out", str(out))
        assert result.code == 0, result.err
        return (out / f"study-{study}.html").read_text(encoding="utf-8")

    page = render()
    run_pages = len(list((tmp_path / "site").glob("run-*.html")))
    monkeypatch.setattr(pages, "run_page", lambda *args, **kwargs: "")
    rows = [("teacher", "-", teacher["run_id"])]
    for s in done["students"]:
        k = str(s["top_k"])
        rows += [("select", k, s["select_run_id"]), ("pretrain", k, s["pretrain_run_id"]),
                 ("finetune", k, s["finetune_run_id"])]  # fmt: skip
    assert [(st, k, int(rid)) for st, k, rid in STAGE_ROW.findall(page)] == rows
    for s in done["students"]:  # images kept and pseudo-label precision of each select run
        kept = f'<td class="num">{s["selected"]}</td><td class="num">'
        assert (
            kept + f"{quantity('pseudo_label_precision', s['pseudo_label_precision'])}</td>" in page
        )
    assert "student test accuracy against K" in page
    (src,) = re.findall(r'<img src="data:image/png;base64,([^"]*)"', page)
    assert Image.open(io.BytesIO(base64.b64decode(src))).size[0] > 100
    best = next(s for s in done["students"] if s["top_k"] == done["best_top_k"])
    acc = best["test_accuracy"]
    t_acc = teacher["test_accuracy"]
    assert (
        f"<p>Newest recipe: teacher run {teacher['run_id']}, P = 1, unlabelled images "
        f"digits:holdout=0.5, student smallcnn. Best K = {best['top_k']}: {100 * acc:.1f}%, "
        f"{100 * (acc - t_acc):+.1f} points over the teacher ({100 * t_acc:.1f}%, run "
        f"{teacher['run_id']}); "
        "the teacher is also the baseline.</p>"
    ) in page

    # A newer finished fine-tuning of K=4 replaces the first; a newer failed one of K=2 does not.
    for k, state, accuracy in ((4, "finished", 0.99), (2, "failed", 1.0)):
        run = store.create_run(f"finetune-k{k}", "run", {"model": {"name": "smallcnn"}},
                               study_id=study)  # fmt: skip
        store.finish_run(run, state, summary={"test_accuracy": accuracy})
        tags = {"stage": "finetune", "top_k": str(k), "top_p": "1"}
        store.set_tags(run, {**tags, "teacher": str(teacher["run_id"]),
                             "unlabeled": "digits:holdout=0.5"})  # fmt: skip
    page = render()
    assert len(list((tmp_path / "site").glob("run-*.html"))) == run_pages + 2
    assert len(STAGE_ROW.findall(page)) == len(rows) + 2
    assert f"Best K = 4: 99.0%, {100 * (0.99 - t_acc):+.1f} points over the teacher" in page
    # Another recipe's newer fine-tuning (P = 2) takes the figure and the sentence over.
    run = store.create_run("finetune-k2", "run", {"model": {"name": "smallcnn"}},
                           study_id=study)  # fmt: skip
    store.finish_run(run, "finished", summary={"test_accuracy": 0.5})
    store.set_tags(
        run,
        {
            "stage": "finetune",
            "top_k": "2",
            "top_p": "2",
            "teacher": str(teacher["run_id"]),
            "unlabeled": "digits:holdout=0.5",
        },
    )
    page = render()
    assert "P = 2, unlabelled images digits:holdout=0.5" in page
    assert "Best K = 2: 50.0%" in page


# --- what a person reads (issue 23) --------------------------------------------------------


def _run_page_figures(lab: dict[str, Any]) -> list:
    """The matplotlib Figures of the real run's page, caught as the lab's report saved them
    (one job: drawn in this process)."""
    return lab["figures"][("run", lab["ids"]["hostile"])]


def test_run_page_figures_fill_the_column_and_no_label_is_cut(lab: dict[str, Any]) -> None:
    """Drawn as wide as the page's content column (shown 1:1, so their points read as body
    text does), no text under 9 pt, and every label, title and legend inside the figure."""
    from matplotlib.text import Text

    saved = _run_page_figures(lab)
    assert len(saved) == 3  # against epoch, against wall time, phases
    for fig in saved:
        title = fig.axes[0].get_title()
        fig.draw_without_rendering()
        inside = fig.get_tightbbox()  # inches, every drawn artist's extent
        width, height = fig.get_size_inches()
        assert inside.x0 >= -0.01 and inside.y0 >= -0.01, (title, inside)
        assert inside.x1 <= width + 0.01 and inside.y1 <= height + 0.01, (title, inside)
    for fig in saved:
        sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text()]
        assert min(sizes) >= MIN_FONT_PT, fig.axes[0].get_title()
    page = (lab["out"] / f"run-{lab['ids']['hostile']}.html").read_text(encoding="utf-8")
    for src in re.findall(r'src="data:image/png;base64,([^"]*)"', page):
        assert Image.open(io.BytesIO(base64.b64decode(src))).width == COLUMN_PX


def test_a_footnote_stays_clear_of_the_axes(lab: dict[str, Any]) -> None:
    """The scale study's figures carry a footnote placed on the figure (single-host
    emulation), which the report's refitting must not leave under the x axis' label. So
    does any other figure of the lab's report that carries one."""
    assert any(fig.texts for fig in lab["figures"][("study", lab["ids"]["scale"])])
    noted = [fig for figs in lab["figures"].values() for fig in figs if fig.texts]
    for fig in noted:
        fig.draw_without_rendering()
        for note in fig.texts:
            box = note.get_window_extent()
            assert not any(box.overlaps(ax.get_tightbbox()) for ax in fig.axes), note.get_text()


def test_phases_stack_and_legend_follow_the_step(lab: dict[str, Any]) -> None:
    from dlperf.engine.timers import PHASES as TIMED

    assert PHASES == TIMED  # the report's copy of the order the step runs its phases in
    saved = _run_page_figures(lab)
    (phases,) = [f for f in saved if "by phase" in f.axes[0].get_title()]
    ax = phases.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(PHASES)
    bottoms = [container[0].get_y() for container in ax.containers]  # the first epoch's bar
    assert bottoms == sorted(bottoms) and bottoms[0] == 0  # data at the bottom, then upward


def test_rows_written_together_are_spread_by_step() -> None:
    """120 steps logged in 12 batches of 10 share 12 times; each batch is spread over the time
    since the batch before, the first at the second's pace. Distinct times are kept."""
    rows = [(s, 100.0 + 2.0 * ((s - 1) // 10)) for s in range(1, 121)]  # batch b: 10b+1..10b+10
    times, moved = spread(rows)
    assert moved and len(set(times)) == 120 and times == sorted(times)
    assert times[9] == 100.0 and times[19] == 102.0 and times[119] == 122.0  # batch ends
    assert times[10] == pytest.approx(100.2) and times[0] == pytest.approx(98.2)
    assert spread([(1, 5.0), (2, 6.5), (3, 7.0)]) == ([5.0, 6.5, 7.0], False)
    assert spread([(1, 5.0), (2, 5.0)]) == ([5.0, 5.0], True)  # one batch: nothing to pace it


def test_wall_time_figure_says_what_its_axis_is(
    lab: dict[str, Any], cli: Callable, store: RunStore
) -> None:
    """A run of this dlperf keeps each step's own time: the figure plots it as it is. A run
    whose rows share one time per batch (written by an older dlperf) gets them spread by
    step, and the caption says so."""
    rows = lab["store"].metrics(lab["ids"]["hostile"], "train/loss")
    assert len(rows) > 10  # more steps than one batch
    page = (lab["out"] / f"run-{lab['ids']['hostile']}.html").read_text(encoding="utf-8")
    assert "train/loss, val/acc1 against wall time" in page
    assert "one time per batch" not in page
    old = store.create_run("batched", "run", {})
    for first in (1, 11):  # two batches of ten rows, each stamped with its write time
        store.log_metrics(old, [("train/loss", s, 1.0 / s) for s in range(first, first + 10)])
    store.finish_run(old, "finished", summary={"steps_per_epoch": 20})
    assert cli("report", str(old), "--out", "site").code == 0
    page = Path(f"site/run-{old}.html").read_text(encoding="utf-8")
    assert (
        "train/loss against wall time (the store holds one time per batch of rows: "
        "the steps of a batch are spread evenly between its time and the batch before&#x27;s)"
    ) in page


def test_summary_shows_units_and_keeps_the_stored_value(cli: Callable, store: RunStore) -> None:
    summary = {
        "peak_memory_bytes": 1086017536, "train_time_s": 12.34, "throughput": 1234.4,
        "test_accuracy": 0.9321, "error_pct": -22.04, "phases": {"data": 0.004591},
        "scoring_images_per_s": 15234.7, "steps": 12345, "test_loss": 12345.6,
        "ring_model": {"bandwidth_bytes_per_s": 1.818e9}, "busbw_gbps": 1.5,
    }  # fmt: skip
    run = store.create_run("units", "run", {})
    store.finish_run(run, "finished", summary=summary)
    result = cli("report", str(run), "--out", "site")
    assert result.code == 0, result.err
    page = Path(f"site/run-{run}.html").read_text(encoding="utf-8")
    for key, raw, shown in (
        ("peak_memory_bytes", "1086017536", "1.09 GB"),
        ("train_time_s", "12.34", "12.3 s"),
        ("throughput", "1234.4", "1,234 samples/s"),
        ("test_accuracy", "0.9321", "93.2%"),
        ("error_pct", "-22.04", "-22.0%"),
        ("phases.data", "0.004591", "4.59 ms"),
        ("scoring_images_per_s", "15234.7", "15,235 images/s"),
        ("ring_model.bandwidth_bytes_per_s", "1818000000.0", "1.82 GB/s"),
        ("busbw_gbps", "1.5", "1.5 GB/s"),
    ):
        assert f'<th>{key}</th><td class="value" title="{raw}">{shown}</td>' in page, key
    # No unit: the number as the terminal prints it, and no title to repeat it.
    assert '<th>steps</th><td class="value">12345</td>' in page
    assert '<th>test_loss</th><td class="value">12,346</td>' in page


def test_report_numbers_read_as_the_terminal_prints_them() -> None:
    assert fmt(12345.6) == "12,346" and fmt(0.0004567) == "0.000457" and fmt(None) == "-"
    assert fmt([1, 2]) == "[1, 2]"


def test_config_shows_what_applies_to_the_run(cli: Callable, store: RunStore) -> None:
    """A digits run's page leaves out the synthetic-only keys and puts the keys set away from
    their defaults before the folded rest; a synthetic run's page shows them."""
    digits = Experiment.model_validate({"data": {"name": "digits"}, "train": {"epochs": 7}})
    synthetic = Experiment.model_validate({"data": {"name": "synthetic", "shape": [1, 8, 8]}})
    ids = [store.create_run(name, "run", exp.to_dict())
           for name, exp in (("digits", digits), ("synthetic", synthetic))]  # fmt: skip
    result = cli("report", *map(str, ids), "--out", "site")
    assert result.code == 0, result.err
    page = Path(f"site/run-{ids[0]}.html").read_text(encoding="utf-8")
    config = page.split("<h2>Config</h2>")[1].split("<h2>")[0]
    assert "<th>data.shape</th>" not in config and "<th>data.size</th>" not in config
    assert "left out, not used by this run: data.num_classes, data.shape, data.size" in config
    set_here, folded = config.split("<details>")
    assert '<th>train.epochs</th><td class="value">7</td>' in set_here
    assert "<th>data.name</th>" not in set_here  # digits is the default
    assert "keys at their defaults</summary>" in folded and "<th>data.name</th>" in folded
    page = Path(f"site/run-{ids[1]}.html").read_text(encoding="utf-8")
    config = page.split("<h2>Config</h2>")[1].split("<details>")[0]
    assert '<th>data.shape</th><td class="value">[1, 8, 8]</td>' in config
    assert '<th>data.name</th><td class="value">synthetic</td>' in config


# --- a real browser -------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAGE_CHECK = """JSON.stringify({
    title: document.title,
    images: document.images.length,
    decoded: [...document.images].every(i => i.complete && i.naturalWidth > 0),
    text: document.body.innerText})"""


class DevTools:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
    NUL-separated JSON on fds 3 and 4), in a process group of its own that `close` kills."""

    def __init__(self, profile: Path) -> None:
        read_in, self._write = os.pipe()  # we write, Chromium reads fd 3
        self._read, write_out = os.pipe()  # Chromium writes fd 4, we read

        # In the child: the pipe ends become fds 3 and 4 (kept open by pass_fds, as the child
        # closes the others after this runs); either may itself be 3 or 4, so move both first.
        def fds() -> None:
            high_in, high_out = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (read_in, write_out))
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)

        command = [
            CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--remote-debugging-pipe", f"--user-data-dir={profile}", "--window-size=1200,2000",
            # No network at all: every name fails to resolve, every proxy connection fails.
            "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
            "about:blank",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            command, pass_fds=(3, 4), preexec_fn=fds, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(read_in)
        os.close(write_out)
        self._buffer = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            if select.select([self._read], [], [], left)[0]:
                chunk = os.read(self._read, 1 << 20)
                if not chunk:
                    raise EOFError("Chromium closed its DevTools pipe")
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 30
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._id:
                assert "error" not in reply, reply
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, event: str, since: int) -> None:
        deadline = time.monotonic() + 30
        while not any(e.get("method") == event for e in self.events[since:]):
            self.events.append(self._receive(deadline))

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        os.close(self._write)
        os.close(self._read)
        deadline = time.monotonic() + 10  # its children, reparented, are reaped by init
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def _errors(events: list[dict[str, Any]]) -> list[str]:
    found = []
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.exceptionThrown":
            found.append(str(params.get("exceptionDetails")))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            found.append(params["entry"]["text"])
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            found.append(str(params.get("args")))
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith(("file:", "data:")):
                found.append(f"request to {url}")
    return found


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One headless Chromium for the module's browser tests, each on a page (target) of its
    own; killed with its process group at the end."""
    if CHROMIUM is None:
        pytest.skip("no chromium binary (CI installs Debian's chromium)")
    chromium = DevTools(tmp_path_factory.mktemp("chromium") / "profile")
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (CI installs Debian's chromium)")
def test_pages_load_in_headless_chromium_offline(lab: dict[str, Any], browser: DevTools) -> None:
    out, hostile = lab["out"], lab["ids"]["hostile"]
    target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    try:
        attached = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.call(f"{domain}.enable", session=session)
        offline = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
        browser.call("Network.emulateNetworkConditions", offline, session)
        for name, title in (("index.html", "dlperf report"),
                            (f"run-{hostile}.html", f"run {hostile}: {HOSTILE}"),
                            (f"study-{lab['ids']['scale']}.html", "study")):  # fmt: skip
            since = len(browser.events)
            browser.call("Page.navigate", {"url": (out / name).as_uri()}, session)
            browser.wait_for("Page.loadEventFired", since)
            check = {"expression": PAGE_CHECK, "returnByValue": True}
            state = json.loads(browser.call("Runtime.evaluate", check, session)["result"]["value"])
            assert state["title"].startswith(title), state["title"]
            assert state["decoded"], f"{name}: an image did not decode"
            assert name == "index.html" or state["images"] > 0
            assert "dlperf doctor" in state["text"]
            shot = browser.call("Page.captureScreenshot", {"format": "png"}, session)
            image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("L")
            assert image.width >= 800 and ImageStat.Stat(image).var[0] > 0, f"{name}: blank"
            assert _errors(browser.events[since:]) == [], name
    finally:
        with contextlib.suppress(EOFError, TimeoutError):  # a dead browser: the error is above
            browser.call("Target.closeTarget", {"targetId": target})


FIGURE_PROBE = """(() => {
    const style = getComputedStyle(document.body);
    const column = document.body.clientWidth - parseFloat(style.paddingLeft)
        - parseFloat(style.paddingRight);
    return JSON.stringify({column, figures: [...document.querySelectorAll("figure img")].map(
        i => ({shown: i.getBoundingClientRect().width, drawn: i.naturalWidth}))});
})()"""


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (CI installs Debian's chromium)")
def test_run_page_figures_fill_the_column_at_1400_px(
    lab: dict[str, Any], browser: DevTools, tmp_path: Path
) -> None:
    """At 1400 px, a common laptop's page width, every figure of the run page spans at least
    80% of the content column and is shown at about the size it was drawn at, so that its
    fonts read as drawn. The full-page screenshot is left in tmp_path to look at."""
    target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    try:
        attached = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        session = attached["sessionId"]
        browser.call("Page.enable", session=session)
        screen = {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False}
        browser.call("Emulation.setDeviceMetricsOverride", screen, session)
        since = len(browser.events)
        page = lab["out"] / f"run-{lab['ids']['hostile']}.html"
        browser.call("Page.navigate", {"url": page.as_uri()}, session)
        browser.wait_for("Page.loadEventFired", since)
        probe = {"expression": FIGURE_PROBE, "returnByValue": True}
        sizes = json.loads(browser.call("Runtime.evaluate", probe, session)["result"]["value"])
        shot = {"format": "png", "captureBeyondViewport": True}
        data = browser.call("Page.captureScreenshot", shot, session)["data"]
        (tmp_path / "run-page-1400px.png").write_bytes(base64.b64decode(data))
    finally:
        with contextlib.suppress(EOFError, TimeoutError):  # a dead browser: the error is above
            browser.call("Target.closeTarget", {"targetId": target})
    assert sizes["column"] == COLUMN_PX  # the page's widest content column
    assert len(sizes["figures"]) == 3
    for figure in sizes["figures"]:
        assert figure["shown"] >= 0.8 * sizes["column"], sizes
        assert 0.95 <= figure["shown"] / figure["drawn"] <= 1.05, sizes


def test_control_characters_in_names_are_shown_escaped(store: RunStore, tmp_path: Path) -> None:
    """A name holding ESC and NUL reached the HTML raw (a browser drops or mangles them)."""
    evil = "evil\x1b[31m\x7fnul"  # no NUL: no store keeps one
    study = store.create_study(evil, "demo")
    run_id = store.create_run(evil, "run", {"run": {"name": evil}}, study_id=study)
    build_report(store, tmp_path / "site", [run_id], jobs=1)
    for name, page in _pages(tmp_path / "site").items():
        assert not any(c in page for c in "\x1b\x7f"), name
        assert r"evil\x1b[31m\x7fnul" in page, name


def test_a_figure_reads_the_same_on_every_page(lab: dict[str, Any]) -> None:
    """The study page showed a point's efficiency as 0.4427 where its own page showed a
    percentage, and throughput as 1562 beside 17,541."""
    store, out, ids = lab["store"], lab["out"], lab["ids"]
    study = (out / f"study-{ids['scale']}.html").read_text(encoding="utf-8")
    index = (out / "index.html").read_text(encoding="utf-8")
    for run in store.list_runs(study_id=ids["scale"]):
        page = (out / f"run-{run.id}.html").read_text(encoding="utf-8")
        efficiency = quantity("efficiency", run.summary["efficiency"])
        throughput = quantity("throughput", run.summary["throughput"])
        assert efficiency.endswith("%") and throughput.endswith(" samples/s")
        assert efficiency in page and throughput in page
        assert f'<td class="num">{efficiency}</td>' in study
        assert f'<td class="num">{throughput.removesuffix(" samples/s")}</td>' in study
        assert throughput.removesuffix(" samples/s") in index


def test_a_run_without_default_curves_names_no_missing_option(
    store: RunStore, tmp_path: Path
) -> None:
    """The note said "choose with --key", an option of `runs plot` that `report` has not."""
    run_id = store.create_run("odd", "run", {})
    store.log_metrics(run_id, [("my/metric", 1, 0.5)])
    store.finish_run(run_id, "finished")
    build_report(store, tmp_path / "site", [run_id], jobs=1)
    page = (tmp_path / "site" / f"run-{run_id}.html").read_text(encoding="utf-8")
    assert "stored none of the default metrics" in page and "my/metric" in page
    assert "--key" not in page


def test_a_long_name_is_cut_in_the_index_and_whole_in_its_title(
    store: RunStore, tmp_path: Path
) -> None:
    """A 10,000-character name filled the index (the store now keeps names of at most 200
    characters, still more than the index shows)."""
    long = "n" * 200
    run_id = store.create_run(long, "run", {}, study_id=store.create_study(long, "demo"))
    build_report(store, tmp_path / "site", [run_id], jobs=1)
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    cut = f'<span title="{long}">{long[: NAME_CHARS - 1]}…</span>'
    assert index.count(cut) == 2  # the run's row and the study's
    assert index.count(long) == 2  # only in the titles
