"""The public API: every example in docs/api.md runs, the caller's model is left as it was,
and a tracked loop is a run like any other."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dlperf
from dlperf.procs import this_process
from dlperf.store import RunStore as StoreImpl
from tests.conftest import REPO, TrainedRun

EXAMPLES = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S)


def test_every_public_name_is_documented() -> None:
    page = (REPO / "docs" / "api.md").read_text()
    assert len(EXAMPLES) >= 5
    for name in dlperf.__all__:
        assert f"dlperf.{name}" in page or f"`{name}`" in page, name


def test_import_does_not_load_torch() -> None:
    code = "import sys, dlperf; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("code", EXAMPLES, ids=lambda c: c.splitlines()[-1][:40])
def test_docs_example_runs(code: str, db: str, fewer_bootstrap_fits: None) -> None:
    exec(compile(code, "docs/api.md", "exec"), {})


def test_analyze_leaves_the_callers_model_alone() -> None:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.BatchNorm2d(8),
        torch.nn.Flatten(),
        torch.nn.LazyLinear(4),
    )
    model(torch.zeros(1, 3, 8, 8))  # materialise the lazy layer
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = dlperf.analyze(model, (3, 8, 8), batch=2, train=True)
    after = model.state_dict()
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert after[key].device.type == "cpu" and torch.equal(after[key], value), key
    assert all(p.grad is None for p in model.parameters())
    assert result.totals["params"] == sum(p.numel() for p in model.parameters())
    # conv: 8·3·3·3 MACs per output pixel (6·6 of them) per image; linear: 288·4
    assert result.totals["macs"] >= 2 * (8 * 27 * 36 + 288 * 4)
    assert '"totals"' in result.to_json()


def test_analysis_prints_the_tables_the_command_prints(cli) -> None:
    """One rendering of the analysis: the same titles, columns, rows and totals, word for
    word, with the console's rules and column bars left aside."""

    def words(text: str) -> list[list[str]]:
        lines = (line.translate(str.maketrans("", "", "┃│")).split() for line in text.splitlines())
        return [w for w in lines if w and not set("".join(w)) <= set("━╇─┼")]

    shown = cli("analyze", "smallcnn", "--input", "1,8,8", "--train")
    assert shown.code == 0
    result = dlperf.analyze("smallcnn", (1, 8, 8), train=True)
    assert words(str(result)) == words(shown.out)
    assert "training memory SGD momentum / Adam" in str(result)


def test_analyze_refuses_what_it_cannot_count() -> None:
    with pytest.raises(dlperf.UserError, match="input_size"):
        dlperf.analyze(torch.nn.Linear(2, 2))
    with pytest.raises(dlperf.UserError, match=r"nn\.Module"):
        dlperf.analyze(42)  # type: ignore[arg-type]


def test_tracked_run_is_a_run(cli, store) -> None:
    with dlperf.track("mine", config={"lr": 0.1}) as run:
        with run.phase("forward"):
            pass
        run.log(1, loss=2.0, **{"val/acc1": 0.5})
    shown = cli("runs", "show", str(run.id))
    assert shown.code == 0 and "mine" in shown.out and "finished" in shown.out
    assert "forward" in shown.out
    assert store.metrics(run.id, "val/acc1") == [(1, 0.5)]


def test_tracked_run_ends_failed_or_killed(store) -> None:
    with pytest.raises(RuntimeError), dlperf.track("boom") as failed:
        raise RuntimeError("nan loss")
    with pytest.raises(KeyboardInterrupt), dlperf.track("ctrl-c") as killed:
        raise KeyboardInterrupt
    assert store.get_run(failed.id).status == "failed"
    assert store.get_run(failed.id).error == "RuntimeError: nan loss"
    assert store.get_run(killed.id).status == "killed"


def test_store_reads_like_the_commands(db: str, tmp_path: Path) -> None:
    with dlperf.track("a") as run:
        run.log(1, loss=1.0)
        run.log(2, loss=0.5)
    store = dlperf.Store(db)
    assert [r.id for r in store.runs()] == [run.id]
    assert store.metrics(run.id, "train/loss") == [(1, 1.0), (2, 0.5)]
    with pytest.raises(dlperf.UserError, match="no run 99"):
        store.metrics(99, "train/loss")


def test_frame_puts_every_metric_on_the_global_step(
    tmp_path: Path, trained_digits: TrainedRun
) -> None:
    """Validation is stored at step = epoch; the frame puts it at the epoch's last step, as
    the exports do, instead of squashed at the left of the step axis."""
    pytest.importorskip("pandas")
    _, run_id, _ = trained_digits.copy_to(tmp_path)
    frame = dlperf.Store(f"sqlite:///{tmp_path / 'dlperf.db'}").frame(run_id)
    last = int(frame["train/loss"].last_valid_index())
    assert frame["val/acc1"].dropna().index.tolist() == [last]
    assert frame["epoch"].dropna().to_dict() == {last: 1.0}
    assert frame.index.is_monotonic_increasing


def test_runs_say_lost_as_the_commands_do(db: str) -> None:
    gone = {**this_process(), "start": -1}  # this pid with another start time: gone
    impl = StoreImpl.open(db)
    run_id = impl.create_run("doomed", "run", {}, None, {"host": "h"})
    impl.update_run(run_id, system={"host": "h", "process": gone})
    store = dlperf.Store(db)
    assert store.run(run_id).status == "lost"
    assert [r.status for r in store.runs()] == ["lost"]


def test_store_selects_and_compares_as_the_commands_do(cli, db: str) -> None:
    ids = []
    for lr in (0.1, 0.2, 0.4):
        with dlperf.track("lr", config={"train": {"lr": lr}}) as run:
            run.log(1, loss=lr)
        ids.append(run.id)
    store = dlperf.Store(db)
    picked = store.runs(where=["train.lr=0.2"])
    assert [r.id for r in picked] == [ids[1]]
    listed = json.loads(cli("runs", "list", "--where", "train.lr=0.2", "--json").out)
    assert [r["id"] for r in listed] == [ids[1]]
    with pytest.raises(dlperf.UserError, match=r"unknown key 'train\.lrr'"):
        store.runs(where=["train.lrr=0.2"])
    diff = store.compare(ids)
    assert diff.to_dict() == json.loads(cli("runs", "compare", *map(str, ids), "--json").out)
    assert diff.config_diff == {"train.lr": [0.1, 0.2, 0.4]}
    assert [(r.label, r.delta) for r in diff.rows()] == [
        ("train.lr", "+100.0% +300.0%"),
        ("final.train/loss", "+100.0% +300.0%"),  # a tracked run's own result, as show lists it
        ("status", None),
    ]
    with pytest.raises(dlperf.UserError, match="two or more"):
        store.compare(ids[:1])


def test_fit_curve_recovers_known_parameters(fewer_bootstrap_fits: None) -> None:
    import numpy as np

    k = np.arange(1.0, 81.0)
    fit = dlperf.fit_curve(k, 1 / (0.1 * k + 2.0) + 0.3)
    assert fit.converged
    assert fit.params["beta2"] == pytest.approx(0.3, abs=1e-3)
    step = fit.predict_step(0.35)
    assert step["reachable"] and step["step"] == pytest.approx(180, abs=1)  # 1/(0.1k+2) = 0.05
    with pytest.raises(dlperf.UserError, match="unknown curve form"):
        dlperf.fit_curve(k, k, form="cubic")


def test_fit_curve_fits_as_converge_fit_does(
    cli, tmp_path: Path, fewer_bootstrap_fits: None
) -> None:
    """The same window, the same checks and the same held-out points as the command."""
    import numpy as np

    k = np.arange(1, 41)
    loss = 1 / (0.05 * k + 1) + 0.2 + np.random.default_rng(1).normal(0, 0.003, k.size)
    csv = tmp_path / "curve.csv"
    csv.write_text("loss\n" + "\n".join(map(str, loss)) + "\n")
    shown = cli("converge", "fit", "--csv", str(csv), "--y", "loss", "--upto", "0.5", "--json")
    command = json.loads(shown.out)
    fit = dlperf.fit_curve(k, loss, upto=0.5)
    assert fit.params == {b: command[b] for b in ("beta0", "beta1", "beta2")}
    assert fit.heldout_rmse == command["heldout"]["optimus_rmse"]
    with pytest.raises(dlperf.UserError, match=r"accuracy values must lie in \[0, 1\]"):
        dlperf.fit_curve(k, 100 * (1 - loss), metric="accuracy")  # percent, not a fraction


BAD_CALLS = {
    "negative size": lambda: dlperf.analyze("resnet20", (3, -32, 32)),
    "fractional size": lambda: dlperf.analyze("resnet20", (3, 2.5, 32)),
    "size as text": lambda: dlperf.analyze("resnet20", "3,32,32"),  # type: ignore[arg-type]
    "module, negative size": lambda: dlperf.analyze(torch.nn.Linear(2, 2), (-2,)),
    "run of a number": lambda: dlperf.run(42),  # type: ignore[arg-type]
    "run of a list": lambda: dlperf.run([1]),  # type: ignore[arg-type]
    "overrides as one string": lambda: dlperf.run({}, "train.lr=1"),
    "override not a string": lambda: dlperf.run({}, [42]),  # type: ignore[list-item]
    "curve of text": lambda: dlperf.fit_curve("abcd", [1, 2, 3, 4]),  # type: ignore[arg-type]
    "curve of unequal lengths": lambda: dlperf.fit_curve([1, 2, 3, 4, 5], [1, 2, 3, 4]),
    "store url a number": lambda: dlperf.Store(42),  # type: ignore[arg-type]
    "run id as text": lambda: dlperf.Store().run("x"),  # type: ignore[arg-type]
    "track name a number": lambda: dlperf.track(7).__enter__(),  # type: ignore[arg-type]
    "track name with ESC": lambda: dlperf.track("a\x1b[2Jb").__enter__(),
}


@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_input_raises_dlperfs_own_error(db: str, call) -> None:
    """These raised RuntimeError, TypeError or ValueError from deep inside torch, pathlib or
    NumPy; a caller catching dlperf.UserError for bad input missed them."""
    with pytest.raises(dlperf.UserError) as info:
        call()
    assert "\n" not in str(info.value)


def test_the_names_you_log_are_the_names_you_read(db: str) -> None:
    """log(step, loss=...) stores train/loss; metrics(run, "loss") returned [] without a word."""
    with dlperf.track("a") as run:
        run.log(1, loss=1.0, acc=0.5, **{"val/acc1": 0.25})
    store = dlperf.Store(db)
    assert store.metrics(run.id, "loss") == store.metrics(run.id, "train/loss") == [(1, 1.0)]
    assert store.metrics(run.id, "acc") == [(1, 0.5)]
    assert store.metrics(run.id, "val/acc1") == [(1, 0.25)]
    with pytest.raises(dlperf.UserError, match=r"no metric 'los'.*train/loss"):
        store.metrics(run.id, "los")
