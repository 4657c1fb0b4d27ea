"""Caps on the profiler traces dlperf reads (issue 41): a trace nested 100,000 deep is read
without a RecursionError, a small gzip holding more JSON than MAX_TRACE_MB is refused in
one line before it is unpacked whole, one run's bad trace costs the report only that
trace's tables, and `runs trace --top` out of range is one line."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf import traces
from dlperf.config import Experiment
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.test_traces import CPU_STEP

DEPTH = 100_000
DEEP = "[" * DEPTH + "]" * DEPTH
DEEP_OBJECT = '{"a": ' * DEPTH + "1" + "}" * DEPTH


def gz(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode()))
    return path


def step_events() -> str:
    """The hand-worked CPU step of tests/test_traces.py, as JSON array members."""
    return ", ".join(json.dumps(e) for e in CPU_STEP)


def padded_gzip(path: Path, megabytes: int) -> Path:
    """A valid trace padded with `megabytes` MiB of whitespace: a gzip of a few KiB per MiB."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    parts = [packer.compress(f'{{"traceEvents": [{step_events()}]'.encode())]
    spaces = b" " * 2**20
    parts += [packer.compress(spaces) for _ in range(megabytes)]
    parts += [packer.compress(b"}"), packer.flush()]
    path.write_bytes(b"".join(parts))
    return path


@pytest.mark.parametrize(
    "document",
    [
        f'{{"traceEvents": [{DEEP}, {step_events()}]}}',
        f'{{"deviceProperties": {DEEP}, "traceEvents": [{step_events()}, {DEEP_OBJECT}]}}',
        f"[{step_events()}, {DEEP}]",
    ],
    ids=["deep event", "deep other key and event object", "bare array"],
)
def test_a_trace_nested_100000_deep_is_read_without_recursion_limits(
    tmp_path: Path, document: str
) -> None:
    """What is nested too deep for json's parser is skipped; the step beside it is read."""
    s = traces.summarise(gz(tmp_path / "rank0.pt.trace.json.gz", document))
    assert (s.steps, s.step_us, s.phases_us) == (1, 100, {"forward": 40, "backward": 50})
    ops = {o.name: o.cpu_self_us for o in s.operators}
    assert ops == {"aten::A": 20, "aten::B": 10, "aten::C": 30}


def test_an_event_with_deep_args_keeps_its_time(tmp_path: Path) -> None:
    events = [dict(e) for e in CPU_STEP]
    events[5]["args"] = {"deep": "PLACEHOLDER", "correlation": 3}  # aten::C
    text = json.dumps({"traceEvents": events}).replace('"PLACEHOLDER"', DEEP)
    s = traces.summarise(gz(tmp_path / "rank0.pt.trace.json.gz", text))
    assert {o.name: o.cpu_self_us for o in s.operators}["aten::C"] == 30
    (event,) = [e for e in traces.load(tmp_path / "rank0.pt.trace.json.gz") if e.name == "aten::C"]
    assert event.correlation is None  # its args were skipped whole


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", DEEP, "an event's 'name' is _Deep, not a scalar"),
        ("name", "[1, 2]", "an event's 'name' is list, not a scalar"),
        ("tid", '{"a": 1}', "an event's 'tid' is dict, not a scalar"),
        ("ts", "[0]", "an event's 'ts' is [0], not a number"),
        ("dur", "true", "an event's 'dur' is True, not a number"),
    ],
)
def test_an_event_field_of_the_wrong_kind_is_one_line(
    tmp_path: Path, field: str, value: str, message: str
) -> None:
    events = [dict(e) for e in CPU_STEP]
    events[3][field] = "PLACEHOLDER"
    text = json.dumps({"traceEvents": events}).replace('"PLACEHOLDER"', value)
    path = gz(tmp_path / "rank0.pt.trace.json.gz", text)
    with pytest.raises(UserError) as refused:
        traces.summarise(path)
    assert str(refused.value) == f"cannot read the trace {path}: {message}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"traceEvents": [1, 2,]}', "Expecting value: line 1 column 23 (char 22)"),
        ('{"traceEvents": [1] "x": 2}', "expected ',' at character 20, found '\"'"),
        ('{"traceEvents": []} []', "extra data after the trace at character 19"),
        ('{"traceEvents": {}}', "expected '[' at character 16, found '{'"),
        ("[" * 5000, "unterminated value from character 1"),
    ],
)
def test_what_json_refuses_is_still_refused(tmp_path: Path, text: str, message: str) -> None:
    path = gz(tmp_path / "rank0.pt.trace.json.gz", text)
    with pytest.raises(UserError) as refused:
        traces.load(path)
    assert str(refused.value) == f"cannot read the trace {path}: {message}"


def test_a_gzip_bomb_is_refused_past_the_cap_without_unpacking_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 MiB of JSON in a gzip of well under 1 MiB, read with the cap at 2 MiB: refused in one
    line naming the cap, and never more than a few MiB held (the old reader held it all)."""
    path = padded_gzip(tmp_path / "rank0.pt.trace.json.gz", 64)
    assert path.stat().st_size < 2**20
    monkeypatch.setattr(traces, "MAX_TRACE_MB", 2)
    tracemalloc.start()
    try:
        with pytest.raises(UserError) as refused:
            traces.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(refused.value) == (
        f"the trace {path} decompresses to more than 2 MiB of JSON, the most dlperf reads "
        "(open it in ui.perfetto.dev, or profile fewer steps: run.profile.active)"
    )
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB held"
    # Under the cap, the same padding is read as the trace it is.
    monkeypatch.setattr(traces, "MAX_TRACE_MB", 65)
    assert traces.summarise(path).steps == 1


def test_a_plain_trace_over_the_cap_is_refused_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(traces, "MAX_TRACE_MB", 1)
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(f'{{"traceEvents": [{step_events()}]}}' + " " * 2**20)
    with pytest.raises(UserError, match=r"trace .* holds more than 1 MiB of JSON"):
        traces.load(path)


def traced_run(store: RunStore, trace: Path) -> int:
    """A finished run whose stored trace is `trace`."""
    exp = Experiment.model_validate({"model": {"name": "smallcnn"}, "data": {"name": "digits"}})
    run_id = store.create_run(trace.parent.name, "run", exp.to_dict(), exp.config_hash(), {})
    store.add_artifact(run_id, "trace", trace)
    store.finish_run(run_id, summary={})
    return run_id


def test_one_bad_trace_costs_the_report_its_own_tables(
    store: RunStore, cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report is drawn in this process (jobs=1), so that the cap set here holds there."""
    from dlperf.report.site import build_report

    monkeypatch.setattr(traces, "MAX_TRACE_MB", 2)  # the bomb's size, not its kind, is cut
    good, deep, bomb = (tmp_path / name for name in ("good", "deep", "bomb"))
    for directory in (good, deep, bomb):
        directory.mkdir()
    text = f'{{"traceEvents": [{step_events()}]}}'
    good_id = traced_run(store, gz(good / "rank0.pt.trace.json.gz", text))
    # A run of two ranks: rank 0's trace holds one event array nested 100,000 deep, and so
    # no event object (not a trace: break-it 22, P4 cause E); rank 1's is fine, and is drawn.
    deep_trace = gz(deep / "rank0.pt.trace.json.gz", f'{{"traceEvents": [{DEEP}]}}')
    deep_id = traced_run(store, deep_trace)
    store.add_artifact(deep_id, "trace", gz(deep / "rank1.pt.trace.json.gz", text))
    bomb_trace = padded_gzip(bomb / "rank0.pt.trace.json.gz", 3)
    bomb_id = traced_run(store, bomb_trace)

    build_report(store, tmp_path / "site", [good_id, deep_id, bomb_id], jobs=1)
    page = {
        run_id: (tmp_path / "site" / f"run-{run_id}.html").read_text()
        for run_id in (good_id, deep_id, bomb_id)
    }
    assert "1 steps profiled on cpu" in page[good_id] and "aten::C" in page[good_id]
    no_events = f"the trace {deep_trace}: its traceEvents array holds no event objects"
    assert no_events in page[deep_id]
    assert "rank1.pt.trace.json.gz: 1 steps profiled on cpu" in page[deep_id]
    assert f"the trace {bomb_trace} decompresses to more than 2 MiB of JSON" in page[bomb_id]
    assert "Profiler trace" in page[bomb_id] and "self CPU ms/step" not in page[bomb_id]

    for run_id, line in [
        (deep_id, f"error: cannot read {no_events}"),
        (bomb_id, f"error: the trace {bomb_trace} decompresses to more than 2 MiB of JSON"),
    ]:
        shown = cli("runs", "trace", str(run_id))
        assert shown.code == 2 and shown.err.startswith(line), shown.err
        assert len(shown.err.splitlines()) == 1


@pytest.mark.parametrize("top", ["-1", "0"])
def test_runs_trace_top_out_of_range_is_one_line(
    store: RunStore, cli: Callable[..., CliResult], tmp_path: Path, top: str
) -> None:
    run_id = traced_run(store, gz(tmp_path / "rank0.pt.trace.json.gz", "[]"))
    shown = cli("runs", "trace", str(run_id), "--top", top)
    assert (shown.code, shown.out) == (2, "")
    assert shown.err == f"error: --top must be at least 1, got {top} (e.g. --top 15)\n"


def test_runs_trace_reads_a_capped_trace_within_the_cap(
    store: RunStore, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """A trace that uses most of the cap in padding is still read (the cap is not a guess at
    what the trace holds, but what is read)."""
    run_id = traced_run(store, padded_gzip(tmp_path / "rank0.pt.trace.json.gz", 8))
    shown = cli("runs", "trace", str(run_id), "--json", "--top", "2")
    assert shown.code == 0, shown.err
    document: dict[str, Any] = json.loads(shown.out)
    assert [o["name"] for o in document["traces"][0]["operators"]] == ["aten::C", "aten::A"]
