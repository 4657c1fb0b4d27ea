"""The records of dlperf.distributed.contracts: one codec each, a round trip through JSON,
stored summaries of today's shape still load, and a missing or unknown field is a clear
error; and the one crash hook every worker reads."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dlperf.distributed.contracts import (
    AllreduceSummary,
    ComputePhase,
    ContractError,
    MainPhase,
    PointRow,
    PointSummary,
    RankResult,
    WorkerSpec,
    read_ranks,
    write_ranks,
)
from dlperf.distributed.crash import CRASH_ENV, Crash
from dlperf.distributed.planning import Point
from dlperf.distributed.summary import add_relative, summarize, with_chunks
from tests.conftest import rank_result

SPEC = WorkerSpec(
    experiment={"model": {"name": "smallcnn"}, "run": {"seed": 0}},
    per_worker_batch=8,
    warmup_steps=1,
    steps=4,
    synthetic=True,
    backend="gloo",
    comm="allreduce",
    bucket_mb=None,
    strategy="ddp",
    gpus=0,
    threads=1,
    compute_split=True,
    writer=True,
    replicas=2,
    shape=(3, 16, 16),
    classes=10,
)

# A finished point's summary as `dlperf scale` stored it before the records were typed.
STORED = {
    "workers": 2, "nodes": 1, "ps": 0, "mode": "weak", "per_worker_batch": 8,
    "global_batch": 16, "step_time_s": 0.1, "step_time_min_s": 0.09, "step_time_max_s": 0.12,
    "compute_s": 0.08, "comm_exposed_s": 0.02, "sync_time_s": 0.02,
    "comm_exposed_ci95_s": 0.004, "throughput": 160.0, "throughput_per_worker": 80.0,
    "speedup": 1.8, "efficiency": 0.9, "grad_bytes": 400_000, "algbw_gbps": 0.4,
    "busbw_gbps": 0.4, "epoch_time_s": 9.0, "cost_per_epoch": None, "threads_per_worker": 1,
    "backend": "gloo", "comm": "allreduce", "strategy": "ddp", "bucket_mb": None,
    "timed_steps": 20, "wall_time_s": 2.0,
    "ddp_logging_s": {"backward_comm_time": 0.001}, "replica_max_diff": 0.0,
    "emulation": "single-host",
    "ranks": [{"rank": r, "host": "h", "wall_s": 2.0, "step_time_s": 0.1,
               "ddp_logging_ns": {"avg_backward_comm_time": 1_000_000}} for r in (0, 1)],
    "ring_predicted_s": 0.01, "ring_basis": "ring", "ring_error": -0.5,
    "overlap_predicted_s": None, "overlap_basis": None, "overlap_error": None,
    "throughput_mean": 159.0, "throughput_ci95": 3.0, "throughput_ci_method": "student_t",
    "chunks": 5,
}  # fmt: skip


def test_a_worker_spec_round_trips_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    SPEC.write(path)
    assert WorkerSpec.read(path) == SPEC
    assert json.loads(path.read_text())["shape"] == [3, 16, 16]
    capped = replace(SPEC, memory_cap_bytes=2**30, data_file="/d/train.npz")
    capped.write(path)
    assert WorkerSpec.read(path) == capped


def test_a_rank_result_round_trips_with_and_without_ddp(tmp_path: Path) -> None:
    ddp = rank_result(0, [0.1, 0.2], [0.05, 0.06], 8, world=2)
    ddp = replace(ddp, compute=replace(ddp.compute, grad_ready_s=(0.02, 0.01), grad_sizes=(4, 8)))
    keras = RankResult(
        1, "h", 7, 2, MainPhase((0.1, 0.2), 0.3, 16, 0.0, 40, fingerprint=(1.5, 2.5)), None
    )
    write_ranks(tmp_path / "result.json", [ddp, keras])
    assert read_ranks(tmp_path / "result.json") == [ddp, keras]
    stored = json.loads((tmp_path / "result.json").read_text())["ranks"]
    assert stored[1]["main"]["ddp"] is None and stored[1]["compute"] is None  # no fake "ddp": {}
    assert stored[0]["main"]["ddp"] == {
        "times_ns": {"avg_backward_comm_time": 1_000_000, "avg_forward_compute_time": 5_000_000},
        "reduced_bytes": 400_000,
    }


def test_a_summary_round_trips_and_todays_stored_shape_loads() -> None:
    ranks = [rank_result(r, [0.1] * 4, [0.08] * 4, 8, world=2) for r in range(2)]
    summary = summarize(Point(2, 8, 16, "allreduce", "ddp", None, "weak"), ranks, 1, 1,
                        "gloo", 1000, None)  # fmt: skip
    summary = add_relative(summary, None)
    assert PointSummary.from_dict(json.loads(json.dumps(summary.to_dict()))) == summary
    # The --synthetic figures are stored only where measured, as before.
    assert "throughput_mean" not in summary.to_dict()
    synthetic = with_chunks(summary, [0.1] * 4, 2)
    assert synthetic.to_dict()["chunks"] == 2
    assert PointSummary.from_dict(synthetic.to_dict()) == synthetic

    loaded = PointSummary.from_dict(STORED)
    assert (loaded.throughput, loaded.ranks[1].rank, loaded.world_size) == (160.0, 1, None)
    added = ("world_size", "efficiency_time", "cpu_wait_share", "cpu_contended", "reliable",
             "reliability_note",
             "rounds", "throughput_rounds", "speedup_rounds", "speedup_ci95")  # fmt: skip
    assert loaded.to_dict() == {**STORED, **dict.fromkeys(added)}
    older = {k: v for k, v in STORED.items() if not k.startswith(("ring", "overlap", "mode"))}
    assert PointSummary.from_dict(older).mode is None  # stored before the mode was


def test_a_stored_summary_reads_as_a_point_or_as_none() -> None:
    """The doctor reads stored summaries through PointSummary.stored: a point that failed
    before it was summarised stores none, and reads as None rather than an error."""
    assert PointSummary.stored(STORED) == PointSummary.from_dict(STORED)
    assert PointSummary.stored({}) is None
    assert PointSummary.stored({**STORED, "ranks": [{"rank": 0}]}) is None


def test_a_row_prints_as_before_on_every_node_finished_or_failed() -> None:
    """`dlperf scale --json`'s rows: the point and its launch, then its summary's figures
    (node 0) or its error (failed); in the order the untyped rows had, and they read back."""
    launch = {"run_id": 3, "workers": 2, "nodes": 1, "mode": "weak", "per_worker_batch": 8,
              "global_batch": 16, "comm": "allreduce", "strategy": "ddp", "bucket_mb": None,
              "worker_pids": [11, 12], "status": "finished"}  # fmt: skip
    finished = {**launch, **PointSummary.from_dict(STORED).to_dict()}
    failed = {**launch, "status": "failed", "out_of_memory": False, "error": "boom"}
    elsewhere = {**launch, "run_id": None}  # a finished point on a node but the first
    for data in (finished, failed, elsewhere):
        row = PointRow.from_dict(json.loads(json.dumps(data)))
        assert list(row.to_dict().items()) == list(data.items())
    assert PointRow.from_dict(finished).summary == PointSummary.from_dict(STORED)
    assert PointRow.from_dict(failed).summary is None


def test_an_allreduce_summary_reads_before_overlap_was_measured_and_not_when_failed() -> None:
    old = {"backend": "gloo", "workers": 2, "rows": [{"bytes": 4.0}], "ring_model": None}
    assert AllreduceSummary.stored(old) == AllreduceSummary("gloo", 2, [{"bytes": 4.0}], None)
    assert AllreduceSummary.stored({}) is None


@pytest.mark.parametrize(
    ("load", "data", "message"),
    [
        (WorkerSpec.from_dict, {k: v for k, v in vars(SPEC).items() if k != "steps"},
         "WorkerSpec: missing field(s) steps"),
        (WorkerSpec.from_dict, {**vars(SPEC), "stepz": 3}, "WorkerSpec: unknown field(s) stepz"),
        (RankResult.from_dict, {"rank": 0, "host": "h", "pid": 1, "main": {}},
         "RankResult: missing field(s) world_size"),
        (RankResult.from_dict, {"rank": 0, "host": "h", "pid": 1, "world_size": 1, "main": {}},
         "MainPhase: missing field(s) grad_bytes, replica_max_diff, samples, step_times_s, "
         "wall_s"),
        (MainPhase.from_dict, {"step_times_s": [], "wall_s": 0, "samples": 0,
                               "replica_max_diff": 0, "grad_bytes": 0, "ddp": {}},
         "DdpStats: missing field(s) reduced_bytes, times_ns"),
        (ComputePhase.from_dict, [0.1], "ComputePhase: expected an object, got list"),
        (PointSummary.from_dict, {**STORED, "status": "failed"},
         "PointSummary: unknown field(s) status"),
        (PointSummary.from_dict, {**STORED, "ranks": [{"rank": 0}]},
         "RankSummary: missing field(s) ddp_logging_ns, host, step_time_s, wall_s"),
    ],
)  # fmt: skip
def test_a_missing_or_unknown_field_is_a_clear_error(
    load: object, data: object, message: str
) -> None:
    with pytest.raises(ContractError) as e:
        load(data)  # type: ignore[operator]
    assert str(e.value) == message


def test_a_result_file_without_ranks_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text('{"rank": 0}')
    with pytest.raises(ContractError, match="expected an object with a list of ranks"):
        read_ranks(tmp_path / "result.json")


def test_the_crash_hook_has_one_meaning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CRASH_ENV, raising=False)
    assert Crash.from_env(1) == Crash()
    monkeypatch.setenv(CRASH_ENV, "1:3")
    assert (Crash.from_env(1), Crash.from_env(0)) == (Crash(3, False), Crash())
    Crash.from_env(1).at(2)
    with pytest.raises(RuntimeError, match=f"injected crash at step 3 \\({CRASH_ENV}\\)"):
        Crash.from_env(1).at(3)
    monkeypatch.setenv(CRASH_ENV, "1:2:kill")
    assert Crash.from_env(1) == Crash(2, True)
    monkeypatch.setenv(CRASH_ENV, "1:two")
    with pytest.raises(ValueError, match="expected RANK:STEP or RANK:STEP:kill"):
        Crash.from_env(1)
