"""Cases of the break-it round of 2026-11-25 (docs/faults.md) that are not bad input: files
a user's tools write that dlperf must read as they are meant, through the real entry point."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from dlperf.store import RunStore
from tests.conftest import CliResult

BOM = b"\xef\xbb\xbf"  # Excel's "CSV UTF-8" starts every file with it


def test_a_speed_table_with_a_byte_order_mark_is_read(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    rows = [f"{w},{p},256,{0.5 / w + 0.01 + 0.02 * w / p:.4f}" for w in (1, 2, 4) for p in (1, 2)]
    text = "workers,ps,global_batch,step_time_s\n" + "\n".join(rows) + "\n"
    (tmp_path / "speed.csv").write_bytes(BOM + text.replace("\n", "\r\n").encode())
    result = cli("converge", "speed", "fit", "--csv", "speed.csv", "--model", "optimus-sync")
    assert result.code == 0, result.err  # before: has no column 'workers' (did you mean ...)
    assert "6 points" in result.out or "theta0" in result.out, result.out


def test_a_jobs_file_with_a_byte_order_mark_is_read(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "curve.json").write_bytes(
        BOM + b'{"metric": "loss", "beta0": 0.01, "beta1": 1.0, "beta2": 0.1, "last_step": 10}'
    )
    speed = (
        '{"model": "optimus-sync", "params": {"theta0": 0.01, "theta1": 0.01, "theta2": 0.01,'
        ' "theta3": 0.01, "theta4": 0.01}, "error_pct": 0.0, "max_error_pct": 0.0,'
        ' "n_points": 6, "converged": true, "message": "", "typical_batch": 256.0,'
        ' "typical_local_batch": 128.0}'
    )
    (tmp_path / "speed.json").write_bytes(BOM + speed.encode())
    jobs = '[[job]]\nname = "a"\ncurve = "curve.json"\nspeed = "speed.json"\ntarget = 0.5\n'
    (tmp_path / "jobs.toml").write_bytes(BOM + jobs.encode())
    result = cli("converge", "plan", "--cluster", "jobs.toml", "--gpus", "2")
    assert result.code == 0, result.err  # before: jobs.toml is not valid TOML (line 1, col 1)
    assert "a" in result.out


def test_an_input_too_large_to_allocate_is_one_line(cli: Callable[..., CliResult]) -> None:
    """`predict --measure` says what it prepares first, then the one error line."""
    result = cli("predict", "smallcnn", "--measure", "--input", "3,99999,99999")
    assert result.code == 2, result.err  # before: a 44-line RuntimeError from the allocator
    assert "Traceback" not in result.err
    last = result.err.strip().splitlines()[-1]
    assert last.startswith("error: an input batch of 1x3x99999x99999 (111.8 GiB) does not fit")


def test_a_tag_value_with_an_escape_or_an_undecodable_byte_is_refused(
    cli: Callable[..., CliResult], store: RunStore
) -> None:
    run = store.create_run("r", "run", {})
    for value in ("x\x1b[31mred", "\udcff"):  # an ANSI colour; the byte 0xff from argv
        result = cli("runs", "tag", str(run), f"a={value}")
        # before: the escape stored and printed raw; the byte a 80-line UnicodeEncodeError
        assert result.code == 2, result.err
        assert result.err.startswith(f"error: runs tag {f'a={value}'!r}: the value holds ")
    assert store.get_run(run).tags == {}
    assert cli("runs", "tag", str(run), "note=ünïcödé ✓").code == 0
    assert store.get_run(run).tags == {"note": "ünïcödé ✓"}


def test_a_sweep_file_whose_name_is_not_utf8_runs(
    cli: Callable[..., CliResult], store: RunStore, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """A Latin-1 file name (the byte 0xff) reaches Python as a lone surrogate, which the store
    cannot encode: the study is named with U+FFFD in its place."""
    tiny_exp(epochs=1, name="base.toml")
    sweep = 'base = "base.toml"\n[set]\n"data.limit" = 64\n[grid]\n"train.lr" = [0.1]\n'
    (tmp_path / os.fsdecode(b"s\xff.toml")).write_text(sweep)
    result = cli("sweep", os.fsdecode(b"s\xff.toml"))
    assert result.code == 0, result.err  # before: a 71-line UnicodeEncodeError
    (run,) = store.list_runs()
    assert run.name.startswith("s\ufffd") and run.status == "finished"


def test_an_experiment_file_whose_name_is_not_utf8_runs(
    cli: Callable[..., CliResult], store: RunStore, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """The run's default name is the file's stem: bytes 0xff 0xfe become U+FFFD, as a sweep's."""
    name = os.fsdecode(b"\xff\xfe.toml")
    tiny_exp(epochs=1, name=name)
    result = cli("run", str(tmp_path / name), "--set", "data.limit=64")
    assert result.code == 0, result.err  # before: an 85-line UnicodeEncodeError
    (run,) = store.list_runs()
    assert run.name == "\ufffd\ufffd" and run.status == "finished"
    # An error naming such a file is one line too, the bytes shown escaped.
    (tmp_path / name).write_text("[model\n")
    bad = cli("run", str(tmp_path / name))
    assert bad.code == 2 and "\\udcff\\udcfe.toml" in bad.err, bad.err
    assert len(bad.err.strip().splitlines()) <= 2


def test_a_store_whose_schema_version_is_garbled_is_refused_in_one_line(
    cli: Callable[..., CliResult], store: RunStore, tmp_path: Path
) -> None:
    store.create_run("r", "run", {})
    store.engine.dispose()
    with sqlite3.connect(tmp_path / "dlperf.db") as conn:
        conn.execute("UPDATE meta SET value = 'abc' WHERE key = 'schema_version'")
    before = (tmp_path / "dlperf.db").read_bytes()
    for args in (("runs", "list"), ("runs", "tag", "1", "a=b")):
        result = cli(*args)
        assert result.code == 2, result.err  # before: a 55-line ValueError from int()
        assert result.err.startswith("error: run store ") and "schema version 'abc'" in result.err
        assert len(result.err.strip().splitlines()) == 1
    assert (tmp_path / "dlperf.db").read_bytes() == before
