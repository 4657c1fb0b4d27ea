"""dlperf.store.query on records and a fake store: what `runs list --where`, `runs show`,
`runs compare` and `runs delete` compute, without a database (tests/cli/test_runs.py runs
the commands on a real one)."""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine

from dlperf.errors import NoSuchRun, UserError
from dlperf.procs import proc_stat
from dlperf.store import query
from dlperf.store.query import (
    Condition,
    RunView,
    Stopped,
    compare,
    config_settings,
    config_value,
    delta,
    list_runs,
    select,
    setting,
    show,
    stop,
    summary_rows,
    to_delete,
)
from dlperf.store.record import RunRecord


def run(run_id: int, **fields: Any) -> RunRecord:
    base: dict[str, Any] = {
        "id": run_id,
        "study_id": None,
        "name": f"r{run_id}",
        "kind": "run",
        "status": "finished",
        "config": {},
        "config_hash": None,
        "system": None,
    }
    return RunRecord(**{**base, **fields})


@dataclass
class FakeStore:
    """The store's read methods over records held in memory; `statuses` feeds `get_run`'s
    status call by call (a run being stopped)."""

    runs: list[RunRecord]
    studies: dict[int, list[int]] = field(default_factory=dict)
    metric_rows: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    marks: dict[int, dict[str, str]] = field(default_factory=dict)  # tags `stop` set
    # A store that is there: `no_such_run` reads its engine's options for one that is not.
    engine: Engine = field(default_factory=lambda: create_engine("sqlite://"))

    def get_run(self, run_id: int) -> RunRecord:
        for r in self.runs:
            if r.id == run_id:
                return replace(r, status=self.statuses.pop(0)) if self.statuses else r
        raise NoSuchRun(f"no run {run_id} in the store")

    def writes_elsewhere(self, run: RunRecord) -> str | None:
        return None  # the store every run's process writes

    def set_tags(self, run_id: int, tags: dict[str, str | None]) -> dict[str, str]:
        """The mark `stop` puts on a run before signalling its process (query.DELETING_TAG),
        and takes back when it gives up, kept in `marks`."""
        held = self.marks.setdefault(run_id, {})
        held.update({k: v for k, v in tags.items() if v})
        for key in [k for k, v in tags.items() if not v]:
            held.pop(key, None)
        return held

    def list_runs(
        self, kind: str | None = None, study_id: int | None = None, limit: int | None = None
    ) -> list[RunRecord]:
        found = [r for r in sorted(self.runs, key=lambda r: -r.id) if kind in (None, r.kind)]
        if study_id is not None:
            found = [r for r in found if r.id in self.studies[study_id]]
        return found[:limit] if limit else found

    def get_study(self, study_id: int) -> dict[str, Any]:
        if study_id not in self.studies:
            raise UserError(f"no study {study_id} in the store")
        return {"id": study_id}

    def metric_keys(self, run_id: int) -> list[str]:
        return sorted(self.metric_rows)

    def metrics(self, run_id: int, key: str) -> list[tuple[int, float]]:
        return self.metric_rows[key]

    def artifacts(self, run_id: int) -> list[dict[str, Any]]:
        return self.files


# --- values as tables show them -------------------------------------------------------------


def test_config_value_follows_dotted_keys_to_none() -> None:
    config = {"model": {"name": "resnet20", "width": {"k": 2}}, "seed": 3}
    assert config_value(config, "model.name") == "resnet20"
    assert config_value(config, "model.width.k") == 2
    assert config_value(config, "model.depth") is None
    assert config_value(config, "seed.x") is None  # through a value that is not a section


def test_settings_read_back_as_set_takes_them() -> None:
    assert [setting(v) for v in (True, False, 0.05, 3, "sgd")] == [
        "true",
        "false",
        "0.05",
        "3",
        "sgd",
    ]
    assert setting("two words") == '"two words"' and setting("") == '""'
    assert setting('say "hi"') == '"say \\"hi\\""'
    assert setting([1, "a b", True]) == '[1, "a b", true]'
    config = {
        "train": {"lr": 0.1, "schedule": {"kind": "cosine"}, "clip": None, "m": []},
        "seed": 1,
        "aug": {},
    }
    assert config_settings(config) == [
        ("train", "lr=0.1 schedule.kind=cosine"),
        ("seed", "1"),
        ("aug", None),
    ]


def test_summary_rows_keep_the_order_label_clocks_and_show_memory_in_mib() -> None:
    summary = {"peak_memory_bytes": 3 * 2**20, "test_accuracy": 0.9, "epochs": 2, "other": 1}
    rows = summary_rows(summary)
    assert rows[0] == ("test_accuracy", 0.9)
    assert rows[1] == ("epochs", 2)
    assert rows[2] == ("peak memory MiB", 3.0)
    assert len(rows) == 3  # keys outside SUMMARY_KEYS are not shown here


# --- runs show ------------------------------------------------------------------------------


def test_show_collects_per_epoch_metrics_and_marks_missing_files(tmp_path: Any) -> None:
    there = tmp_path / "ckpt.pt"
    there.write_text("x")
    trained = {"model": {}, "data": {}, "train": {}, "run": {}}  # an experiment's: not tracked
    store = FakeStore(
        [run(1, config=trained)],
        metric_rows={
            "val/acc1": [(1, 0.5), (2, 0.7)],
            "epoch/train_loss": [(2, 0.3), (1, 0.9)],
            "train/loss": [(10, 1.0)],  # per step: not an epoch column
            "epoch/custom": [(3, 1.0)],  # an epoch no shown metric has
        },
        files=[{"kind": "checkpoint", "path": str(there)}, {"kind": "trace", "path": "/gone"}],
    )
    view = show(store, 1)  # type: ignore[arg-type]
    assert set(view.epochs) == {"val/acc1", "epoch/train_loss", "epoch/custom"}
    assert [a["exists"] for a in view.artifacts] == [True, False]
    headers, rows = view.per_epoch()
    assert headers == ["train loss", "val acc"]  # EPOCH_COLUMNS order, only what the run has
    assert rows == [[1, 0.9, 0.5], [2, 0.3, 0.7], [3, None, None]]
    document = view.to_dict()
    assert document["epochs"]["val/acc1"] == [0.5, 0.7] and document["id"] == 1
    assert document["artifacts"][1] == {"kind": "trace", "path": "/gone", "exists": False}


def test_a_view_of_a_run_without_metrics_has_an_empty_table() -> None:
    assert RunView(run(1), {}, []).per_epoch() == ([], [])


# --- --where --------------------------------------------------------------------------------


def test_conditions_read_values_as_set_does() -> None:
    assert Condition.parse(" train.lr = 0.10 ") == Condition("train.lr", 0.1)
    assert Condition.parse("model.name=resnet20").value == "resnet20"
    assert Condition.parse("train.nesterov=true").value is True
    for bad in ("train.lr", "=1", "train.lr="):
        with pytest.raises(UserError, match="expected KEY=VALUE"):
            Condition.parse(bad)


def test_where_matches_numbers_loosely_and_booleans_strictly() -> None:
    runs = [
        run(1, config={"train": {"lr": 0.1, "epochs": 1}}, summary={"flag": True}),
        run(
            2,
            config={"train": {"lr": 0.10000, "epochs": 1.0}},
            summary={"flag": 1},
            tags={"note": "2"},
        ),
        run(3, config={"train": {"lr": 0.2}}, status="lost", tags={"note": "x"}),
    ]

    def ids(where: list[str]) -> list[int]:
        return [r.id for r in select(runs, where)]

    assert ids(["train.lr=0.1"]) == [1, 2]
    assert ids(["train.epochs=1"]) == [1, 2]  # 1 == 1.0
    assert ids(["flag=true"]) == [1]  # true is not 1
    assert ids(["flag=1"]) == [2]
    assert ids(["status=lost"]) == [3]
    assert ids(["tag.note=2"]) == [2]  # a tag's text read as --set reads it
    assert ids(["train.lr=0.1", "flag=1"]) == [2]
    assert ids(["train.epochs=1", "status=lost"]) == []


def test_an_unknown_where_key_names_the_closest() -> None:
    runs = [run(1, config={"train": {"lr": 0.1}}, tags={"baseline": "yes"})]
    with pytest.raises(UserError) as e:
        select(runs, ["train.lrr=0.1"])
    assert e.value.message == "--where: unknown key 'train.lrr'"
    assert e.value.hint == "did you mean 'train.lr'?"
    with pytest.raises(UserError) as e:
        select(runs, ["tag.baselin=yes"])
    assert (e.value.message, e.value.hint) == (
        "--where tag.baselin: no listed run has tag 'baselin'",
        "did you mean tag.baseline?",
    )
    # a key every experiment has is known though no listed run sets it
    assert select(runs, ["data.name=digits"]) == []


def test_list_runs_checks_its_arguments_before_opening_the_store() -> None:
    def never() -> FakeStore:
        raise AssertionError("the store was opened")

    for limit, message in ((0, "at least 1"), (2**31, "at most 2147483647")):
        with pytest.raises(UserError, match=message):
            list_runs(never, limit=limit)  # type: ignore[arg-type]


def test_list_runs_filters_before_the_limit_and_refuses_an_unknown_study() -> None:
    store = FakeStore(
        [run(i, config={"train": {"lr": 0.1 if i % 2 else 0.2}}) for i in range(1, 7)],
        studies={1: [2, 3]},
    )

    def opened() -> FakeStore:
        return store

    assert [r.id for r in list_runs(opened, limit=2)] == [6, 5]  # type: ignore[arg-type]
    # the newest two of the matching runs, not the matches among the newest two
    assert [r.id for r in list_runs(opened, where=["train.lr=0.1"], limit=2)] == [5, 3]  # type: ignore[arg-type]
    assert [r.id for r in list_runs(opened, study=1)] == [3, 2]  # type: ignore[arg-type]
    with pytest.raises(UserError, match="no study 9 in the store"):
        list_runs(opened, study=9)  # type: ignore[arg-type]


# --- compare --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([0.5, 0.6], "+0.1 (+20.0%)"),
        ([2, 1], "-1 (-50.0%)"),
        ([0, 3], "+3"),  # no share of zero
        ([1.0, 1.0, 1.0], "0"),
        ([1.0, 1.1, 0.9], "+10.0% -10.0%"),
        ([0, 1, -2], "+1 -2"),
        ([1.0, None, 2.0], "- +100.0%"),
        (["a", "b"], None),
        ([None, 2.0], None),
        ([True, False], None),  # booleans are not numbers here
    ],
)
def test_delta_is_the_change_from_the_first_run(values: list[Any], shown: str | None) -> None:
    assert delta(values) == shown


def test_compare_lists_what_differs_and_every_result() -> None:
    a = run(
        1, config={"train": {"lr": 0.1, "epochs": 2}}, summary={"test_accuracy": 0.5, "epochs": 2}
    )
    b = run(
        2,
        config={"train": {"lr": 0.2, "epochs": 2}, "seed": 1},
        summary={"test_accuracy": 0.6, "peak_memory_bytes": 2**21, "epochs": 2},
        tags={"best": "yes"},
        status="failed",
    )
    done = compare(FakeStore([a, b]), [1, 2])  # type: ignore[arg-type]
    assert done.config_diff == {"seed": [None, 1], "train.lr": [0.1, 0.2]}
    assert done.summary["test_accuracy"] == [0.5, 0.6]
    assert done.to_dict() == {
        "runs": [1, 2],
        "config_diff": done.config_diff,
        "summary": done.summary,
    }
    rows = {row.label: (row.values, row.delta) for row in done.rows()}
    assert rows["train.lr"] == ([0.1, 0.2], "+0.1 (+100.0%)")
    assert rows["peak memory MiB"] == ([None, 2.0], None)
    assert rows["tag best"] == ([None, "yes"], None)
    assert rows["status"] == (["finished", "failed"], None)
    assert "throughput" not in rows  # a result no run has


def test_compare_shows_a_list_as_its_cell_cut_past_cell_chars_and_text_apart_from_it() -> None:
    # A list's cell was padded whole into every row (20,000 items beside 300 keys: 40 MB),
    # and text "1, 2" read as the list [1, 2] (round 35 C1 and C4, their list case).
    a = run(1, config={"v": list(range(20_000)), "s": [1, 2], "e": [], "t": []})
    b = run(2, config={"s": "1, 2", "t": "[]"})
    rows = {row.label: row.values for row in compare(FakeStore([a, b]), [1, 2]).rows()}  # type: ignore[arg-type]
    cut = ", ".join(map(str, range(20_000)))[: query.CELL_CHARS]
    assert rows["v"] == [f"{cut}... (20,000 items; --json holds it whole)", None]
    assert rows["s"] == ["1, 2", "'1, 2'"]
    assert rows["e"] == ["[]", None]  # [] and a key the run lacks, both "-", read apart
    assert rows["t"] == ["[]", "'[]'"]
    long = FakeStore([run(3, config={"k" * 10**5: 1}), run(4)])  # a key is its row's label
    label = compare(long, [3, 4]).rows()[0].label  # type: ignore[arg-type]
    assert label == f"{'k' * query.CELL_CHARS}... (100,000 characters; --json holds it whole)"


def test_compare_shows_config_numbers_in_full_where_their_cells_would_read_alike() -> None:
    # 4 significant digits showed 1.00001 and 1.00002 both as 1: a key listed as differing
    # with identical cells (round 35 C1's cause, its number case).
    a = run(1, config={"x": 1.00001, "lr": 0.1, "t": "1.00002"})
    b = run(2, config={"x": 1.00002, "lr": 0.2, "t": 1.00002})
    rows = {row.label: row for row in compare(FakeStore([a, b]), [1, 2]).rows()}  # type: ignore[arg-type]
    assert (rows["x"].values, rows["x"].delta) == (["1.00001", "1.00002"], "+1e-05 (+0.0%)")
    assert rows["lr"].values == [0.1, 0.2]  # apart as they are: fmt's cells
    # whole, as set: its cell read "1" (break-it round 58, T2 C2)
    assert rows["t"].values == ["'1.00002'", "1.00002"]


def test_compare_takes_ids_or_a_study_and_at_least_two_runs() -> None:
    store = FakeStore([run(1), run(2), run(3)], studies={4: [3, 1], 5: [2]})
    assert compare(store, study=4).run_ids == [1, 3]  # type: ignore[arg-type]
    for ids, study, message in (
        ([1], None, "two or more"),
        ([1, 2], 4, "not both"),
        ([], 5, "two or more"),
    ):
        with pytest.raises(UserError, match=message):
            compare(store, ids, study)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="no study 6"):
        compare(store, study=6)  # type: ignore[arg-type]


# --- delete ---------------------------------------------------------------------------------


def test_to_delete_names_every_missing_and_running_run() -> None:
    here = {"host": "h1", "pid": 42}
    store = FakeStore(
        [run(1), run(2, status="running", system={"process": here}), run(3, status="lost")]
    )
    with pytest.raises(UserError) as e:
        to_delete(store, [1, 7, 8], force=False)  # type: ignore[arg-type]
    assert e.value.message == "no run 7, 8 in the store; nothing deleted"
    with pytest.raises(UserError) as e:
        to_delete(store, [1, 2, 3], force=False)  # type: ignore[arg-type]
    assert e.value.message == "run 2 (pid 42 on h1) is still running; nothing deleted"
    assert [r.id for r in to_delete(store, [1, 2, 3], force=True)] == [1, 2, 3]  # type: ignore[arg-type]
    assert [r.id for r in to_delete(store, [3], force=False)] == [3]  # type: ignore[arg-type]


def process_of(child: subprocess.Popen[str]) -> dict[str, Any]:
    """A child process as a run's system record names it (procs.this_process's shape)."""
    stat = proc_stat(child.pid)
    assert stat is not None
    return {"host": socket.gethostname(), "pid": child.pid, "start": stat[1], "boot_id": None}


def test_stop_terms_a_live_run_and_waits_for_its_mark() -> None:
    child = subprocess.Popen(["sleep", "60"], text=True)
    try:
        running = run(1, status="running", system={"process": process_of(child)})
        elsewhere = run(
            2,
            status="running",
            system={"process": {"host": "not-" + socket.gethostname(), "pid": 5}},
        )
        store = FakeStore([running, elsewhere], statuses=["running", "killed"])
        said: list[str] = []
        done = stop(store, [running, elsewhere, run(3)], wait_s=30, waiting=said.append)  # type: ignore[arg-type]
        assert child.wait(timeout=30) < 0  # ended by the signal
        assert done == [
            Stopped(1, child.pid, socket.gethostname(), "killed"),
            Stopped(2, 5, "not-" + socket.gethostname(), None),  # another host's: not stopped
        ]
        assert said == [
            f"sent SIGTERM to pid {child.pid}; waiting up to 30 s for it to mark run 1 killed"
        ]
        assert list(store.marks) == [1] and list(store.marks[1]) == [query.DELETING_TAG]
    finally:
        child.kill()
        child.wait()


def test_stop_gives_up_on_a_process_that_does_not_mark_its_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    child = subprocess.Popen(
        ["sh", "-c", "trap '' TERM; echo ready; sleep 60"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        running = run(1, status="running", system={"process": process_of(child)})
        monkeypatch.setattr(query, "POLL_S", 0.01)
        store = FakeStore([running])
        with pytest.raises(UserError) as e:
            stop(store, [running], wait_s=0.2)  # type: ignore[arg-type]
        assert store.marks == {1: {}}  # marked before the signal, unmarked as it gave up
        assert (
            e.value.message == f"run 1: pid {child.pid} did not stop within 0.2 s; nothing deleted"
        )
        assert child.poll() is None  # it ignored SIGTERM, and is left to the hint's kill -9
    finally:
        child.kill()
        child.wait()
