"""ONNX: every stage as an ONNX model for ONNX Runtime's execution providers."""
