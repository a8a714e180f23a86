"""Exported models: `export-model` writes a task model as ONNX, OpenVINO IR or a TensorRT engine behind a parity
gate (`parity.json` beside it), and `models.<task>.runtime` runs such a folder in the pipeline."""
