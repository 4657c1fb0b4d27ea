"""benchmarks/data/public_curves.json: real logged curves from public repositories, as extracted.

The corpus is data the predictor is judged on out of sample, so it must be exactly what its
script extracts from the committed raw logs, and every curve must carry where it came from.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).parents[2] / "benchmarks"
CORPUS = BENCH / "data" / "public_curves.json"
LOGS = BENCH / "data" / "public_logs"

# Issue 40 asks for 100 curves from 6 sources; the floors follow what is committed (112 of 48),
# so a lost file fails.
MIN_CURVES = 112
MIN_SOURCES = 48


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_public_curves", BENCH / "make_public_curves.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script()


@pytest.fixture(scope="module")
def corpus() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CORPUS.read_text())
    return data


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((LOGS / "SOURCES.json").read_text())
    return data


def test_script_reproduces_the_committed_corpus_byte_for_byte(script: ModuleType) -> None:
    assert script.render(script.build(LOGS)) == CORPUS.read_text()


def test_raw_logs_are_whole_files_as_read(manifest: dict[str, Any]) -> None:
    # The character count the search tool reported for each file: a truncated or edited copy
    # (a dropped line, a retyped number of another length) shows here.
    for source_id, source in manifest.items():
        for name, file in source["files"].items():
            path = LOGS / source_id / name
            assert path.is_file(), path
            with path.open(newline="") as f:  # count a CRLF file's CR too, as the source did
                assert len(f.read()) == file["chars"], path
    on_disk = {p.relative_to(LOGS).as_posix() for p in LOGS.glob("*/*")}
    listed = {f"{s}/{n}" for s, source in manifest.items() for n in source["files"]}
    assert on_disk == listed


def test_enough_curves_from_enough_independent_sources(corpus: dict[str, Any]) -> None:
    assert len(corpus["curves"]) >= MIN_CURVES
    used = {c["source"] for c in corpus["curves"].values()}
    assert len(used) >= MIN_SOURCES
    owners = {corpus["sources"][s]["repo"].split("/")[0].lower() for s in used}
    assert len(owners) == len(used), "two sources share an owner: not independent"


def test_every_source_names_repo_url_licence_and_what(corpus: dict[str, Any]) -> None:
    for source_id, source in corpus["sources"].items():
        owner, name = source["repo"].split("/")
        assert source_id == f"{owner}__{name}"
        assert source["url"] == f"https://github.com/{source['repo']}"
        assert source["licence"].strip() and source["what"].strip()


def test_every_curve_is_traceable_and_well_formed(corpus: dict[str, Any]) -> None:
    for curve_id, c in corpus["curves"].items():
        assert c["source"] in corpus["sources"], curve_id
        assert re.fullmatch(r"[0-9a-f]{40}", c["commit"]), curve_id
        assert c["path"] and c["model"] and c["dataset"], curve_id
        assert c["optimizer"] in {"sgd", "adam", "adamw", "rmsprop", "other"}, curve_id
        assert c["schedule"] in {
            "constant", "step", "cosine", "warm-restarts", "one-cycle", "linear", "other"
        }, curve_id  # fmt: skip
        assert isinstance(c["warmup"], bool), curve_id
        assert c["val_size"] is None or (isinstance(c["val_size"], int) and c["val_size"] > 0)
        assert c["metric"] in {"val_acc1", "val_loss"}, curve_id
        epochs, values = c["epochs"], c["values"]
        assert len(epochs) == len(values) >= 10, curve_id
        assert all(b > a for a, b in itertools.pairwise(epochs)), curve_id
        assert epochs[0] >= 1, curve_id
        assert all(math.isfinite(v) for v in values), curve_id
        if c["metric"] == "val_acc1":
            assert all(0.0 <= v <= 1.0 for v in values), curve_id
        else:
            assert all(v >= 0.0 for v in values), curve_id


def test_no_run_is_counted_twice(corpus: dict[str, Any]) -> None:
    # Deterministic reruns leave identical logs (yaswanth20052's train4-train8); one is kept.
    seen: dict[tuple[float, ...], str] = {}
    for curve_id, c in corpus["curves"].items():
        key = tuple(c["values"])
        assert key not in seen, f"{curve_id} repeats {seen[key]}"
        seen[key] = curve_id


def test_a_stated_validation_size_matches_the_logged_counts(corpus: dict[str, Any]) -> None:
    # On n images accuracy is k/n: a wrong val_size (or a mistyped value) breaks that, to the
    # log's rounding (at most 5 decimals of a fraction, 2 of a percent).
    for curve_id, c in corpus["curves"].items():
        n = c["val_size"]
        if n is None or c["metric"] != "val_acc1":
            continue
        for v in c["values"]:
            assert abs(v * n - round(v * n)) <= n * 5e-5, (curve_id, v, n)


def test_percent_logs_become_fractions(script: ModuleType) -> None:
    runs = script.rows_loss_then_acc("2.5,1.5\n47.53,53.95\n", {})
    file = {"path": "log.csv", "commit": "0" * 40, "percent": True}
    spec = {
        "id": "x", "model": "m", "dataset": "d", "optimizer": "adam", "schedule": "cosine",
        "warmup": False, "val_size": 10000, "metric": "val_acc1",
    }  # fmt: skip
    _, curve = script.curve_from("o__r", "log.csv", file, spec, runs)
    assert curve["epochs"] == [1, 2]
    assert curve["values"] == [0.4753, 0.5395]


def test_free_text_logs_split_into_runs(script: ModuleType) -> None:
    text = "== resnet-18 ==\nepoch 0 acc 10.5\nepoch 1 acc 20.25\n== vgg ==\nepoch 0 acc 9\n"
    spec = {
        "run": r"== (?P<run>\S+) ==",
        "epoch_offset": 1,
        "patterns": {"val_acc1": r"epoch (?P<epoch>\d+) acc (?P<value>[\d.]+)"},
    }
    runs = script.regex_lines(text, spec)
    assert runs == {
        "resnet-18": {"val_acc1": ([1, 2], [10.5, 20.25])},
        "vgg": {"val_acc1": ([1], [9.0])},
    }
