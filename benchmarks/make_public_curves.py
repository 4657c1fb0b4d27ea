"""Real learning curves nobody here trained, from training logs committed to public repositories.

Reads only the raw logs under benchmarks/data/public_logs/ (copied byte for byte from the
repositories, at the commit recorded for each) and the manifest beside them, SOURCES.json,
which says for every file where it came from, under what licence, what was trained and how
we know. Writes benchmarks/data/public_curves.json: one per-epoch validation curve per run,
accuracies as fractions in [0, 1]. No network, no training; deterministic:

    python benchmarks/make_public_curves.py

A log's numbers are facts and are never altered: the only conversions are percent to fraction
and a 0-based epoch counter to the 1-based count of epochs completed.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
LOGS = ROOT / "data" / "public_logs"
MANIFEST = LOGS / "SOURCES.json"
OUT = ROOT / "data" / "public_curves.json"

# One run's series: metric name ("val_acc1" or "val_loss") -> (epochs, values) as logged.
Series = dict[str, tuple[list[int], list[float]]]
# A parser maps a file's text to its runs; single-run files use the run key "".
Parser = Callable[[str, dict[str, Any]], dict[str, Series]]

OPTIMIZERS = {"sgd", "adam", "adamw", "rmsprop", "other"}
NUMBER_LIST = re.compile(r"\[\s*((?:-?[0-9][0-9.eE+-]*,?\s*)+)\]")
SCHEDULES = {"constant", "step", "cosine", "warm-restarts", "one-cycle", "linear", "other"}


def rows_loss_then_acc(text: str, spec: dict[str, Any]) -> dict[str, Series]:
    """Two CSV rows, validation loss then accuracy, one column per epoch from the first.

    The format of kentaroy47/vision-transformers-cifar10's `log/log_<net>_patch<p>.csv`.
    """
    rows = [row for row in csv.reader(io.StringIO(text)) if row]
    loss, acc = ([float(x) for x in row] for row in rows)
    epochs = list(range(1, len(acc) + 1))
    return {"": {"val_loss": (epochs, loss), "val_acc1": (epochs, acc)}}


def csv_columns(text: str, spec: dict[str, Any]) -> dict[str, Series]:
    """A CSV with a header row; `columns` in the manifest names the epoch, accuracy and loss.

    Covers timm's summary.csv, Keras's CSVLogger, Lightning's metrics.csv, Ultralytics'
    results.csv (whose older versions pad every field with spaces, hence the stripping) and
    tab-separated logs (`delimiter`). Rows without a value for the metric (Lightning writes
    train and validation rows apart) are skipped; so are the first `skip_rows` rows (an
    evaluation logged before training) and, with `where` (column -> value), rows that do not
    match it (logs with train and validation rows in one column set, told apart by a `phase`).
    Without an epoch column (pandas writing per-epoch lists) the row number is the epoch. With
    `run_column`, rows are runs named by that column (several trainings in one file).
    """
    cols: dict[str, str] = spec["columns"]
    where: dict[str, str] = spec.get("where", {})
    reader = csv.reader(io.StringIO(text), delimiter=spec.get("delimiter", ","))
    header, *body = [[field.strip() for field in row] for row in reader if row]
    rows = [dict(zip(header, row, strict=True)) for row in body[int(spec.get("skip_rows", 0)) :]]
    rows = [row for row in rows if all(row[k] == v for k, v in where.items())]
    offset = int(spec.get("epoch_offset", 0))
    runs: dict[str, list[tuple[int, dict[str, str]]]] = {}
    for number, row in enumerate(rows, start=1):
        epoch = int(float(row[cols["epoch"]])) + offset if "epoch" in cols else number
        run = _run_of(runs, row[spec["run_column"]], epoch) if "run_column" in spec else ""
        runs.setdefault(run, []).append((epoch, row))
    return {run: _columns_series(run_rows, cols) for run, run_rows in runs.items()}


def _run_of(runs: dict[str, list[tuple[int, dict[str, str]]]], name: str, epoch: int) -> str:
    """The run a row of `name` belongs to: a training rerun and appended to the same file
    starts its epochs again, and continues as `name#2`, `name#3`, ... so no epoch counts twice.
    """
    run, k = name, 1
    while f"{name}#{k + 1}" in runs:
        k += 1
        run = f"{name}#{k}"
    if run in runs and runs[run][-1][0] >= epoch:
        return f"{name}#{k + 1}"
    return run


def _columns_series(rows: list[tuple[int, dict[str, str]]], cols: dict[str, str]) -> Series:
    """One run's metrics, each over the rows that log a value for it."""
    series: Series = {}
    for metric in ("val_acc1", "val_loss"):
        if metric not in cols:
            continue
        pairs = [(e, float(row[cols[metric]])) for e, row in rows if row.get(cols[metric])]
        series[metric] = ([e for e, _ in pairs], [v for _, v in pairs])
    return series


def regex_lines(text: str, spec: dict[str, Any]) -> dict[str, Series]:
    """Free-text logs: one regular expression per metric, with groups `epoch` and `value`.

    An optional `run` pattern starts a new run wherever it matches (its group `run` names it),
    so a log of several trainings one after another gives several curves; an optional
    `run_end` pattern instead names the run that has just ended (logs that print the model's
    name after its training). Where the epoch is printed on a line of its own, an `epoch`
    pattern (group `epoch`) gives it to the metric patterns that have no `epoch` group.
    """
    run_re = re.compile(spec["run"]) if "run" in spec else None
    end_re = re.compile(spec["run_end"]) if "run_end" in spec else None
    epoch_re = re.compile(spec["epoch"]) if "epoch" in spec else None
    metric_res = {m: re.compile(p) for m, p in spec["patterns"].items()}
    offset = int(spec.get("epoch_offset", 0))
    runs: dict[str, dict[str, list[tuple[int, float]]]] = {}
    current = ""
    epoch = None
    for line in text.splitlines():
        if run_re is not None and (m := run_re.search(line)):
            current = m.group("run")
        if epoch_re is not None and (m := epoch_re.search(line)):
            epoch = int(m.group("epoch"))
        for metric, rx in metric_res.items():
            if m := rx.search(line):
                e = int(m.group("epoch")) if "epoch" in rx.groupindex else epoch
                if e is None:
                    raise ValueError(f"{metric} logged before any epoch: {line!r}")
                pair = (e + offset, float(m.group("value")))
                runs.setdefault(current, {}).setdefault(metric, []).append(pair)
        if end_re is not None and (m := end_re.search(line)):
            runs[m.group("run")] = runs.pop(current, {})
    return {
        run: {k: ([e for e, _ in v], [x for _, x in v]) for k, v in metrics.items()}
        for run, metrics in runs.items()
    }


PARSERS: dict[str, Parser] = {
    "rows_loss_then_acc": rows_loss_then_acc,
    "csv_columns": csv_columns,
    "regex_lines": regex_lines,
}


def curve_from(
    source_id: str, name: str, file: dict[str, Any], spec: dict[str, Any], runs: dict[str, Series]
) -> tuple[str, dict[str, Any]]:
    """One curve of the output: the run's metric, in fractions, with its manifest entry."""
    metric = spec["metric"]
    epochs, values = runs[spec.get("run", "")][metric]
    if metric == "val_acc1" and file.get("percent", False):
        values = [round(v / 100.0, 10) for v in values]
    if spec["optimizer"] not in OPTIMIZERS or spec["schedule"] not in SCHEDULES:
        raise ValueError(f"{source_id}/{name}: unknown optimizer or schedule in {spec['id']}")
    return spec["id"], {
        "source": source_id,
        "path": file["path"],
        "commit": file["commit"],
        "model": spec["model"],
        "dataset": spec["dataset"],
        "optimizer": spec["optimizer"],
        "schedule": spec["schedule"],
        "warmup": spec["warmup"],
        "val_size": spec["val_size"],
        "metric": metric,
        "epochs": epochs,
        "values": values,
    }


def build(logs: Path = LOGS) -> dict[str, Any]:
    """The corpus from the raw logs and the manifest in `logs`."""
    manifest = json.loads((logs / "SOURCES.json").read_text())
    sources: dict[str, Any] = {}
    curves: dict[str, Any] = {}
    for source_id, source in manifest.items():
        sources[source_id] = {k: source[k] for k in ("repo", "url", "licence", "what")}
        for name, file in source["files"].items():
            text = (logs / source_id / name).read_text()
            runs = PARSERS[file["parser"]](text, file)
            for spec in file["curves"]:
                curve_id, curve = curve_from(source_id, name, file, spec, runs)
                if curve_id in curves:
                    raise ValueError(f"curve id {curve_id} appears twice")
                curves[curve_id] = curve
    return {"sources": sources, "curves": curves}


def render(corpus: dict[str, Any]) -> str:
    """The JSON text written to public_curves.json (stable, so a rerun changes no byte).

    Indented for diffs, but each list of numbers on one line, so a curve reads as two lines.
    """
    text = json.dumps(corpus, indent=1)
    return NUMBER_LIST.sub(lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def main() -> None:
    corpus = build()
    OUT.write_text(render(corpus))
    print(f"{len(corpus['curves'])} curves from {len(corpus['sources'])} sources -> {OUT}")


if __name__ == "__main__":
    main()
