from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest
import torch

from dlperf.cli import models as cli_models
from dlperf.errors import UserError
from dlperf.models import create_model, list_models
from dlperf.shipped import shipped


def params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("name", "expected"),
    # He et al. 2016, table 6: 0.27M, 0.46M, 0.66M, 0.85M, 1.7M.
    [
        ("resnet20", 269_722),
        ("resnet32", 464_154),
        ("resnet44", 658_586),
        ("resnet56", 853_018),
        ("resnet110", 1_727_962),
    ],
)
def test_cifar_resnets_match_the_paper(name: str, expected: int) -> None:
    model = create_model(name)
    assert params(model) == expected
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def test_resnet18_for_32x32_keeps_resolution_in_the_stem() -> None:
    model = create_model("resnet18_cifar", num_classes=100)
    assert model.conv1.kernel_size == (3, 3) and model.conv1.stride == (1, 1)
    assert isinstance(model.maxpool, torch.nn.Identity)
    assert params(model) == 11_220_132
    assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 100)


def test_smallcnn_adapts_to_the_input() -> None:
    model = create_model("smallcnn", num_classes=10, in_channels=1)
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert params(model) == 1_199_882  # the Keras MNIST CNN's 1.2M parameters


def test_torchvision_zoo_with_other_heads_and_stems() -> None:
    assert "resnet50" in list_models()["torchvision"]
    model = create_model("resnet18", num_classes=7, in_channels=1)
    assert model.conv1.in_channels == 1 and model.fc.out_features == 7
    assert model(torch.zeros(1, 1, 64, 64)).shape == (1, 7)


def test_user_file_factory(tmp_path: Path) -> None:
    path = tmp_path / "mine.py"
    path.write_text(
        "import torch\n"
        "def build(num_classes):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(num_classes))\n"
        "def broken():\n"
        "    raise ValueError('no')\n"
        "def not_a_model():\n"
        "    return 3\n"
    )
    model = create_model(f"{path}:build", num_classes=4)
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 4)
    # The factory's own `raise` is the model's exception, as it is (the CLI shows its frames).
    with pytest.raises(ValueError, match="no"):
        create_model(f"{path}:broken")
    with pytest.raises(UserError, match=r"returned int, not a torch\.nn\.Module"):
        create_model(f"{path}:not_a_model")
    with pytest.raises(UserError, match="has no factory 'missing'"):
        create_model(f"{path}:missing")
    with pytest.raises(UserError, match="not found"):
        create_model(f"{tmp_path}/absent.py:build")


def test_unknown_names_and_arguments() -> None:
    with pytest.raises(UserError, match=r"unknown model 'resnet2' \(did you mean .*resnet20.*\?\)"):
        create_model("resnet2")
    with pytest.raises(
        UserError, match=r"does not accept width \(accepted: num_classes, in_channels\)"
    ):
        create_model("resnet20", width=2)


# --- issue 30: the course's networks are built in ---------------------------------------


def test_alexnet_as_the_paper_draws_it() -> None:
    """Krizhevsky et al. 2012 on 227x227, the two-GPU grouping included."""
    model = create_model("alexnet_paper", num_classes=None)
    assert params(model) == 60_965_224
    assert model.eval()(torch.zeros(1, 3, 227, 227)).shape == (1, 1000)
    assert params(create_model("alexnet_paper", num_classes=10)) == 56_909_194


def test_inception_modules_take_their_filter_counts() -> None:
    """GoogLeNet's inception (3a) counts by default; concatenated channels: naive 64 + 128 +
    32 + the 256 pooled; reduced 64 + 128 + 32 + 32."""
    x = torch.zeros(1, 256, 32, 32)
    assert create_model("inception_naive", in_channels=256)(x).shape == (1, 480, 32, 32)
    assert create_model("inception_reduced", in_channels=256)(x).shape == (1, 256, 32, 32)
    # 1x1: 256*64+64, 3x3: 256*128*9+128, 5x5: 256*32*25+32
    assert params(create_model("inception_naive", in_channels=256)) == 516_320
    narrow = create_model("inception_naive", in_channels=256, c3x3=8)
    assert narrow(x).shape == (1, 64 + 8 + 32 + 256, 32, 32)
    with pytest.raises(UserError, match=r"does not accept c7x7 \(accepted: in_channels, c1x1"):
        create_model("inception_reduced", c7x7=3)


def test_conv_stack_takes_n_and_f() -> None:
    model = create_model("conv_stack", n=3, f=5)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.kernel_size for c in convs] == [(5, 5)] * 3
    assert model(torch.zeros(1, 3, 16, 16)).shape == (1, 64, 16, 16)
    with pytest.raises(UserError, match="model 'conv_stack': n and f must be at least 1"):
        create_model("conv_stack", n=0)


def test_names_table_says_what_the_registry_and_torchvision_say() -> None:
    """`dlperf models` prints names.toml so as not to import torch; it must not drift."""
    table, live = shipped("models/names.toml"), list_models()
    assert table["dlperf"] == live["dlperf"]
    installed = metadata.version("torchvision")
    assert table["torchvision_version"] == installed, (
        f"write torchvision {installed}'s names into src/dlperf/models/names.toml: "
        f"{live['torchvision']}"
    )
    assert table["torchvision"] == live["torchvision"]


def test_names_come_from_torchvision_when_the_table_is_for_another_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stale = {"torchvision_version": "0.1", "dlperf": ["gone"], "torchvision": ["gone"]}
    monkeypatch.setattr(cli_models, "shipped", lambda path: stale)
    assert cli_models.model_names() == list_models()


def test_a_model_file_rewritten_at_once_runs_its_new_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With bytecode caching on (Python's default; `make test` turns it on), a model file is
    still compiled from its source at each import: a .pyc records its source's mtime in whole
    seconds and its size, so a file rewritten within the second at the same size ran its old
    code, and a __pycache__ appeared in the user's directory."""
    monkeypatch.setattr("sys.dont_write_bytecode", False)
    path = tmp_path / "width.py"
    factory = "import torch\ndef build(num_classes):\n    return torch.nn.Linear(1, {})\n"
    path.write_text(factory.format(16))
    stat = path.stat()
    assert create_model(f"{path}:build", num_classes=2).out_features == 16
    path.write_text(factory.format(32))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same second, the same size
    assert create_model(f"{path}:build", num_classes=2).out_features == 32
    assert not (tmp_path / "__pycache__").exists()
