"""Profiler traces: a run's profiled window (engine.profiler), what a trace says (dlperf.traces),
`dlperf runs trace`, and the trace read back by TensorBoard's profiler plugin."""

from __future__ import annotations

import gzip
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.errors import UserError
from dlperf.traces import load, summarise
from tests.conftest import CliResult


def _x(name: str, cat: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "pid": 7, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


# One 100 µs step, worked out by hand: forward [0, 40) and backward [40, 90) ranges; operator
# A [0, 30) holds B [5, 15) (A's self time 20, B's 10); C [40, 70) in the backward; gloo's
# all-reduce [50, 80) on a thread of its own. Computation [0, 30) ∪ [40, 70), communication
# [50, 80): both at once 20 (50-70), computation only 60 - 20 = 40, communication only
# 30 - 20 = 10, idle 100 - 70 = 30.
CPU_STEP = [
    _x("ProfilerStep#7", "user_annotation", 0, 100),
    _x("dlperf::forward", "user_annotation", 0, 40),
    _x("dlperf::backward", "user_annotation", 40, 50),
    _x("aten::A", "cpu_op", 0, 30),
    _x("aten::B", "cpu_op", 5, 10),
    _x("aten::C", "cpu_op", 40, 30),
    _x("gloo:all_reduce", "user_annotation", 50, 30, tid=2),
    {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "main"}},
]


def test_self_times_phases_and_overlap_worked_by_hand(tmp_path: Path) -> None:
    s = summarise(_write(tmp_path / "rank0.pt.trace.json.gz", CPU_STEP))
    assert (s.steps, s.device, s.step_us) == (1, "cpu", 100)
    assert s.phases_us == {"forward": 40, "backward": 50}
    ops = {o.name: o for o in s.operators}
    assert [o.name for o in s.operators] == ["aten::C", "aten::A", "aten::B"]
    assert (ops["aten::A"].cpu_self_us, ops["aten::B"].cpu_self_us) == (20, 10)
    assert ops["aten::C"].by_phase_us == {"backward": 30}
    assert ops["aten::A"].by_phase_us == {"forward": 20}
    (o,) = s.overlap
    assert (o.compute_only_us, o.comm_only_us, o.both_us, o.idle_us) == (40, 10, 20, 30)
    assert o.compute_only_us + o.comm_only_us + o.both_us + o.idle_us == o.step_us


def test_gpu_time_goes_to_the_operator_that_launched_it(tmp_path: Path) -> None:
    # On a GPU the kernels are the work: a convolution kernel [10, 50) and an NCCL kernel
    # [30, 60) overlap for 20 µs; each is tied by its correlation id to the runtime call
    # inside the operator that launched it.
    events = [
        _x("ProfilerStep#1", "user_annotation", 0, 100),
        _x("aten::conv", "cpu_op", 0, 8),
        _x("cudaLaunchKernel", "cuda_runtime", 2, 1, correlation=11),
        _x("c10d::allreduce_", "cpu_op", 8, 4),
        _x("cudaLaunchKernel", "cuda_runtime", 9, 1, correlation=12),
        _x("implicit_gemm", "kernel", 10, 40, tid=99, correlation=11),
        _x("ncclDevKernel_AllReduce", "kernel", 30, 30, tid=98, correlation=12),
    ]
    s = summarise(_write(tmp_path / "t.json.gz", events))
    ops = {o.name: o for o in s.operators}
    assert s.device == "cuda"
    assert (ops["aten::conv"].cuda_us, ops["c10d::allreduce_"].cuda_us) == (40, 30)
    (o,) = s.overlap
    assert (o.compute_only_us, o.comm_only_us, o.both_us, o.idle_us) == (20, 10, 20, 50)


def test_the_gpus_copies_of_the_phase_ranges_neither_count_nor_hide_the_host_phase(
    tmp_path: Path,
) -> None:
    """On CUDA, Kineto writes each dlperf::<phase> range twice: on the host (user_annotation)
    and again on the GPU's timeline, spanning the phase's kernels (gpu_user_annotation), later
    than the host's. Seen on an H200 (2026-11-26): the copies doubled the phase totals, and a
    backward operator whose instant fell after a GPU-side forward range had ended was put in
    "other"; the backward's own operators, on autograd's device thread, were all "other"."""
    events = [
        _x("ProfilerStep#1", "user_annotation", 0, 100),
        _x("dlperf::forward", "user_annotation", 0, 40),
        _x("dlperf::backward", "user_annotation", 40, 50),
        _x("dlperf::forward", "gpu_user_annotation", 30, 40, tid=99),  # the GPU runs behind
        _x("aten::conv", "cpu_op", 2, 8),
        _x("aten::convolution_backward", "cpu_op", 75, 10, tid=3),  # autograd's device thread
    ]
    s = summarise(_write(tmp_path / "t.json.gz", events))
    assert s.phases_us == {"forward": 40, "backward": 50}
    ops = {o.name: o for o in s.operators}
    assert ops["aten::conv"].by_phase_us == {"forward": 8}
    assert ops["aten::convolution_backward"].by_phase_us == {"backward": 10}


class _Heard:
    """A Reporter that keeps what it was told."""

    def __init__(self) -> None:
        self.tasks: list[str] = []
        self.done = 0

    def task(self, description: str, total: int | None = None) -> None:
        self.tasks.append(description)

    def advance(self, n: int = 1, status: str = "") -> None:
        self.done += n

    def log(self, message: str) -> None:
        pass


def test_reading_a_long_trace_reports_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 21: a valid trace of a million events took over 100 s with no line at all. (A
    trace counts as long from 20 million characters; here from 1,000.)"""
    from dlperf import traces

    monkeypatch.setattr(traces, "LONG_TRACE_CHARS", 1_000)
    events = CPU_STEP + [_x(f"aten::op{i}", "cpu_op", 0, 1) for i in range(25_000)]
    heard = _Heard()
    s = summarise(_write(tmp_path / "long.pt.trace.json.gz", events), heard)
    assert s.steps == 1 and heard.tasks == [
        f"reading the trace {tmp_path / 'long.pt.trace.json.gz'}"
    ]
    assert 20_000 <= heard.done <= len(events)  # in steps of events read
    heard = _Heard()  # a short trace: no line of its own (its errors stay one line)
    summarise(_write(tmp_path / "short.pt.trace.json.gz", CPU_STEP), heard)
    assert heard.tasks == [] and heard.done == 0


@pytest.mark.parametrize(
    "content", [b"", b"not json", b'{"traceEvents": 3}', b'{"no": "events"}'], ids=str
)
def test_a_file_that_is_no_trace_is_one_line_of_bad_input(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(UserError, match="cannot read the trace"):
        load(path)


def test_a_trace_without_steps_says_how_to_record_one(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.json.gz", [_x("aten::A", "cpu_op", 0, 3)])
    with pytest.raises(UserError, match="no ProfilerStep ranges") as e:
        summarise(path)
    assert "--profile" in (e.value.hint or "")


PROFILED = "[run.profile]\nenabled = true\n"


def _profiled_run(cli: Callable[..., CliResult], tiny_exp: Callable[..., Path]) -> dict[str, Any]:
    # 1 epoch of digits in batches of 32: 2 warm-up steps, the profiler's own warm-up step and
    # 3 recorded ones (steps 3-6), then the timed steps.
    result = cli("run", str(tiny_exp(epochs=1, extra=PROFILED)), "--json")
    assert result.code == 0, result.err
    document: dict[str, Any] = json.loads(result.out)
    return document


def test_a_profiled_window_is_stored_and_left_out_of_throughput(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path]
) -> None:
    from dlperf.config import load_experiment
    from dlperf.data import load_data

    run = _profiled_run(cli, tiny_exp)
    # Throughput counts the samples of every step after the first 6 (training drops the last
    # partial batch, so every step has 32).
    train = load_data(load_experiment(tiny_exp(epochs=1, extra=PROFILED), []).data).train
    assert run["timed_samples"] == (len(train.labels) // 32 - 6) * 32
    shown = cli("runs", "show", str(run["run_id"]), "--json")
    artifacts = {a["kind"]: a for a in json.loads(shown.out)["artifacts"]}
    trace = Path(artifacts["trace"]["path"])
    assert trace.name == "rank0.pt.trace.json.gz" and artifacts["trace"]["exists"]
    summary = summarise(trace)
    assert summary.steps == 3
    assert set(summary.phases_us) == {"data", "h2d", "forward", "backward", "optimizer"}
    phase_ops = {p for o in summary.operators for p in o.by_phase_us}
    assert {"forward", "backward", "optimizer"} <= phase_ops
    conv = next(o for o in summary.operators if "convolution_backward" in o.name)
    assert set(conv.by_phase_us) == {"backward"}


def test_runs_trace_prints_the_top_operators_and_json(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path]
) -> None:
    run_id = _profiled_run(cli, tiny_exp)["run_id"]
    shown = cli("runs", "trace", str(run_id), "--top", "5")
    assert shown.code == 0, shown.err
    assert "3 steps profiled on cpu" in shown.out
    assert "self CPU ms/step" in shown.out and "backward" in shown.out
    document = json.loads(cli("runs", "trace", str(run_id), "--json", "--top", "5").out)
    (trace,) = document["traces"]
    assert len(trace["operators"]) == 5 and trace["steps"] == 3
    shares = [o["cpu_self_us"] for o in trace["operators"]]
    assert shares == sorted(shares, reverse=True)
    assert sum(trace["overlap_ms"].values()) == pytest.approx(trace["step_ms"], rel=1e-6)


def test_the_report_shows_the_trace_and_says_when_it_is_gone(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    run = _profiled_run(cli, tiny_exp)
    run_id = run["run_id"]
    top = json.loads(cli("runs", "trace", str(run_id), "--json", "--top", "1").out)["traces"][0]
    assert cli("report", str(run_id), "--out", str(tmp_path / "site")).code == 0
    page = (tmp_path / "site" / f"run-{run_id}.html").read_text()
    assert "<h2>Profiler trace</h2>" in page and "3 steps profiled on cpu" in page
    assert top["operators"][0]["name"] in page and "self CPU ms/step" in page
    Path(top["path"]).unlink()
    assert cli("report", str(run_id), "--out", str(tmp_path / "again")).code == 0
    page = (tmp_path / "again" / f"run-{run_id}.html").read_text()
    assert "trace is gone" in page


def test_tensorboards_profiler_plugin_reads_the_trace_alike(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path]
) -> None:
    """The stored trace, read by TensorBoard's PyTorch profiler plugin (torch-tb-profiler,
    the `tensorboard` extra): the same operators and self times as dlperf's table, and the
    same calls but where an operator calls itself (aten::sum inside aten::sum): the plugin
    counts such a pair as one call, torch's key_averages() and dlperf as two."""

    def nested_in_itself(name: str) -> int:
        same = [e for e in load(Path(path)) if e.name == name and e.category == "cpu_op"]
        return sum(
            any(
                o is not e and o.thread == e.thread and o.start <= e.start and e.end <= o.end
                for o in same
            )
            for e in same
        )

    pytest.importorskip("torch_tb_profiler", reason="the tensorboard extra is not installed")
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    run_id = _profiled_run(cli, tiny_exp)["run_id"]
    document = json.loads(cli("runs", "trace", str(run_id), "--json", "--top", "1000").out)
    path = document["traces"][0]["path"]
    data = RunProfileData.parse("rank0", None, path, tempfile.mkdtemp())
    profile = RunGenerator("rank0", None, data).generate_run_profile()
    theirs = {r["name"]: r for r in profile.operation_table_by_name["data"]}
    ours = {o["name"]: o for o in document["traces"][0]["operators"]}
    assert set(ours) == set(theirs)
    for name, op in ours.items():
        assert op["cpu_self_us"] == pytest.approx(theirs[name]["host_self_duration"], abs=1), name
        assert op["calls"] - theirs[name]["calls"] == nested_in_itself(name), name


def test_trace_errors_are_one_line(
    cli: Callable[..., CliResult], tiny_exp: Callable[..., Path]
) -> None:
    exp = tiny_exp(epochs=1)
    plain = json.loads(cli("run", str(exp), "--json").out)["run_id"]
    missing = cli("runs", "trace", str(plain))
    assert missing.code == 2 and "has no trace" in missing.err and "--profile" in missing.err
    unknown = cli("runs", "trace", "999")
    assert unknown.code == 2 and "no run 999" in unknown.err
    assert "Traceback" not in missing.err
    long = tiny_exp(epochs=1, extra="[run.profile]\nenabled = true\nactive = 40\n", name="l.toml")
    refused = cli("run", str(long))
    assert refused.code == 2 and "run.profile records steps 3..43" in refused.err
    assert len(refused.err.strip().splitlines()) <= 2


def test_a_profiled_two_worker_point_keeps_each_ranks_trace_and_its_split(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """Real torchrun workers on gloo: each rank traces its window after the warm-up (not in
    the 3 timed steps), the point stores both traces, and the study sets the traces' split
    beside its estimates of exposed communication, each with its error against it. The point
    trains under PowerSGD, whose low-rank all-reduces still hand every rank the same gradient:
    its replicas stay identical (the real launch of tests/distributed/test_study.py's
    test_compression_hooks_keep_replicas_in_step, folded into this one)."""
    from dlperf.distributed import trace_split
    from dlperf.distributed.contracts import PointRow
    from tests.distributed.test_study import WEAK, write_experiment

    exp = write_experiment(tmp_path)
    args = ["scale", str(exp), "--workers", "2", *WEAK, "--steps", "3", "--synthetic"]
    result = cli(*args, "--comm", "powersgd", "--profile", "--json")
    assert result.code == 0, result.err
    (row,) = json.loads(result.out)["rows"]
    assert row["status"] == "finished" and row["timed_steps"] == 3
    assert row["comm"] == "powersgd" and row["throughput"] > 0
    assert row["replica_max_diff"] == 0.0  # PowerSGD: every rank the same gradient
    split = [row[f"trace_{part}_s"] for part in trace_split.SPLIT]
    assert all(v >= 0 for v in split) and sum(split) > 0
    assert row["trace_comm_only_s"] + row["trace_both_s"] > 0  # gloo's all-reduce was seen
    if row["comm_exposed_s"] is not None and row["trace_comm_only_s"] > 0:
        expected = row["comm_exposed_s"] / row["trace_comm_only_s"] - 1
        assert row["comm_error_vs_trace"] == pytest.approx(expected)
    artifacts = json.loads(cli("runs", "show", str(row["run_id"]), "--json").out)["artifacts"]
    traces = sorted(Path(a["path"]).name for a in artifacts if a["kind"] == "trace")
    assert traces == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    one = cli("runs", "trace", str(row["run_id"]), "--rank", "1", "--json")
    assert one.code == 0 and json.loads(one.out)["traces"][0]["path"].endswith(
        "rank1.pt.trace.json.gz"
    )
    wrong = cli("runs", "trace", str(row["run_id"]), "--rank", "2")
    assert wrong.code == 2 and "--rank must be 0..1" in wrong.err
    table = trace_split.table([PointRow.from_dict(row)])
    assert table is not None and table.rows[0][:3] == [2, "powersgd", 16]
    assert "%" in str(table.rows[0][7])  # the replica's estimate with its error
