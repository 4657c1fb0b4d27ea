"""Break-it round 29 (P1), the weights users bring, follow-ups: cause C8, and C7 in a sweep.

C8. Weights holding a sparse tensor were refused blaming the model's state_dict() and
load_state_dict() overrides (it has none), with torch's copy_() error. Now one line names the
sparse tensors and says to save them dense.
C7 (sweep). A sweep point's key was its stored config hashed now, which reads the weights file
as it is now: a point trained before the file changed was reused ("1 finished before"). Now a
point whose run recorded other bytes of its weights file (`weights_file_sha256`) trains again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlperf.errors import UserError
from dlperf.models.transfer import load_weights
from dlperf.store import RunStore
from dlperf.sweep import load_sweep, run_sweep
from tests.faults.test_break_it_29_weights import Net, experiment
from tests.sweep.test_runner import Log


def test_c8_sparse_weights_are_refused_naming_them() -> None:
    weights = Net().state_dict()
    weights["conv.weight"] = weights["conv.weight"].to_sparse()
    weights["fc.bias"] = weights["fc.bias"].to_sparse()
    with pytest.raises(UserError) as refused:
        load_weights(Net(), weights, "w.pt", keep_head=True)
    assert refused.value.message == (
        "model.weights w.pt holds sparse tensors (conv.weight, fc.bias): the model's layers "
        "take dense ones"
    )
    assert refused.value.hint == (
        "save them dense: torch.save({k: v.to_dense() for k, v in weights.items()}, path)"
    )


def test_c7_a_sweep_point_trained_from_other_bytes_of_its_weights_trains_again(
    store: RunStore, tmp_path: Path
) -> None:
    exp = experiment(tmp_path)
    weights = tmp_path / "w.pt"
    torch.save(Net().state_dict(), weights)
    path = tmp_path / "sw.toml"
    path.write_text(
        f'base = "{exp}"\nname = "w"\n[grid]\n"train.lr" = [0.05]\n'
        f'[set]\n"model.weights" = "{weights}"\n'
    )

    def swept() -> list[str]:
        log = Log()
        assert run_sweep(load_sweep(path), store, reporter=log).points[0].status == "finished"
        return log.lines

    assert "sweep 'w', study 1: 1 points, 0 finished before, 1 to run" in swept()
    assert "sweep 'w', study 1: 1 points, 1 finished before, 0 to run" in swept()  # same bytes
    torch.save({k: v + 1 for k, v in Net().state_dict().items()}, weights)
    said = swept()
    assert said[:2] == [
        "sweep 'w': its points differ from those of study 1 (its model.weights file changed "
        "since they trained): starting a new study (--resume ID joins one anyway)",
        "sweep 'w', study 2: 1 points, 0 finished before, 1 to run",
    ]
    assert len(store.list_runs()) == 2
