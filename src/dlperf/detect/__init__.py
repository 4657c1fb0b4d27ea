"""SSD object detection: torchvision detectors built, exported to ONNX and run in ONNX
Runtime (ssd), Pascal VOC data and AP@0.5 (voc), and fine-tuning recorded as a run
(finetune)."""
