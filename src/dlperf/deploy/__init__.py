"""Export to ONNX, inference with ONNX Runtime, and the HTTP inference server."""
