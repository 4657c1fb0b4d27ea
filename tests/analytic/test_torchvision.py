"""Every torchvision classification weight's metadata against dlperf's count (no download).

`meta["num_params"]` must equal the parameter count and `meta["_ops"]` (torchvision calls
them GFLOPS; they are GMACs of convolutions and matrix products) must equal dlperf's MACs
to the three decimals torchvision prints, at the crop size of the weights' own transforms.

A sibling of a family that is checked here, built by the same builder with the same blocks
(only shallower or deeper, narrower or wider, in other groups or at another crop), proves
nothing the checked one does not: it is left out (`SAME_CODE_AS`, each with the case that runs
its code), and the suite's slowest cases with it. Every other weight is checked.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torchvision
from torchvision.models import get_model_weights, list_models

from dlperf.analytic.counting import analyze_module, build_model

IMAGENET_CLASSES = 1000

SAME_CODE_AS = {
    # depth or width of the same blocks (growth rate and stem width for densenet161)
    "densenet161-224": "densenet121-224",
    "densenet169-224": "densenet121-224",
    "densenet201-224": "densenet121-224",
    # the B family's width/depth multipliers and crop: b3 rounds channels by a width
    # multiplier (b0's is 1.0) at a crop the 224 of the other families does not check
    "efficientnet_b0-224": "efficientnet_b3-300",
    "efficientnet_b1-240": "efficientnet_b3-300",
    "efficientnet_b2-288": "efficientnet_b3-300",
    "efficientnet_b4-380": "efficientnet_b3-300",
    "efficientnet_b5-456": "efficientnet_b3-300",
    "efficientnet_b6-528": "efficientnet_b3-300",
    "efficientnet_b7-600": "efficientnet_b3-300",
    "efficientnet_v2_m-480": "efficientnet_v2_s-384",
    "efficientnet_v2_l-480": "efficientnet_v2_s-384",
    "swin_s-224": "swin_t-224",
    "swin_b-224": "swin_t-224",
    "swin_v2_s-256": "swin_v2_t-256",
    "swin_v2_b-256": "swin_v2_t-256",
    # ViT-H/14 is still checked at 518 (its position embedding sized from the crop), ViT-L at
    # patch 16 (224 and 512) and patch 32 on ViT-B
    "vit_h_14-224": "vit_h_14-518",
    "vit_l_32-224": "vit_b_32-224",
    # ResNet's Bottleneck at other depths, widths (wide_) and group counts (resnext)
    "resnet101-224": "resnet50-224",
    "resnet152-224": "resnet50-224",
    "wide_resnet101_2-224": "wide_resnet50_2-224",
    "resnext101_32x8d-224": "resnext50_32x4d-224",
    "resnext101_64x4d-224": "resnext50_32x4d-224",
    # ConvNeXt's block at other depths and widths
    "convnext_small-224": "convnext_tiny-224",
    "convnext_base-224": "convnext_tiny-224",
    "convnext_large-224": "convnext_tiny-224",
    # RegNet's block at other widths, depths and group widths, at each crop (X without
    # squeeze-excitation, Y with it; torchvision's one builder and block for every size)
    "regnet_x_400mf-224": "regnet_x_8gf-224",
    "regnet_x_800mf-224": "regnet_x_8gf-224",
    "regnet_x_1_6gf-224": "regnet_x_8gf-224",
    "regnet_x_3_2gf-224": "regnet_x_8gf-224",
    "regnet_x_16gf-224": "regnet_x_8gf-224",
    "regnet_x_32gf-224": "regnet_x_8gf-224",
    "regnet_y_400mf-224": "regnet_y_16gf-224",
    "regnet_y_800mf-224": "regnet_y_16gf-224",
    "regnet_y_1_6gf-224": "regnet_y_16gf-224",
    "regnet_y_3_2gf-224": "regnet_y_16gf-224",
    "regnet_y_8gf-224": "regnet_y_16gf-224",
    "regnet_y_32gf-224": "regnet_y_16gf-224",
    "regnet_y_128gf-224": "regnet_y_16gf-224",
    "regnet_y_32gf-384": "regnet_y_16gf-384",
    "regnet_y_128gf-384": "regnet_y_16gf-384",
    # the width multiplier's channel counts
    "mnasnet0_75-224": "mnasnet0_5-224",
    "mnasnet1_0-224": "mnasnet0_5-224",
    "mnasnet1_3-224": "mnasnet0_5-224",
    "shufflenet_v2_x1_0-224": "shufflenet_v2_x0_5-224",
    "shufflenet_v2_x1_5-224": "shufflenet_v2_x0_5-224",
    "shufflenet_v2_x2_0-224": "shufflenet_v2_x0_5-224",
}
"""Cases left out: each (torchvision name-crop) with the checked case that runs its code."""


def _builder_kwargs(name: str, crop: int) -> dict[str, Any]:
    """What torchvision's builder sets when it is given these weights (it is not, here)."""
    if name == "googlenet":
        # The builder drops the auxiliary classifiers when loading weights (aux_logits
        # defaults to False there, True without weights); num_params excludes them.
        return {"aux_logits": False}
    if name.startswith("vit_"):
        # ViT's position embedding has one entry per patch: the builder sizes it from
        # the weights' image size (384 and 518 for the SWAG weights).
        return {"image_size": crop}
    return {}


def _cases() -> list[Any]:
    cases: dict[tuple[str, int, int], Any] = {}
    for name in list_models(module=torchvision.models):
        for weights in get_model_weights(name):
            meta = weights.meta
            crop = weights.transforms().crop_size[0]
            # VGG16 IMAGENET1K_FEATURES has no categories (a feature-extractor release) but
            # its num_params and _ops are those of the 1000-class network.
            classes = len(meta["categories"] or range(IMAGENET_CLASSES))
            key = (name, crop, classes)
            if key not in cases:
                cases[key] = pytest.param(
                    name, crop, classes, meta["num_params"], meta["_ops"], id=f"{name}-{crop}"
                )
    kept = [case for case in cases.values() if case.id not in SAME_CODE_AS]
    # a renamed or dropped weight leaves no stale entry, and every stand-in is checked
    assert set(SAME_CODE_AS) <= {case.id for case in cases.values()}
    assert set(SAME_CODE_AS.values()) <= {case.id for case in kept}
    return kept


@pytest.mark.parametrize(("name", "crop", "classes", "num_params", "gmacs"), _cases())
def test_params_and_macs_match_torchvision_metadata(
    name: str, crop: int, classes: int, num_params: int, gmacs: float
) -> None:
    shape = [3, crop, crop]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # googlenet/inception init notice
        model, *_ = build_model(name, shape, classes, **_builder_kwargs(name, crop))
    a = analyze_module(model, shape, name=name)
    assert a.params == num_params
    # Inception v3's auxiliary head is in num_params but never runs in eval
    t = a.totals()
    assert t["params"] + t["params_not_run"] == num_params
    assert round(a.totals()["macs"] / 1e9, 3) == gmacs
    assert not a.unsupported_ops
