"""SSD object detection: torchvision detectors built, exported to ONNX and run in ONNX
Runtime (ssd), Pascal VOC data and AP@0.5 (voc), and fine-tuning recorded as a run
(finetune)."""

# `detect run` keeps a detection whose class outscores all others together: the detector
# itself keeps scores down to 0.001 for AP, a carpet of boxes when drawn. Here, not in ssd.py,
# so that the CLI can name it without importing numpy and torch.
SCORE_THRESHOLD = 0.5
