"""Break-it round 29, fixer F: report staging, transfer notes, the API's messages.

C1 (P4 C5). Two `report --out DIR` at once shared DIR/.report-partial/: the second wiped the
first one's pages, which failed "cannot use site/.report-partial/run-1.html" (exit 2). Now each
report stages in a folder of its own, and the last complete site wins.
C2 (P1 C3). The transfer notes (first conv adapted, head kept or new) were stored in
summary.transfer.notes but no view printed them: `run` and `runs show` now do.
C3 (P1 C6). `dlperf.analyze(...)` from Python was told CLI-only fixes (--precision fp16
(analyze.precision), leave out --train or analyze.train, model.weights): now the API's own
arguments (dtype=, train=).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

import dlperf
from dlperf.errors import UserError
from dlperf.models.smallcnn import smallcnn
from dlperf.report.site import build_report
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# --- C1 (P4 C5): two reports into one DIR at once --------------------------------------------


class _SecondReport:
    """A reporter that, as the first report draws its first page, makes a whole second report
    of other runs into the same directory: the two overlap as two processes' did."""

    def __init__(self, store: RunStore, out: Path, runs: list[int]) -> None:
        self.store, self.out, self.runs, self.done = store, out, runs, False

    def task(self, description: str, total: int | None = None) -> None:
        pass

    def advance(self, n: int = 1, status: str = "") -> None:
        if not self.done:
            self.done = True
            build_report(self.store, self.out, run_ids=self.runs)

    def log(self, message: str) -> None:
        pass


def test_c1_two_reports_into_one_directory_both_finish(store: RunStore, tmp_path: Path) -> None:
    """Before: FileNotFoundError on .report-partial/run-2.html (the CLI's exit 2 line)."""
    for name in ("a", "b", "c"):
        run_id = store.create_run(name, "run", {})
        store.log_metrics(run_id, [("train/loss", step, 1 / step) for step in range(1, 4)])
        store.finish_run(run_id, "finished")
    out = tmp_path / "site"
    out.mkdir()
    # A staging folder a SIGKILLed report left (no such pid), and one of the fixed name that
    # an earlier dlperf used: both removed; the user's file kept.
    (out / f".report-partial-{socket.gethostname()}-999999999-0123abcd").mkdir()
    (out / ".report-partial").mkdir()
    (out / ".report-partial" / "run-7.html").write_text("a killed report's page")
    (out / "notes.txt").write_text("the user's")
    second = _SecondReport(store, out, [3])
    first = build_report(store, out, run_ids=[1, 2], reporter=second)
    assert second.done
    # The first report finished last: its site is what DIR holds, the second's page removed.
    assert first.pages == ["index.html", "run-2.html", "run-1.html"]
    assert sorted(p.name for p in out.iterdir()) == [
        "index.html", "notes.txt", "run-1.html", "run-2.html",
    ]  # fmt: skip
    assert "run-2.html" in (out / "index.html").read_text()


# --- C2 (P1 C3): the transfer notes are shown ------------------------------------------------


def test_c2_run_and_runs_show_print_the_transfer_notes(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """Before: neither `run` nor `runs show` said that the first conv was adapted."""
    rgb = smallcnn(10, in_channels=3)
    rgb(torch.zeros(1, 3, 8, 8))  # its LazyLinear sized
    torch.save(rgb.state_dict(), tmp_path / "rgb.pt")
    exp = tiny_exp(epochs=1)
    weights = f'model.weights="{tmp_path / "rgb.pt"}"'
    ran = cli(
        "run", str(exp), "--set", "data.limit=64", "--set", weights, "--set", 'model.head="keep"'
    )  # fmt: skip
    assert ran.code == 0, ran.err
    adapted = "first conv 0: weights for 3 input channels summed and spread over 1"
    kept = "head 10 kept from the weights (10 classes)"
    said = [line.strip() for line in ran.out.splitlines()]
    assert said[:2] == [f"transfer: {kept}", f"transfer: {adapted}"], ran.out
    shown = " ".join(cli("runs", "show", "1").out.split())  # the table's wrapping undone
    assert f"transfer │ {kept}" in shown and f"transfer │ {adapted}" in shown, shown


# --- C3 (P1 C6): the API's own arguments in its fixes ----------------------------------------


@pytest.mark.parametrize(
    ("module", "options", "fix"),
    [
        (
            nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).half(),
            {},
            "count it at fp16: dtype='fp16'",
        ),
        (
            nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).requires_grad_(False),
            {"train": True},
            "its forward alone is still counted: train=False",
        ),
        (
            nn.Flatten(),
            {"train": True, "macs_convention": "fvcore"},
            "train=False, or count the training step with the dlperf convention",
        ),
    ],
    ids=["half", "frozen", "peer training step"],
)
def test_c3_the_api_names_its_own_arguments(
    module: nn.Module, options: dict[str, object], fix: str
) -> None:
    """Before: '--precision fp16 (analyze.precision)', 'leave out --train, or analyze.train'
    with model.weights and model.transfer, 'leave out analyze.train'."""
    with pytest.raises(UserError) as refused:
        dlperf.analyze(module, (1, 8, 8), **options)  # type: ignore[arg-type]
    said = str(refused.value)
    assert fix in said, said
    for cli_only in ("--", "analyze.train", "analyze.precision", "model."):
        assert cli_only not in said, said
