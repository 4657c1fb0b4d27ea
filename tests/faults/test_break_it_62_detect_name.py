"""Break-it round 62, V2 cause 4: `dlperf detect finetune ... --set run.name=mine` was taken and
not used: the run was stored as "finetune ssdlite320_mobilenet_v3_large on shapes" (`detect
eval` alike). Both now name their run by run.name where it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_break_it_21_detect import shapes

Cli = Callable[..., CliResult]


def test_detect_eval_takes_run_name(cli: Cli, store: RunStore, tmp_path: Path) -> None:
    import torch
    from torchvision.models import detection

    root = shapes(tmp_path)
    weights = tmp_path / "det.pt"
    model = detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=3
    )
    torch.save(model.state_dict(), weights)
    common = ["--weights", str(weights), "--size", "96", "--threads", "1", "--val-split", "train"]
    done = cli("detect", "eval", str(root), *common, "--set", "run.name=mine")
    assert done.code == 0, done.err
    done = cli("detect", "eval", str(root), *common)
    assert done.code == 0, done.err
    names = [run.name for run in sorted(store.list_runs(), key=lambda r: r.id)]
    assert names == ["mine", f"eval ssdlite320_mobilenet_v3_large on {root.name}"]
