"""Transfer learning: starting weights (run:ID, files, torchvision names offline), the new
head, the adapted first convolution, real freezing and the backbone's learning rate. The
offline study (pre-train on mnist5k, transfer to digits) is in tests/scenarios/."""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from dlperf.config import DataConfig, TrainConfig
from dlperf.data import load_data
from dlperf.engine.step import build_step
from dlperf.errors import UserError
from dlperf.models import create_model
from dlperf.models.transfer import (
    adapt_first_conv,
    freeze_backbone,
    head_name,
    load_weights,
    set_train_mode,
)
from dlperf.store import RunStore
from tests.conftest import CliResult, TrainedRun

CPU = torch.device("cpu")


def resnet(classes: int = 10, channels: int = 1) -> nn.Module:
    """A CIFAR ResNet-20 (batch norms included) for 8x8 images."""
    model = create_model("resnet20", num_classes=classes, in_channels=channels)
    model(torch.zeros(2, channels, 8, 8))
    return model


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(16, 1, 8, 8, generator=g), torch.randint(4, (16,), generator=g))] * n


def test_feature_extraction_freezes_for_real() -> None:
    """Backbone weights and batch-norm statistics bit-identical after steps, no gradients,
    and no backward pass reaching the backbone; the head trains."""
    torch.manual_seed(0)
    model = resnet(classes=4)
    load_weights(model, resnet(classes=10).state_dict(), "a resnet20")
    freeze_backbone(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    reached = []
    model.layers[0].register_full_backward_hook(lambda *_: reached.append("block"))
    head_inputs = []
    model.fc.register_forward_hook(lambda _m, inputs, _out: head_inputs.append(inputs[0]))
    step = build_step(model, TrainConfig(lr=0.1), "fp32", CPU, steps_per_epoch=3)
    assert step.optimizer.param_groups[0]["params"] == list(model.fc.parameters())
    set_train_mode(model)
    for x, y in batches(3):
        step(x, y)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if not k.startswith("fc."))
    assert not torch.equal(before["fc.weight"], after["fc.weight"])
    assert all(p.grad is None for n, p in model.named_parameters() if not n.startswith("fc."))
    assert not reached and not any(x.requires_grad for x in head_inputs)
    assert not model.bn1.training and model.fc.training


def test_a_frozen_backbone_keeps_its_batch_norms_in_eval_and_dropout_in_train() -> None:
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4, affine=False), nn.BatchNorm2d(4), nn.Dropout(0.5)
    )
    model.append(nn.Sequential(nn.Flatten(), nn.Linear(4 * 36, 3)))
    freeze_backbone(model)
    set_train_mode(model)
    assert [m.training for m in model[:4]] == [False, False, False, True]
    assert model[4][1].training


def test_train_mode_without_frozen_parameters_is_plain_train() -> None:
    model = create_model("smallcnn", num_classes=3)
    model.eval()
    set_train_mode(model)
    assert all(m.training for m in model.modules())


def test_the_head_is_new_and_fits_the_classes() -> None:
    source = resnet(classes=10)
    model = resnet(classes=3)
    notes = load_weights(model, source.state_dict(), "source")
    assert head_name(model) == "fc" and model.fc.out_features == 3
    assert torch.equal(model.conv1.weight, source.conv1.weight)
    assert notes == ["head fc new, sized for 3 classes"]
    assert head_name(create_model("smallcnn")) == "10"


@pytest.mark.parametrize(("given", "wanted"), [(3, 1), (1, 3)])
def test_the_first_conv_answers_a_grey_image_as_before(given: int, wanted: int) -> None:
    source, model = resnet(channels=given), resnet(channels=wanted)
    notes = load_weights(model, source.state_dict(), "source")
    grey = torch.rand(2, 1, 8, 8)
    with torch.no_grad():
        before = source.conv1(grey.expand(-1, given, -1, -1))
        after = model.conv1(grey.expand(-1, wanted, -1, -1))
    torch.testing.assert_close(after, before)
    assert f"weights for {given} input channels summed and spread over {wanted}" in notes[1]
    w = torch.randn(4, 3, 3, 3)
    assert torch.equal(adapt_first_conv(w, 1), w.sum(1, keepdim=True))


def test_weights_that_do_not_fit_are_named() -> None:
    with pytest.raises(UserError) as info:
        load_weights(resnet(), create_model("resnet32").state_dict(), "run 7")
    message = str(info.value)
    assert message.startswith("model.weights run 7 do not fit the model: ")
    assert "51 of another shape (weights vs model) (layers.3.conv1.weight 16x16x3x3 vs " in message
    assert "72 not in the model (layers.9.conv1.weight, layers.9.bn1.weight, " in message


def test_backbone_lr_scale_makes_two_groups_one_schedule() -> None:
    model = resnet()
    cfg = TrainConfig(lr=0.1, backbone_lr_scale=0.1, epochs=2)
    cfg.schedule.kind = "cosine"
    step = build_step(model, cfg, "fp32", CPU, steps_per_epoch=2)
    head, backbone = step.optimizer.param_groups
    assert head["params"] == list(model.fc.parameters()) and len(backbone["params"]) > 10
    assert (head["lr"], backbone["lr"]) == pytest.approx((0.1, 0.01))
    step(*batches(1)[0])
    lrs = [g["lr"] for g in step.optimizer.param_groups]
    assert lrs[0] < 0.1 and lrs[1] == pytest.approx(lrs[0] * 0.1)


def test_in_memory_images_are_resized_once_with_their_statistics() -> None:
    small, big = load_data(DataConfig(name="digits")), load_data(DataConfig(image_size=28))
    assert big.shape == (1, 28, 28) and big.train.images.dtype == torch.uint8
    assert big.train.images.shape == (len(small.train), 1, 28, 28)
    expected_mean = (big.train.images.float() / 255).mean().item()
    assert big.mean[0] == pytest.approx(expected_mean, abs=1e-4) and big.std != small.std


def test_start_from_a_run_or_a_file(
    tmp_path: Path, tiny_file: Path, cli: Callable[..., CliResult], trained_digits: TrainedRun
) -> None:
    store, run_id, _ = trained_digits.copy_to(tmp_path)  # the store the CLI opens
    source_data = store.get_run(run_id).summary["data"]
    source = torch.load(next(Path(a["path"]) for a in store.artifacts(run_id)), weights_only=True)[
        "model"
    ]
    torch.save({"state_dict": source}, tmp_path / "wrapped.pt")
    fast = ["--set", "train.epochs=1", "--set", "data.limit=64", "--json"]
    for spec in (f"run:{run_id}", "run:last:smallcnn", "wrapped.pt"):
        result = cli("run", str(tiny_file), "--set", f"model.weights={spec}", *fast)
        assert result.code == 0, result.err
        stored = store.get_run(json.loads(result.out)["run_id"])
        assert stored.config["model"]["transfer"] == "finetune"
        assert stored.summary["transfer"]["notes"] == ["head 10 new, sized for 10 classes"]
        if spec.startswith("run:"):  # the source run's statistics, not the data's own
            assert stored.summary["data"] == source_data


@pytest.fixture
def tiny_file(tmp_path: Path, tiny_exp: Callable[..., Path]) -> Path:
    return tiny_exp(epochs=1, name="tiny.toml")


def test_a_run_without_checkpoint_is_refused(
    tiny_file: Path, cli: Callable[..., CliResult], store: RunStore
) -> None:
    first = cli("run", str(tiny_file), "--set", "run.checkpoint=false", "--set", "data.limit=64")
    assert first.code == 0, first.err
    result = cli("run", str(tiny_file), "--set", "model.weights=run:1")
    assert result.code == 2
    assert result.err.strip() == (
        "error: run 1 has no checkpoint to start from (train it with run.checkpoint = true)"
    )
    assert len(store.list_runs()) == 1


def test_offline_torchvision_weights_fail_in_one_line(
    tiny_file: Path,
    cli: Callable[..., CliResult],
    store: RunStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An empty hub cache and a download that fails at once: no network is touched."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))

    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    name = ["--set", "model.name=resnet18", "--set", "model.weights=IMAGENET1K_V1"]
    result = cli("run", str(tiny_file), *name)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1
    cache = tmp_path / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    assert result.err.strip() == (
        "error: model.weights resnet18 IMAGENET1K_V1 could not be downloaded from "
        "https://download.pytorch.org/models/resnet18-f37072fd.pth "
        "([Errno -3] Temporary failure in name resolution) "
        f"(offline: copy the file to {cache}, or give model.weights = a state-dict file)"
    )
    assert store.list_runs() == []


def test_small_images_into_an_imagenet_network_warn(
    tiny_file: Path, cli: Callable[..., CliResult], store: RunStore
) -> None:
    """Scratch needs no download, yet takes the weights' statistics and warns of the size."""
    result = cli(
        "run",
        str(tiny_file),
        *("--set", "model.name=resnet18", "--set", "model.weights=IMAGENET1K_V1"),
        *("--set", "model.transfer=scratch", "--set", "data.image_size=32"),
        # one thread: two would wait on each other at every convolution on a busy machine
        *("--set", "data.limit=64", "--set", "run.threads=1", "--json"),
    )
    assert result.code == 0, result.err
    assert (
        "warning: digits images are 32x32 but resnet18 IMAGENET1K_V1 was trained at 224x224: "
        "features at under half their resolution transfer poorly (32x32 into an ImageNet "
        "network is a classic way to get chance accuracy); set data.image_size = 224"
    ) in " ".join(result.err.split())
    summary = store.get_run(json.loads(result.out)["run_id"]).summary
    assert summary["data"]["shape"] == [1, 32, 32]
    assert summary["data"]["mean"] == pytest.approx([(0.485 + 0.456 + 0.406) / 3])
    assert summary["transfer"]["mode"] == "scratch" and summary["transfer"]["notes"] == []


def test_keep_head_loads_the_weights_head_and_refuses_other_classes() -> None:
    source = resnet(classes=10)
    model = resnet(classes=10)
    notes = load_weights(model, source.state_dict(), "run 3", keep_head=True)
    assert notes == ["head fc kept from the weights (10 classes)"]
    assert torch.equal(model.fc.weight, source.fc.weight)
    with pytest.raises(UserError, match=r"fc\.weight 10x64 vs 5x64"):
        load_weights(resnet(classes=5), source.state_dict(), "run 3", keep_head=True)
