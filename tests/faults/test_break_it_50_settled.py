"""Round 48, left until round 50: `export` and `report` exited 143 for one stop signal that
came once their output was in place (the model and its metadata published, the site's index
renamed in), as `calibrate` had before round 45: the output whole, the exit code saying it had
been stopped. Their publish now settles the outcome, as calibrate's save does: a stop before
it keeps the old output and exits 128 + the signal; one after it no longer counts (exit 0, and
what they print is printed); a second stop still ends what is left (round 48's rule).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.deploy import export as exporting
from dlperf.report import site
from tests.conftest import CliResult, TrainedRun
from tests.faults.test_break_it_48_sweep_stop import stopped_as_printed


@pytest.mark.parametrize(
    ("published", "sig", "code"),
    [(True, signal.SIGINT, 0), (True, signal.SIGTERM, 0), (False, signal.SIGTERM, 143)],
)
def test_a_stop_once_the_export_is_published_no_longer_counts(
    cli: Callable[..., CliResult],
    trained_digits: TrainedRun,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    published: bool,
    sig: int,
    code: int,
) -> None:
    _, run_id, _ = trained_digits.copy_to(tmp_path)
    publish = exporting._publish

    def signalled(staged: Path, out: Path) -> None:
        if published:
            publish(staged, out)
            os.kill(os.getpid(), sig)  # the model and its metadata are in place
        else:
            os.kill(os.getpid(), sig)  # a stop before: the publish refuses to begin
            publish(staged, out)

    monkeypatch.setattr(exporting, "_publish", signalled)
    r = cli("export", str(run_id), "--out", str(tmp_path / "m.onnx"), "--json")
    # before, once published: 130 or 143, and nothing printed
    assert r.code == code, (r.code, r.err)
    assert (tmp_path / "m.onnx").is_file() == published
    if published:
        assert json.loads(r.out)["path"] == str(tmp_path / "m.onnx")


def test_a_stop_once_the_site_is_in_place_ends_the_report_done(
    cli: Callable[..., CliResult],
    trained_digits: TrainedRun,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, run_id, _ = trained_digits.copy_to(tmp_path)
    remove = site._remove_staging

    def signalled(*args: Any) -> str | None:
        os.kill(os.getpid(), signal.SIGTERM)  # the pages and the index are in `out`
        return remove(*args)

    monkeypatch.setattr(site, "_remove_staging", signalled)
    out = tmp_path / "site"
    r = cli("report", str(run_id), "--out", str(out))
    assert r.code == 0, (r.code, r.err)  # before: 143
    assert (out / "index.html").is_file() and (out / f"run-{run_id}.html").is_file()
    assert str(out) in r.out


def test_a_stop_after_the_staleness_study_is_stored_does_not_unsay_it(
    cli: Callable[..., CliResult],
    tiny_exp: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Round 49 settled `staleness --train` with distill, and tested distill's alone."""
    stopped_as_printed(monkeypatch, 1)
    r = cli("staleness", "--train", str(tiny_exp(epochs=1)), "--learners", "2", "--json")
    assert r.code == 0, (r.code, r.err)  # before round 49: 143, no document
    document = json.loads(r.out)
    assert {"study_id", "sync", "async", "figure"} <= set(document), document
