"""Break-it round 23, P1 cause C7's last part: a stored run whose model file is gone.

`dlperf run --resume N` and `dlperf export N` of a run trained from a model file that has
since been deleted said "model file ... not found (use path/to/file.py:factory)", a fix a
stored run cannot take (it keeps its spec). Both rebuild the model under
`registry.rebuilding("run N")`, so the hint says to restore the file the run was trained with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_17_resume import MODEL, _killed_run
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def test_a_resume_of_a_run_whose_model_file_is_gone_says_restore_it(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    model = tmp_path / "lz.py"
    model.write_text(MODEL)
    run_id = _killed_run(store, tmp_path, f"{model}:net", {"name": "digits", "limit": 64})
    model.unlink()
    one_line(
        cli("run", "--resume", str(run_id)),
        2,
        f"error: model file {model} not found (restore the file run {run_id} was trained with",
    )


def test_an_export_of_a_run_whose_model_file_is_gone_says_restore_it(
    cli: Cli, tmp_path: Path, store: RunStore
) -> None:
    model = tmp_path / "lz.py"
    model.write_text(MODEL)
    run_id = _killed_run(store, tmp_path, f"{model}:net", {"name": "digits", "limit": 64})
    store.finish_run(run_id, "finished")  # an export takes a finished run's checkpoint
    model.unlink()
    one_line(
        cli("export", str(run_id), "--out", str(tmp_path / "m.onnx")),
        2,
        f"error: model file {model} not found (restore the file run {run_id} was trained with",
    )
    assert not (tmp_path / "m.onnx").exists()
