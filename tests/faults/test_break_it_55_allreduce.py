"""Break-it round 55, fixer G2: `dlperf scale allreduce`'s message sizes and its stop.

- T1 C2 (message): `--sizes 1KB,1KB` (or `1KB,1024B`) measured one size twice, stored it as
  two rows and fitted the ring model to it twice; `3B` was measured and stored as 4 bytes (one
  float32 element), without a word. Now `parse_sizes` refuses a size given twice (after
  parsing to bytes) and a size that is not a whole number of the dtype's elements, in one
  line, exit 2, before anything is stored or launched.
- T1 C3 (message): `--sizes 100GB` launched its workers, stored an empty study and exited 1
  with torch elastic's "To enable traceback see ..." (the reason only in torchrun.log). Now a
  largest size that the workers' memory cannot hold (this machine's memory over the workers,
  a GPU's, or a set address-space limit) is refused up front in one line, exit 2; and a
  worker that still runs out allocating a message leaves one line naming the size and the
  limit, which the study says as the worker count's failure.
- T1 C4 (message): a stopped `scale allreduce` exited 143 (its run marked killed) without a
  word. Now it says "allreduce study N stopped; an allreduce study is not continued: run the
  command again to measure it anew", as `scale run` says it; one stop once every worker
  count is stored does not unsay it (exit 0).

torchrun is faked (no worker starts) except where the address-space limit is the point: one
worker process, without torchrun, under `ulimit -v`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.distributed import allreduce, allreduce_study
from dlperf.distributed.allreduce import parse_sizes
from dlperf.distributed.launch import Launch, free_port
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_48_sweep_stop import stopped_as_printed

TRACEBACK_HINT = (
    "worker rank 0 failed (exit code 1): To enable traceback see: "
    "https://pytorch.org/docs/stable/elastic/errors.html"
)


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """run_torchrun as a fake that measures each size in 1 ms; the args of each launch."""
    calls: list[list[str]] = []

    def fake(directory: Path, n: int, module: str, args: list[str], **_: Any) -> Launch:
        calls.append(args)
        sizes = parse_sizes(args[args.index("--sizes") + 1])
        rows = [{"bytes": s, "time_s": 1e-3, "median_s": 1e-3, "algbw_gbps": 1.0,
                 "busbw_gbps": 1.0, "cpu_wait_share": 0.0} for s in sizes]  # fmt: skip
        out = Path(args[args.index("--out") + 1])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"rows": rows, "overlap": [], "contention": None}))
        return Launch(0, [1], None)

    monkeypatch.setattr(allreduce_study, "run_torchrun", fake)
    monkeypatch.setattr(allreduce_study, "usable_cores", lambda: 8)
    return calls


# T1 C2 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("1KB,1KB", "message size 1024 bytes is given twice (got '1KB,1KB')"),
        ("1KB,1024B", "message size 1024 bytes is given twice (got '1KB,1024B')"),
        ("8B,1KB,8,8B", "message size 8 bytes is given 3 times (got '8B,1KB,8,8B')"),
    ],
)
def test_a_size_given_twice_is_refused(text: str, said: str) -> None:
    with pytest.raises(UserError) as err:
        parse_sizes(text)
    assert err.value.message == said
    assert err.value.hint and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "dtype", "said"),
    [
        ("3B", "float32", "message size '3B' is not a whole number of float32 elements"),
        ("1KB,6B", "float32", "message size '6B' is not a whole number of float32 elements"),
        ("2B", "float32", "message size '2B' is not a whole number of float32 elements"),
        ("3B..20B", "float32", "message size '3B' is not a whole number of float32 elements"),
        ("4B", "float64", "message size '4B' is not a whole number of float64 elements"),
    ],
)
def test_a_size_of_part_of_an_element_is_refused(text: str, dtype: str, said: str) -> None:
    with pytest.raises(UserError) as err:
        parse_sizes(text, dtype)
    assert err.value.message.startswith(said), err.value.message
    assert err.value.hint and "\n" not in str(err.value)


def test_whole_elements_of_each_dtype_are_taken() -> None:
    assert parse_sizes("6B", "float16") == [6]
    assert parse_sizes("4B..20B") == [4, 8, 16]  # the bound need not be a whole element
    assert parse_sizes("8B,1KB") == [8, 1024]


@pytest.mark.parametrize("sizes", ["1KB,1KB", "1KB,1024B", "3B"])
def test_the_command_refuses_them_before_anything_is_stored(
    cli: Callable[..., CliResult], store: RunStore, launched: list[list[str]], sizes: str
) -> None:
    r = cli("scale", "allreduce", "--workers", "1", "--sizes", sizes, "--iters", "1")
    assert r.code == 2, (r.code, r.err)  # before: 0, a row measured twice or 4 bytes for 3
    assert r.err.startswith("error: message size ") and r.err.count("\n") == 1, r.err
    assert launched == [] and store.list_runs(kind="allreduce") == []


# T1 C3 ----------------------------------------------------------------------------------


def test_a_size_beyond_the_machines_memory_is_refused_up_front(
    cli: Callable[..., CliResult],
    store: RunStore,
    launched: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(allreduce, "machine_memory", lambda: 2**30)
    r = cli("scale", "allreduce", "--workers", "2", "--sizes", "1KB,1GB", "--iters", "1")
    assert r.code == 2, (r.code, r.err)  # before: 1, torch elastic's hint, an empty study
    assert r.err == (
        "error: a message of 1.0 GiB on each of 2 workers takes 2.0 GiB, more than this "
        "machine's 1.0 GiB of memory (give smaller --sizes or fewer --workers)\n"
    )
    assert launched == [] and store.list_runs(kind="allreduce") == []
    # what fits is measured
    assert cli("scale", "allreduce", "--workers", "1", "--sizes", "1KB..512MB").code == 0


def test_a_size_beyond_the_address_space_limit_is_refused_up_front(
    cli: Callable[..., CliResult],
    store: RunStore,
    launched: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limit = 4_000_000 * 1024  # ulimit -v 4000000
    monkeypatch.setattr(allreduce, "address_limit", lambda: limit)
    monkeypatch.setattr("dlperf.errors.address_limit", lambda: limit)
    r = cli("scale", "allreduce", "--workers", "1", "--sizes", "4GB", "--iters", "1")
    assert r.code == 2, (r.code, r.err)
    assert r.err == (
        "error: a message of 4.0 GiB is more than the 3.8 GiB of address space a worker may "
        "map (a memory limit, ulimit -v 4000000 may be too low)\n"
    )
    assert launched == [] and store.list_runs(kind="allreduce") == []


def test_a_worker_that_runs_out_says_so_in_one_line_naming_the_size(tmp_path: Path) -> None:
    """One worker process (no torchrun: its env is torchrun's for one rank) under `ulimit -v
    4000000` asked for a message larger than the limit: its one line, in `rank-0.failure`."""
    env = os.environ | {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}  # fmt: skip
    worker = [sys.executable, "-m", "dlperf.distributed.allreduce", "--sizes", "1KB,4GB"]
    worker += ["--iters", "1", "--warmup", "0", "--backend", "gloo", "--out"]
    worker.append(str(tmp_path / "result.json"))
    command = f"ulimit -v 4000000 && exec {' '.join(worker)}"
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    said = (tmp_path / "rank-0.failure").read_text()
    assert said == (
        "out of memory allocating a message of 4.0 GiB: an allocation of 4.0 GiB failed "
        "(a memory limit, ulimit -v 4000000 may be too low)"
    )
    assert (tmp_path / "rank-0.error").read_text() == said + "\n"
    assert not (tmp_path / "result.json").exists()


def test_the_study_says_the_workers_line_not_torchs_hint(
    cli: Callable[..., CliResult], store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = "out of memory allocating a message of 2.0 GiB: an allocation of 2.0 GiB failed"

    def fake(directory: Path, n: int, module: str, args: list[str], **_: Any) -> Launch:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "rank-0.failure").write_text(line)
        (directory / "rank-0.error").write_text(line + "\n")
        return Launch(1, [], TRACEBACK_HINT)

    monkeypatch.setattr(allreduce_study, "run_torchrun", fake)
    r = cli("scale", "allreduce", "--workers", "1", "--sizes", "2GB", "--iters", "1")
    assert r.code == 1, (r.code, r.err)
    assert f"1 worker failed: {line}\n" in r.err, r.err  # before: torch elastic's hint
    assert "To enable traceback" not in r.err
    [run] = store.list_runs(kind="allreduce")
    assert (run.status, run.error) == ("failed", line)


# T1 C4 ----------------------------------------------------------------------------------


def test_a_stopped_allreduce_says_which_study_stopped(
    cli: Callable[..., CliResult], store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stopped(directory: Path, n: int, module: str, args: list[str], **_: Any) -> Launch:
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, as the workers measure
        raise AssertionError("the stop did not stop it")

    monkeypatch.setattr(allreduce_study, "run_torchrun", stopped)
    monkeypatch.setattr(allreduce_study, "resolve_backend", lambda backend: "gloo")
    r = cli("scale", "allreduce", "--workers", "1", "--sizes", "1KB", "--iters", "1")
    study = store.find_study("allreduce gloo", "allreduce")
    assert r.code == 143, (r.code, r.err)
    assert r.err.endswith(  # before: nothing said
        f"allreduce study {study} stopped; an allreduce study is not continued: run the "
        "command again to measure it anew\n"
    ), r.err
    assert [run.status for run in store.list_runs(kind="allreduce")] == ["killed"]


@pytest.mark.parametrize("stops", [1, 2])
def test_a_stop_once_every_count_is_stored_does_not_unsay_it(
    cli: Callable[..., CliResult],
    launched: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
    stops: int,
) -> None:
    stopped_as_printed(monkeypatch, stops)
    r = cli("scale", "allreduce", "--workers", "1", "--sizes", "1KB,2KB", "--json")
    assert "stopped" not in r.err, r.err
    if stops == 1:
        assert r.code == 0, (r.code, r.err)
        assert [row["bytes"] for row in json.loads(r.out)["rows"]] == [1024, 2048]
    else:
        assert (r.code, r.out) == (143, ""), (r.code, r.out, r.err)


def test_each_worker_counts_run_is_named_in_words(
    cli: Callable[..., CliResult], launched: list[list[str]], store: RunStore
) -> None:
    # round 55's Left: the one-worker run was stored as "allreduce gloo 1 workers"
    r = cli("scale", "allreduce", "--workers", "1,2", "--sizes", "1KB", "--backend", "gloo")
    assert r.code == 0, r.err
    names = sorted(run.name for run in store.list_runs(kind="allreduce"))
    assert names == ["allreduce gloo 1 worker", "allreduce gloo 2 workers"]
