"""Break-it round 56, fixer G7: a full disk while writing a profiler trace, an export's
metadata, and under `runs repair`'s read of a sound store (tester T1's causes C1-C3). Each on a
small tmpfs filled to its last byte (`fill`), skipped where mounting is refused.

T1 C1. `run --profile` whose trace met a full disk said "error: No space left on device (the
system named no file: ...)", stored the run's error as Python's "OSError: [Errno 28] No space
left on device", and left a cut-off rank0.pt.trace.json.gz (torch gzipped straight onto the
final name). Now the trace is written beside its name and renamed when whole: the line and
the stored error name the trace ("cannot use .../rank0.pt.trace.json.gz: No space left on
device"), and no part of it is left.
T1 C2. `export --out` whose model and weights fitted but whose metadata (embedded in the model
again, and the MODEL.onnx.json sidecar) met a full disk said "the system named no file". Now
it names `--out`, as the refused export itself does; the earlier export stays whole, and
nothing of this one is left.
T1 C3. `runs repair` of a sound store on a full disk said "nothing can be read (disk I/O
error) (restore it from a backup)", exit 2: SQLite's read-only open could not grow the store's
-shm. Now "cannot use STORE: No space left on device", exit 1, as every other command on that
store says, and with room again the same repair copies every run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dlperf.deploy import meta as meta_io
from dlperf.engine.profiler import trace_name
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import earlier_run, fill, mounted, one_line

Cli = Callable[..., CliResult]
FULL = "No space left on device"


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs at tmp_path/small, unmounted after the test."""
    with mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", target=tmp_path / "small") as small:
        yield small


# --- C1: the profiler's trace -----------------------------------------------------------------


def test_run_profile_on_a_full_disk_says_and_stores_the_traces_line(
    cli: Cli, store: RunStore, small: Path, tiny_exp: Callable[..., Path]
) -> None:
    """The trace is the run's only file on the full disk (no checkpoint): the line and the
    stored error name it, and no cut-off trace or temporary is left in its directory."""
    exp = tiny_exp(epochs=1, extra=f'out_dir = "{small}"\ncheckpoint = false\n')
    exp.write_text(exp.read_text().replace('name = "digits"', 'name = "digits"\nlimit = 192'))
    fill(small)
    result = cli("run", str(exp), "--profile", "--set", "run.profile.active=1")
    (trace_dir,) = small.rglob("trace")
    said = f"cannot use {trace_dir / trace_name('rank0')}: {FULL}"
    one_line(result, 1, said)
    failed = store.get_run(1)
    assert failed.status == "failed" and failed.error == said
    assert list(trace_dir.iterdir()) == []


# --- C2: an export's metadata -----------------------------------------------------------------


@pytest.mark.parametrize("refused", ["model", "sidecar"])
def test_an_exports_metadata_refused_by_a_full_disk_names_out(
    cli: Cli, small: Path, monkeypatch: pytest.MonkeyPatch, refused: str
) -> None:
    """The disk fills once the exporter has written the model and its weights: just before
    the metadata is embedded in the model again, or before the sidecar is written."""
    out = small / "ex" / "m.onnx"
    out.parent.mkdir()
    earlier = {
        name: f"earlier {name}".encode() for name in ("m.onnx", "m.onnx.data", "m.onnx.json")
    }
    for name, data in earlier.items():
        (out.parent / name).write_bytes(data)
    if refused == "model":
        digests = meta_io.weights_digests

        def filled(*args: Any) -> Any:
            found = digests(*args)
            fill(small)
            return found

        monkeypatch.setattr(meta_io, "weights_digests", filled)
    else:
        sidecar = meta_io.sidecar

        def filled_then(model_path: Path) -> Path:
            fill(small)
            return sidecar(model_path)

        monkeypatch.setattr(meta_io, "sidecar", filled_then)
    result = cli("export", "smallcnn", "--input", "1,8,8", "--out", str(out))
    one_line(result, 1, f"cannot use {out}: {FULL}")
    (small / "filler").unlink()
    assert {p.name: p.read_bytes() for p in out.parent.iterdir()} == earlier


# --- C3: runs repair's read of a sound store ---------------------------------------------------


def test_runs_repair_of_a_sound_store_on_a_full_disk_says_the_disk_is_full(
    cli: Cli, small: Path, tmp_path: Path
) -> None:
    db = small / "s.db"
    source = RunStore.open(str(db))
    run_id = earlier_run(source)
    source.engine.dispose()  # its -wal and -shm go with the last connection
    filler = fill(small)
    repaired = tmp_path / "repaired.db"
    one_line(cli("--db", str(db), "runs", "repair", str(repaired)), 1, f"cannot use {db}: {FULL}")
    assert not repaired.exists()
    filler.unlink()  # the store was sound all along: with room, every run is copied
    assert cli("--db", str(db), "runs", "repair", str(repaired)).code == 0
    copy = RunStore.open(str(repaired))
    assert [r.id for r in copy.list_runs()] == [run_id]
    copy.engine.dispose()
