"""SSD300 on MobileNet-V1 (`ssd300_mobilenet_v1`), laid out module for module as
qfgaohao/pytorch-ssd's `mb1-ssd` (`create_mobilenetv1_ssd`), so that a checkpoint of that
repository (its VOC model `mobilenet-v1-ssd-mp-0_675.pth`, 21 classes) loads by renaming
its keys and gives the same outputs.

The network is torchvision's `SSD` (its transform, default boxes, box coder, loss and
post-processing) around pytorch-ssd's layers:

- backbone `base_net`: MobileNet-V1's 14 blocks (a 3x3 convolution, then 13 depthwise +
  pointwise pairs, each convolution without bias, followed by BatchNorm and ReLU); the
  first feature map is the output of block 11 (512 channels, 19 x 19), the second of
  block 13 (1024, 10 x 10);
- `extras`: four (1x1 convolution, ReLU, 3x3 stride-2 convolution, ReLU) blocks giving
  512 x 5 x 5, 256 x 3 x 3, 256 x 2 x 2 and 256 x 1 x 1;
- one 3x3 convolution (padding 1, with bias) per feature map for the class scores (6 boxes x
  classes) and one for the box offsets (6 x 4): torchvision's `SSDHead` is exactly that, and
  it orders its outputs as pytorch-ssd does (location, then box, then class).

Its configuration (`vision/ssd/config/mobilenetv1_ssd_config.py`) is reproduced: a 300 x 300
input, pixels normalised as (p - 127) / 128 (here on [0, 1] images: mean 127/255, std
128/255); default boxes on the six maps with strides 16, 32, 64, 100, 150, 300, sizes
60..330 px in steps of 45 (each map's pair (min, max) gives a min x min box, a
sqrt(min max) box and min-sized boxes of aspect ratios 2, 1/2, 3, 1/3, their centres and
sizes clamped to [0, 1] of the image: the last row and column of the 10 x 10 map, centred
at 9.5 x 32 = 304 px, sit at 300 px); center variance 0.1 and size variance 0.2
(torchvision's box coder weights 10, 10, 5, 5); NMS at IoU 0.45 over at most 200
candidates per class scoring above 0.01.

Where this detector differs from pytorch-ssd's predictor: the image is resized with
PyTorch's bilinear interpolation on floats (pytorch-ssd: OpenCV's on 8-bit pixels), and
boxes are clipped to the image before NMS (pytorch-ssd does not clip).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from torch import nn
from torchvision.models.detection.anchor_utils import DefaultBoxGenerator

NAME = "ssd300_mobilenet_v1"
SIZE = 300
MEAN_PIXEL = 127.0
STD_PIXEL = 128.0
FEATURE_CHANNELS = (512, 1024, 512, 256, 256, 256)
STRIDES = (16, 32, 64, 100, 150, 300)
BOX_SIZES = (60, 105, 150, 195, 240, 285, 330)  # map k's default boxes span sizes k and k + 1
ASPECT_RATIOS = (2, 3)
BOXES_PER_LOCATION = 2 + 2 * len(ASPECT_RATIOS)
SCORE_THRESHOLD = 0.01
NMS_IOU = 0.45
CANDIDATES = 200  # per class, before NMS
# pytorch-ssd's VOC class order (its voc-model-labels.txt): the devkit's, background first.
VOC_LABELS = [
    "__background__", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat",
    "chair", "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
    "sheep", "sofa", "train", "tvmonitor",
]  # fmt: skip
# MobileNet-V1: (output channels, stride) of the depthwise + pointwise blocks after the stem.
_DEPTHWISE = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5,
              (1024, 2), (1024, 1)]  # fmt: skip
_FIRST_MAP_BLOCKS = 12  # base_net[:12] gives the first feature map
_EXTRAS = [(1024, 256, 512), (512, 128, 256), (256, 128, 256), (256, 128, 256)]  # in, mid, out


def _conv_bn(inp: int, out: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inp, out, 3, stride, 1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)
    )


def _conv_dw(inp: int, out: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False),
        nn.BatchNorm2d(inp),
        nn.ReLU(inplace=True),
        nn.Conv2d(inp, out, 1, 1, 0, bias=False),
        nn.BatchNorm2d(out),
        nn.ReLU(inplace=True),
    )


class MobileNetV1Features(nn.Module):
    """The six feature maps of mb1-ssd: `base_net` and `extras` named as pytorch-ssd names
    them, so that its keys map by a prefix."""

    def __init__(self) -> None:
        super().__init__()
        blocks = [_conv_bn(3, 32, 2)]
        channels = 32
        for out, stride in _DEPTHWISE:
            blocks.append(_conv_dw(channels, out, stride))
            channels = out
        self.base_net = nn.Sequential(*blocks)
        self.extras = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(inp, mid, kernel_size=1),
                nn.ReLU(),
                nn.Conv2d(mid, out, kernel_size=3, stride=2, padding=1),
                nn.ReLU(),
            )
            for inp, mid, out in _EXTRAS
        )

    def forward(self, x: torch.Tensor) -> OrderedDict[str, torch.Tensor]:
        maps = [self.base_net[:_FIRST_MAP_BLOCKS](x)]
        for stage in [self.base_net[_FIRST_MAP_BLOCKS:], *self.extras]:
            maps.append(stage(maps[-1]))
        return OrderedDict((str(i), m) for i, m in enumerate(maps))


class ClampedBoxes(DefaultBoxGenerator):  # type: ignore[misc]
    """torchvision's default boxes with their centres clamped to the image as well as their
    sizes, as pytorch-ssd's `generate_ssd_priors(clamp=True)` clamps them."""

    def _grid_default_boxes(
        self, grid_sizes: list[list[int]], image_size: list[int], dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        boxes: torch.Tensor = super()._grid_default_boxes(grid_sizes, image_size, dtype)
        return boxes.clamp(0.0, 1.0)


def build(num_classes: int) -> Any:
    """The detector with random weights, in torchvision's `SSD`."""
    from torchvision.models.detection.ssd import SSD, SSDHead

    anchors = ClampedBoxes(
        [list(ASPECT_RATIOS)] * len(STRIDES),
        scales=[s / SIZE for s in BOX_SIZES],
        steps=list(STRIDES),
        clip=True,
    )
    head = SSDHead(list(FEATURE_CHANNELS), [BOXES_PER_LOCATION] * len(STRIDES), num_classes)
    return SSD(
        MobileNetV1Features(),
        anchors,
        (SIZE, SIZE),
        num_classes,
        image_mean=[MEAN_PIXEL / 255] * 3,
        image_std=[STD_PIXEL / 255] * 3,
        head=head,
        score_thresh=SCORE_THRESHOLD,
        nms_thresh=NMS_IOU,
        topk_candidates=CANDIDATES,
        # pytorch-ssd keeps every class's survivors of NMS: no cap below that.
        detections_per_img=CANDIDATES * (num_classes - 1),
    )


# pytorch-ssd's top-level modules -> this detector's.
_PREFIXES = {
    "base_net.": "backbone.base_net.",
    "extras.": "backbone.extras.",
    "classification_headers.": "head.classification_head.module_list.",
    "regression_headers.": "head.regression_head.module_list.",
}


def is_pytorch_ssd(state: dict[str, Any]) -> bool:
    """Whether a state_dict is laid out as pytorch-ssd's SSD (its key names)."""
    return "base_net.0.0.weight" in state and "classification_headers.0.weight" in state


def pytorch_ssd_classes(state: dict[str, Any]) -> int:
    """Classes (background included) of a pytorch-ssd state_dict, from its first class head."""
    return int(state["classification_headers.0.weight"].shape[0]) // BOXES_PER_LOCATION


def from_pytorch_ssd(state: dict[str, Any]) -> dict[str, Any]:
    """A pytorch-ssd mb1-ssd state_dict under this detector's key names (a key of another
    module is kept as it is, for load_state_dict to name). A BatchNorm without the
    `num_batches_tracked` counter (PyTorch before 0.4.1 saved none) gets 0: the counter
    only sets the running averages' momentum when that is None, and it is not."""
    mapped = {}
    for key, value in state.items():
        prefix = next((p for p in _PREFIXES if key.startswith(p)), None)
        mapped[key if prefix is None else _PREFIXES[prefix] + key[len(prefix) :]] = value
    for key in list(mapped):
        counter = key.removesuffix("running_mean") + "num_batches_tracked"
        if key.endswith(".running_mean") and counter not in mapped:
            mapped[counter] = torch.tensor(0)
    return mapped
