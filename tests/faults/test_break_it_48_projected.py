"""Break-it round 48, T1 C3: `export` of a model with an nn.LSTM(..., proj_size=k) failed in
ONNX Runtime's words at the parity check ("Input initial_c must have shape {1,1,4}. Actual:
{1,1,16}"), exit 1, with no cause or fix; under --dynamic-batch it added a batch-size hint that
was wrong and whose fix failed the same way. ONNX's LSTM operator has no projection: the export
is refused before it starts, in one line naming the layer and the fix, exit 2, nothing written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.faults.test_break_it_48_notices import MODEL


@pytest.mark.parametrize("flags", [[], ["--dynamic-batch"]], ids=["fixed", "dynamic"])
def test_a_projected_lstm_is_refused_before_the_export(
    cli: Callable[..., CliResult], tmp_path: Path, flags: list[str]
) -> None:
    (tmp_path / "proj.py").write_text(MODEL)
    r = cli("export", "proj.py:Net", "--input", "1,8,8", "--out", "p.onnx", *flags)
    assert r.code == 2, r.err
    assert r.err.strip().splitlines() == [
        "error: model 'proj.py:Net' cannot be exported to ONNX: its nn.LSTM 'rnn' has "
        "proj_size=4, which ONNX's LSTM operator cannot express (drop proj_size and follow "
        "the LSTM with an nn.Linear of that size)"
    ]
    assert not list(tmp_path.glob("p.onnx*"))
