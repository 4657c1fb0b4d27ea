"""dlperf.detect.mobilenet_ssd on its own: pytorch-ssd's configuration worked out by hand (the
default boxes, the feature maps' sizes) and the key mapping on small fake state_dicts.
(A whole pytorch-ssd checkpoint mapping exactly is test_ssd.py's.)"""

from __future__ import annotations

import math

import torch
from torchvision.models.detection.anchor_utils import DefaultBoxGenerator

from dlperf.detect import mobilenet_ssd as mb1

GRIDS = [[19, 19], [10, 10], [5, 5], [3, 3], [2, 2], [1, 1]]  # the six maps at 300 x 300


def anchors() -> mb1.ClampedBoxes:
    return mb1.ClampedBoxes(
        [list(mb1.ASPECT_RATIOS)] * 6,
        scales=[s / mb1.SIZE for s in mb1.BOX_SIZES],
        steps=list(mb1.STRIDES),
        clip=True,
    )


def test_default_boxes_of_the_first_location_by_hand() -> None:
    boxes = anchors()._grid_default_boxes(GRIDS, [300, 300])
    assert boxes.shape == (6 * (19 * 19 + 10 * 10 + 5 * 5 + 9 + 4 + 1), 4)  # 3000
    centre = 0.5 * 16 / 300  # the first cell of the stride-16 map
    low, high = 60 / 300, 105 / 300  # its sizes span 60 to 105 px
    expected = [
        [low, low],
        [math.sqrt(low * high)] * 2,
        [low * math.sqrt(2), low / math.sqrt(2)],
        [low / math.sqrt(2), low * math.sqrt(2)],
        [low * math.sqrt(3), low / math.sqrt(3)],
        [low / math.sqrt(3), low * math.sqrt(3)],
    ]
    torch.testing.assert_close(boxes[:6, :2], torch.full((6, 2), centre))
    torch.testing.assert_close(boxes[:6, 2:], torch.tensor(expected), rtol=0, atol=1e-6)


def test_default_box_centres_are_clamped_to_the_image() -> None:
    ours = anchors()._grid_default_boxes(GRIDS, [300, 300])
    theirs = DefaultBoxGenerator._grid_default_boxes(anchors(), GRIDS, [300, 300])
    # the 10 x 10 map's last centre sits at 9.5 x 32 = 304 px: 1.0133 of the image unclamped
    assert theirs.max() == torch.tensor(304 / 300)
    assert ours.min() >= 0 and ours.max() == 1.0
    assert torch.equal(ours, theirs.clamp(0, 1))


def test_the_six_feature_maps_follow_the_strides() -> None:
    features = mb1.MobileNetV1Features().eval()
    with torch.no_grad():
        maps = features(torch.zeros(1, 3, 64, 64))
    # 64 px: stride 16 -> 4, stride 32 -> 2, then each extra halves (rounding up) to 1
    assert list(maps) == ["0", "1", "2", "3", "4", "5"]
    shapes = [tuple(m.shape[1:]) for m in maps.values()]
    assert shapes == [(512, 4, 4), (1024, 2, 2), (512, 1, 1), (256, 1, 1), (256, 1, 1), (256, 1, 1)]
    assert [s[0] for s in shapes] == list(mb1.FEATURE_CHANNELS)


def test_build_carries_pytorch_ssds_post_processing() -> None:
    model = mb1.build(num_classes=3)
    assert model.anchor_generator.num_anchors_per_location() == [mb1.BOXES_PER_LOCATION] * 6
    assert mb1.BOXES_PER_LOCATION == 6
    assert (model.score_thresh, model.nms_thresh, model.topk_candidates) == (0.01, 0.45, 200)
    assert model.detections_per_img == 200 * 2  # every foreground class's survivors
    assert model.transform.image_mean == [127 / 255] * 3
    assert model.transform.image_std == [128 / 255] * 3
    # the class head: 6 boxes x 3 classes per location of the first map
    assert model.head.classification_head.module_list[0].out_channels == 18


def fake_pytorch_ssd(classes: int) -> dict[str, torch.Tensor]:
    return {
        "base_net.0.0.weight": torch.zeros(32, 3, 3, 3),
        "base_net.0.1.running_mean": torch.zeros(32),
        "base_net.0.1.running_var": torch.ones(32),
        "extras.0.0.bias": torch.zeros(256),
        "classification_headers.0.weight": torch.zeros(6 * classes, 512, 3, 3),
        "regression_headers.0.weight": torch.zeros(24, 512, 3, 3),
        "something_else": torch.tensor(7),
    }


def test_pytorch_ssd_state_dicts_are_recognised_and_counted() -> None:
    state = fake_pytorch_ssd(21)
    assert mb1.is_pytorch_ssd(state)
    assert mb1.pytorch_ssd_classes(state) == 21  # 126 class-head channels / 6 boxes
    assert not mb1.is_pytorch_ssd({"base_net.0.0.weight": state["base_net.0.0.weight"]})
    assert not mb1.is_pytorch_ssd(mb1.build(3).state_dict())  # ours is not theirs


def test_keys_are_renamed_and_missing_batchnorm_counters_added() -> None:
    state = fake_pytorch_ssd(3)
    mapped = mb1.from_pytorch_ssd(state)
    assert set(mapped) == {
        "backbone.base_net.0.0.weight",
        "backbone.base_net.0.1.running_mean",
        "backbone.base_net.0.1.running_var",
        "backbone.base_net.0.1.num_batches_tracked",  # added, at 0
        "backbone.extras.0.0.bias",
        "head.classification_head.module_list.0.weight",
        "head.regression_head.module_list.0.weight",
        "something_else",  # kept as it is, for load_state_dict to name
    }
    assert mapped["backbone.base_net.0.1.num_batches_tracked"] == 0
    assert mapped["backbone.base_net.0.0.weight"] is state["base_net.0.0.weight"]
    # a counter the checkpoint has is kept, not reset
    state["base_net.0.1.num_batches_tracked"] = torch.tensor(5)
    assert mb1.from_pytorch_ssd(state)["backbone.base_net.0.1.num_batches_tracked"] == 5
