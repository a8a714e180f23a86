"""Foreign buffers have an owner: an array or tensor over memory a native library allocated (ONNX Runtime's and
OpenVINO's outputs, PyAV's decoded planes) keeps that memory alive, and its values, after the library object that
made it is gone and the library has run again. Each test keeps what the path gave, drops its owner, makes the
library allocate and write the same sizes again, and checks the values against a copy taken at the time.

The other two paths are tested where they live: a CUDA graph's outputs, overwritten by its next replay, in
`tests/test_engine.py` (`test_graph_outputs_survive_the_next_replay_in_split_and_chunked_batches`), and the pinned
staging buffers, reused by the next batch, in `tests/test_cuda.py`."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from sapiens2_stream.deploy.graph import INPUT_NAME
from sapiens2_stream.humans.clips import crossing, write_clip
from sapiens2_stream.io.options import SourceConfig
from sapiens2_stream.io.sources import Source

SHAPE = [2, 308, 64, 48]  # a pose batch's heatmaps: large enough for the runtimes' arenas, not their small pools


def onnx_model(folder, scale: float) -> None:
    """model.onnx: heatmaps = pixel_values * scale, with the names `load_runner` expects of a pose export."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", [INPUT_NAME, "scale"], ["heatmaps"])],
        "scaled",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("heatmaps", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor("scale", TensorProto.FLOAT, [], [scale])],
    )
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "model.onnx")


def openvino_model(folder, scale: float) -> None:
    import openvino

    onnx_model(folder, scale)
    openvino.save_model(openvino.Core().read_model(folder / "model.onnx"), folder / "model.xml")


@pytest.mark.parametrize("fmt,write", [("onnx", onnx_model), ("openvino", openvino_model)])
def test_a_runtimes_outputs_outlive_the_runtime(tmp_path, fmt, write):
    from sapiens2_stream.deploy.formats import load_runner

    cpu = torch.device("cpu")
    pixels = torch.from_numpy(np.random.default_rng(1).random(SHAPE, dtype=np.float32))
    write(tmp_path / "first", 2.0)
    runner = load_runner(fmt, tmp_path / "first", "pose", "fp32", cpu)
    kept = runner(pixels)["heatmaps"]
    expected = kept.clone()
    assert torch.equal(expected, pixels * 2)
    del runner
    gc.collect()
    write(tmp_path / "second", -3.0)
    other = load_runner(fmt, tmp_path / "second", "pose", "fp32", cpu)
    for _ in range(3):  # the same sizes again: a freed arena block would be handed out and written here
        assert torch.equal(other(pixels)["heatmaps"], pixels * -3)
    assert torch.equal(kept, expected)


def test_decoded_frames_outlive_their_av_frames_and_container(tmp_path):
    video = tmp_path / "walk.mp4"
    write_clip(video, crossing(), max_frames=12)
    source = Source(SourceConfig(uri=str(video)))
    kept, copies = [], []
    for frame in source.frames():
        kept.append(frame.rgb)
        copies.append(frame.rgb.copy())
    gc.collect()  # every av.VideoFrame and the container closed and collected
    again = [frame.rgb for frame in Source(SourceConfig(uri=str(video))).frames()]  # the same sizes, decoded anew
    assert len(kept) == len(again) == 12
    assert all(np.array_equal(a, b) for a, b in zip(kept, copies, strict=True))
    assert not np.array_equal(kept[0], kept[-1])  # the frames differ, so a reused buffer would show
