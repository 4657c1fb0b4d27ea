"""Human tables are whole: off a terminal a table takes the width it needs; COLUMNS is
honoured by wrapping cells between words, or, when even the longest words do not fit side
by side, by one block of lines per row. No name is ever cut (`dlperf runs list` here)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

LONG = "allreduce-" + "-".join(["mirrored", "hierarchical", "nccl", "variant"] * 4)  # 149
NAME = "allreduce-mirrored-hierarchical-nccl-variant"  # 44


def store_runs(store: RunStore, *names: str) -> list[int]:
    config = {"model": {"name": "smallcnn"}, "data": {"name": "digits"}}
    ids = [store.create_run(name, "run", config, "0" * 16, None, None) for name in names]
    for run_id in ids:
        store.finish_run(run_id)
    return ids


def table_lines(result: CliResult) -> list[str]:
    assert result.code == 0, result.err
    return result.out.rstrip("\n").splitlines()


def test_off_a_terminal_a_table_takes_the_width_it_needs(
    cli: Callable[..., CliResult], store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    store_runs(store, LONG, "short")
    lines = table_lines(cli("runs", "list", "--limit", "2"))
    assert len(lines) == 4  # header, rule, one line per run: nothing wrapped
    assert max(len(line) for line in lines) > 160  # not squeezed into a log's 160
    assert any(LONG in line for line in lines) and "…" not in "".join(lines)


def test_columns_is_honoured_by_wrapping_between_words(
    cli: Callable[..., CliResult], store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "150")
    (run_id,) = store_runs(store, NAME)
    note = "measured on a busy two-core laptop while three sweeps ran beside it"
    store.set_tags(run_id, {"note": note})
    lines = table_lines(cli("runs", "list"))
    assert max(len(line) for line in lines) <= 150 and "…" not in "".join(lines)
    assert len(lines) > 3  # the tags wrapped onto more lines...
    assert any(NAME in line for line in lines)  # ...and the name kept its width
    body = lines[1 + next(i for i, line in enumerate(lines) if line.startswith("━")) :]
    tags = " ".join(line.split("│")[-1].strip() for line in body)
    assert tags == f"note={note}"  # between words, every word whole


def test_narrower_than_the_longest_words_each_row_is_a_block(
    cli: Callable[..., CliResult], store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    store_runs(store, NAME, "second")  # the name fits beside the column names
    lines = table_lines(cli("runs", "list"))
    assert max(len(line) for line in lines) <= 60 and "…" not in "".join(lines)
    fields = [line.split(None, 1) for line in lines if line.strip()]
    assert ["name", "second"] in [[k, v.strip()] for k, v in fields]
    assert ["name", NAME] in [[k, v.strip()] for k, v in fields]
    assert lines[0] == "" and lines.count("") == 2  # a blank line before each run's block
