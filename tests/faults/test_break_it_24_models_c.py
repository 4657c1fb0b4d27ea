"""The twenty-fourth break-it round, P1 (the user's own models), fixer C: the seed a model
file's import overrode, the process-global torch settings a model file left behind, relative
imports in a model file beside its package's modules, and a dynamically quantized model.

- C5: a model file's import-time `torch.manual_seed(1)` overrode run.seed (build_model seeded
  before create_model imported the file): every seed of a sweep started from the same
  weights. The seed is now set after the import, just before the factory is called.
- C6: a model file's anomaly mode, deterministic algorithms and flush-denormal setting stayed
  in an API caller's process, unsaid (and a run's timings were taken under anomaly mode). They
  are now put back with a line each, as the default dtype and the recursion limit are.
- C7: `from .layers import Head` in pkg/model.py failed, "attempted relative import with no
  known parent package": a plain model file was imported as a top-level module. It is now a
  submodule of its directory's package, which docs/run.md says it is imported as.
- C14: a quantize_dynamic model was refused as "has no parameters to train (give it at least
  one layer with weights ...)": its quantized Linear layers are now named, with the fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlperf.engine.build import build_model
from dlperf.errors import UserError
from dlperf.models.registry import create_model, noting
from tests.engine.test_build import FakeData, experiment
from tests.faults.test_break_it_21_models import _model

CPU = torch.device("cpu")


# --- C5: run.seed, whatever the model file seeds at import ------------------------------------


def _weights(spec: str, seed: int) -> torch.Tensor:
    exp = experiment(spec, run={"seed": seed})
    model = build_model(exp, FakeData(), CPU)  # type: ignore[arg-type]
    return model[1].weight.detach().clone()


def test_run_seed_sets_the_initial_weights_of_a_file_that_seeds_at_import(
    tmp_path: Path,
) -> None:
    seeds = _model(tmp_path, "import torch\ntorch.manual_seed(1)", "seeds.py")
    plain = _model(tmp_path, "", "plain.py")
    five, six = _weights(seeds, 5), _weights(seeds, 6)
    # before: identical weights for every run.seed (the file's seed 1 won)
    assert not torch.equal(five, six)
    # run.seed alone decides them, as for a file that seeds nothing
    assert torch.equal(five, _weights(plain, 5)) and torch.equal(six, _weights(plain, 6))


# --- C6: anomaly mode, deterministic algorithms, flush denormal ----------------------------------

SETS_GLOBALS = """
import torch
torch.autograd.set_detect_anomaly(True)
torch.use_deterministic_algorithms(True)
torch.set_flush_denormal(True)
"""


def _flushes() -> bool:
    """Whether this thread's CPU flushes denormal results to zero (torch has no getter)."""
    return float((torch.tensor([1e-300], dtype=torch.float64) * 1e-20)[0]) == 0.0


@pytest.mark.parametrize("where", ["import", "factory"])
def test_process_global_torch_settings_are_put_back_with_a_line(tmp_path: Path, where: str) -> None:
    path = tmp_path / "model.py"
    if where == "import":
        spec = _model(tmp_path, SETS_GLOBALS)
    else:
        body = "\n".join(f"    {line}" for line in SETS_GLOBALS.strip().splitlines())
        path.write_text(
            "import torch.nn as nn\n"
            "def build(num_classes=10, in_channels=1):\n"
            f"{body}\n"
            "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 64, num_classes))\n"
        )
        spec = f"{path}:build"
    try:
        with noting() as notes:
            create_model(spec, num_classes=10, in_channels=1)
        after = (
            torch.is_anomaly_enabled(),
            torch.are_deterministic_algorithms_enabled(),
            _flushes(),
        )
    finally:  # never left on for the rest of the test session
        torch.autograd.set_detect_anomaly(False)
        torch.use_deterministic_algorithms(False)
        torch.set_flush_denormal(False)
    assert after == (False, False, False)  # before: (True, True, True), unsaid
    said = " | ".join(notes)
    assert len(notes) == 3, said
    when = "as it was imported" if where == "import" else "in its factory"
    assert all(when in note and "put back" in note for note in notes), said
    for what in ("anomaly detection", "deterministic algorithms", "flush denormal"):
        assert what in said, said


# --- C7: relative imports in a model file that is not its package's __init__.py --------------


def test_a_model_file_beside_its_package_modules_imports_them_relatively(
    tmp_path: Path,
) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "deep.py").write_text("K = 2\n")
    (pkg / "layers.py").write_text(
        "import torch.nn as nn\nfrom .sub.deep import K\n"
        "class Head(nn.Linear):\n"
        "    def __init__(self, i, o): super().__init__(i, o * K // K)\n"
    )
    (pkg / "model.py").write_text(
        "from .layers import Head\nfrom . import layers\nimport layers as same\n"
        "import torch.nn as nn\n"
        "def build(num_classes=10, in_channels=1):\n"
        "    assert layers.Head is Head and same.Head is Head\n"
        "    return nn.Sequential(nn.Flatten(), Head(64 * in_channels, num_classes))\n"
    )
    # before: "failed to import: ImportError: attempted relative import with no known parent
    # package", for the layers file named itself too
    model = create_model(f"{pkg / 'model.py'}:build", num_classes=10, in_channels=1)
    assert type(model[1]).__name__ == "Head"
    head = create_model(f"{pkg / 'layers.py'}:Head", num_classes=None, i=4, o=3)
    assert head.out_features == 3
    # A model file named as the module it imports still gets that module, not itself
    spec = _model(tmp_path, "import colorsys\nassert colorsys.rgb_to_hls", "colorsys.py")
    create_model(spec, num_classes=10, in_channels=1)


# --- C14: a dynamically quantized model ------------------------------------------------------

QUANTIZED = """
import torch
def quantized(num_classes=10, in_channels=1):
    m = nn.Sequential(nn.Flatten(), nn.Linear(64 * in_channels, 16), nn.ReLU(),
                      nn.Linear(16, num_classes))
    return torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8)
"""


# torch's deprecation of quantized tensors and of torch.ao.quantization
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
def test_a_quantize_dynamic_model_is_refused_naming_its_quantized_module(
    tmp_path: Path,
) -> None:
    _model(tmp_path, QUANTIZED)
    exp = experiment(f"{tmp_path / 'model.py'}:quantized")
    with pytest.raises(UserError) as refused:
        build_model(exp, FakeData(), CPU)  # type: ignore[arg-type]
    said = str(refused.value)
    # before: "has no parameters to train (give it at least one layer with weights ...)"
    assert "no parameters to train" not in said and "give it at least one layer" not in said
    assert "1 (torch.ao.nn.quantized.dynamic Linear) is a quantized module" in said, said
    assert "train the float model" in said and "quantize_dynamic" in said, said
