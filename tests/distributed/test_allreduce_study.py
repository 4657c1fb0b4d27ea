"""dlperf.distributed.allreduce_study with a fake torchrun (no worker starts): what is
refused before anything is stored, each worker count stored as a run of one study with the
ring model fitted over all of them (recovering the α and B the fake measured with), a
failed worker count, the most contended window's mark, and the table and lines printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dlperf.distributed import allreduce_study
from dlperf.distributed.allreduce import ring_time
from dlperf.distributed.allreduce_study import (
    AllreduceFailure,
    AllreduceStudy,
    lines,
    run_allreduce_study,
    table,
)
from dlperf.distributed.launch import Launch
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import Logged

ALPHA, BANDWIDTH = 20e-6, 2e9
SIZES = [1024, 2**20, 2**24]


def contention(wait: float) -> dict[str, Any]:
    return {"wall_s": 1.0, "cpu_wait_share": wait, "source": "schedstat"}


@pytest.fixture
def torchrun(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, list[str], dict[str, str]]]:
    """run_torchrun as a fake: 3 workers fail; the others 'measure' the ring model exactly,
    the 4-worker count contended."""
    calls: list[tuple[int, list[str], dict[str, str]]] = []

    def fake(directory: Path, n: int, module: str, args: list[str], rdzv: object = None,
             env: dict[str, str] | None = None) -> Launch:  # fmt: skip
        assert module == "dlperf.distributed.allreduce"
        calls.append((n, args, env or {}))
        if n == 3:
            return Launch(1, [], "worker rank 2 failed: boom")
        wait = 0.3 if n == 4 else 0.0
        rows = [{"bytes": s, "time_s": ring_time(n, s, ALPHA, BANDWIDTH), "algbw_gbps": 1.0,
                 "busbw_gbps": 1.5, "cpu_wait_share": wait} for s in SIZES]  # fmt: skip
        overlap = [{"bytes": 2**20, "allreduce_s": 0.01, "compute_lost_s": 0.002 * n}]
        result = {"rows": rows, "overlap": overlap,
                  "contention": contention(wait)}  # fmt: skip
        out = Path(args[args.index("--out") + 1])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result))
        return Launch(0, [1], None)

    monkeypatch.setattr(allreduce_study, "run_torchrun", fake)
    monkeypatch.setattr(allreduce_study, "usable_cores", lambda: 8)
    return calls


def test_each_worker_count_is_a_run_of_one_study_with_the_ring_model_of_all(
    store: RunStore, tmp_path: Path, torchrun: list[Any]
) -> None:
    log = Logged()
    found = run_allreduce_study(store, [4, 2, 3, 2], "1KB..16MB", "gloo", tmp_path, iters=7,
                                warmup=1, reporter=log)  # fmt: skip
    assert [n for n, _, _ in torchrun] == [2, 3, 4]  # each count once, fewest first
    _, args, env = torchrun[0]
    assert args[:6] == ["--sizes", "1KB..16MB", "--iters", "7", "--warmup", "1"]
    assert args[args.index("--threads") + 1] == "4" and env == {"OMP_NUM_THREADS": "4"}
    assert found.ring_model is not None and found.fit_error is None
    assert found.ring_model["alpha_s"] == pytest.approx(ALPHA, rel=1e-6)
    assert found.ring_model["bandwidth_bytes_per_s"] == pytest.approx(BANDWIDTH, rel=1e-6)
    assert found.failures == [AllreduceFailure(3, "worker rank 2 failed: boom")]
    assert [r["workers"] for r in found.rows] == [2, 2, 2, 4, 4, 4]
    assert found.overlap_cost == {2: pytest.approx(0.4), 4: pytest.approx(0.8)}
    runs = {r.config["workers"]: r for r in store.list_runs(kind="allreduce")}
    assert {n: r.status for n, r in runs.items()} == {2: "finished", 3: "failed", 4: "finished"}
    assert {r.study_id for r in runs.values()} == {found.study_id}
    assert runs[4].summary["ring_model"] == found.ring_model
    assert runs[4].summary["overlap_cost"] == pytest.approx(0.8)
    assert store.last_step(runs[2].id, "allreduce/time_s") == 2**24
    assert not found.reliable and found.cpu_wait_share == 0.3
    assert found.reliability_note is not None and found.reliability_note.startswith("contended")
    assert log.lines == [f"unreliable: 4 workers: {found.reliability_note}"]


def test_one_worker_count_fits_no_ring_model_and_says_why(
    store: RunStore, tmp_path: Path, torchrun: list[Any]
) -> None:
    found = run_allreduce_study(store, [1], "1KB,1MB", "gloo", tmp_path)
    assert found.ring_model is None
    assert found.fit_error is not None and "at least 2 all-reduce measurements" in found.fit_error
    assert found.reliable and lines(found)[0].startswith("overlap cost at 1 worker: 0.20 s")


class NoStore:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the store was used ({name}) before the input was checked")


@pytest.mark.parametrize(
    ("workers", "sizes", "message"),
    [
        ([2], "64MB..1KB", "size range '64MB..1KB' runs backwards"),
        ([], "1KB", "--workers needs positive counts"),
        ([0, 2], "1KB", "--workers needs positive counts"),
        ([9], "1KB", r"9 workers but this host has 8 usable cores \(use fewer workers or"),
    ],
)
def test_bad_input_is_refused_before_anything_is_stored_or_launched(
    tmp_path: Path, torchrun: list[Any], workers: list[int], sizes: str, message: str
) -> None:
    with pytest.raises(UserError, match=message):
        run_allreduce_study(NoStore(), workers, sizes, "gloo", tmp_path)  # type: ignore[arg-type]
    assert torchrun == []


def study(**given: Any) -> AllreduceStudy:
    base: dict[str, Any] = {
        "study_id": 4, "backend": "gloo", "rows": [], "ring_model": None, "fit_error": None,
        "overlap": [], "overlap_cost": {}, "failures": [], "cpu_wait_share": None,
        "contention": None, "reliable": True, "reliability_note": None,
    }  # fmt: skip
    return AllreduceStudy(**base | given)


def test_the_table_in_microseconds_with_the_cpu_wait() -> None:
    rows = [{"workers": 2, "bytes": 1024, "time_s": 25e-6, "algbw_gbps": 0.04,
             "busbw_gbps": 0.04, "cpu_wait_share": 0.125},
            {"workers": 2, "bytes": 2048, "time_s": 3e-5, "algbw_gbps": 0.07,
             "busbw_gbps": 0.07}]  # fmt: skip
    shown = table(study(rows=rows))
    assert shown.title == "all-reduce study 4 (gloo)"
    assert shown.rows[0][:3] == [2, 1024, pytest.approx(25.0)] and shown.rows[0][-1] == "12%"
    assert shown.rows[1][-1] is None  # a row measured before the CPU wait was


def test_the_lines_give_the_ring_model_and_each_overlap_cost() -> None:
    ring = {"alpha_s": 2.5e-5, "bandwidth_bytes_per_s": 1.25e9, "rmse_pct": 3.21, "n_points": 6}
    overlap = [{"workers": 2, "bytes": 2**20}, {"workers": 2, "bytes": 2**22},
               {"workers": 4, "bytes": 2**19}]  # fmt: skip
    said = lines(study(ring_model=ring, overlap=overlap, overlap_cost={2: 0.125, 4: 0.5}))
    assert said == [
        "ring model T = 2(n-1)a + 2(n-1)/n S/B: a = 25.0 us, B = 1.25 GB/s, rms error 3.2% "
        "over 6 points",
        "overlap cost at 2 workers: 0.12 s of compute lost per s of all-reduce in flight "
        "(measured at 1 MiB, 4 MiB)",
        "overlap cost at 4 workers: 0.50 s of compute lost per s of all-reduce in flight "
        "(measured at 0.5 MiB)",
    ]


def test_the_lines_count_one_worker_in_the_singular() -> None:
    overlap = [{"workers": 1, "bytes": 2**20}, {"workers": 3, "bytes": 2**20}]
    said = lines(study(overlap=overlap, overlap_cost={1: 0.0, 3: 0.25}))
    assert [line.split(":")[0] for line in said] == [
        "overlap cost at 1 worker",
        "overlap cost at 3 workers",
    ]
