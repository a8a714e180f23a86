"""The three export formats: how each is written from the export graph, and how its own runtime loads and runs it.

- ONNX (`model.onnx` + `model.onnx.data`): the dynamo exporter at opset 18 by default (attention and RMSNorm
  decomposed into plain ops every runtime has; a newer opset is opt-in), a dynamic batch dimension, the weights
  in the data file beside it (so models over protobuf's 2 GB load), the RoPE tables folded into constants (the
  input size is fixed). Runs in ONNX Runtime (`runtime: onnxruntime`).
- OpenVINO IR (`model.xml` + `model.bin`): converted from the torch module directly; fp32 weights, run in fp32 or,
  on CPUs with bf16 units, in bf16; int8 through NNCF's post-training quantisation (transformer preset) on
  synthetic people other than the gate's.
- TensorRT (`model.engine`): built on the machine that runs it from the ONNX file, strongly typed (the precision
  is the graph's own, so RMSNorm's fp32 casts hold); the GPU and the versions are recorded, and a run on another
  GPU or other versions is refused.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..errors import Sapiens2StreamError
from .graph import INPUT_NAME, ExportGraph, output_names

PRECISIONS = {"onnx": ("fp32",), "openvino": ("fp32", "bf16", "int8"), "tensorrt": ("bf16", "fp16", "fp32")}
RUNTIMES = {"onnxruntime": "onnx", "openvino": "openvino", "tensorrt": "tensorrt"}  # runtime -> format it runs
FILES = {"onnx": ("model.onnx", "model.onnx.data"), "openvino": ("model.xml", "model.bin"),
         "tensorrt": ("model.engine",)}  # fmt: skip
EXTRAS = {"onnx": "onnx", "onnxruntime": "onnx", "onnxscript": "onnx", "openvino": "openvino", "nncf": "openvino",
          "tensorrt": "tensorrt"}  # fmt: skip
REQUIRES = {"onnx": ("onnx", "onnxscript", "onnxruntime"), "openvino": ("openvino",),
            "tensorrt": ("onnx", "onnxscript", "tensorrt")}  # fmt: skip
DEFAULT_OPSET = 18
MAX_BATCH = 256

Runner = Callable[[torch.Tensor], dict[str, torch.Tensor]]


def need(module: str):
    """Import a runtime package, or say in one line which extra installs it."""
    import importlib

    if module in ("openvino", "nncf"):
        no_usage_reports()
    try:
        return importlib.import_module(module)
    except ImportError:
        raise Sapiens2StreamError(
            f"{module} is not installed: pip install 'sapiens2-stream[{EXTRAS[module]}]'"
        ) from None


def no_usage_reports() -> None:
    """OpenVINO's and NNCF's tools report their use to Google Analytics unless a consent file in the user's home
    says no, from a child process forked for each report: without a network that child waits on DNS for good and
    keeps open the pipes of whoever started this process (a supervisor, a test runner, which then never sees it
    end). A model converted on the user's own machine reports nothing."""
    try:
        from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
    except ImportError:
        return
    OptInChecker.check = lambda self, *args, **kwargs: ConsentCheckResult.DECLINED


def write_onnx(graph: ExportGraph, example: torch.Tensor, path: Path, opset: int = DEFAULT_OPSET) -> None:
    need("onnx"), need("onnxscript")
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    with contextlib.redirect_stdout(io.StringIO()):  # the exporter narrates each of its passes
        torch.onnx.export(
            graph, (example,), str(path), dynamo=True, opset_version=opset, input_names=[INPUT_NAME],
            output_names=output_names(graph.model.task), dynamic_shapes={INPUT_NAME: {0: batch}},
            external_data=True, optimize=True,
        )  # fmt: skip
    data = path.with_name(path.name + ".data")
    if not data.exists():  # a model small enough to be written inline still gets the data file
        import onnx

        model = onnx.load(str(path))
        onnx.save_model(model, str(path), save_as_external_data=True, location=data.name, size_threshold=0)


def write_openvino(
    graph: ExportGraph, example: torch.Tensor, path: Path, precision: str, calibration: torch.Tensor | None
) -> None:
    ov = need("openvino")
    h, w = example.shape[-2:]
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shapes it keeps as constants (the input size is)
        model = ov.convert_model(graph, example_input=example, input=[ov.PartialShape([-1, 3, h, w])])
    for port, name in zip(model.outputs, output_names(graph.model.task), strict=True):
        port.get_tensor().set_names({name})
    model.inputs[0].get_tensor().set_names({INPUT_NAME})
    if precision == "int8":
        nncf = need("nncf")
        data = nncf.Dataset([calibration[i : i + 1].numpy() for i in range(len(calibration))])
        model = nncf.quantize(model, data, model_type=nncf.ModelType.TRANSFORMER, preset=nncf.QuantizationPreset.MIXED,
                              subset_size=len(calibration))  # fmt: skip
    ov.save_model(model, str(path), compress_to_fp16=False)


@functools.cache
def openvino_core():
    """The process's one OpenVINO `Core`, never destroyed.

    Each Core's CPU plugin swaps the calling thread's signal stack (`sigaltstack`, room for AMX state) for one of
    its own and puts back the one it found when the Core goes. Two Cores that go in the order they came leave the
    thread's signal stack in freed memory, and the next signal handled there (a child process ending, with a
    SIGCHLD handler installed as torch's DataLoader does) kills the process with SIGSEGV: seen as a test worker
    dying, after keypoints read from garbage. One Core swaps once and stays."""
    return need("openvino").Core()


def cpu_has_bf16() -> bool:
    return "BF16" in openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def write_tensorrt(onnx_path: Path, path: Path) -> dict:
    """Build a strongly typed engine from `onnx_path` on this machine's GPU; returns what it was built on."""
    trt = need("tensorrt")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise Sapiens2StreamError(f"TensorRT could not parse the ONNX graph: {errors}")
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    shape = tuple(network.get_input(0).shape)[1:]
    profile.set_shape(INPUT_NAME, (1, *shape), (8, *shape), (64, *shape))
    config.add_optimization_profile(profile)
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        raise Sapiens2StreamError("TensorRT could not build an engine from the ONNX graph (see its log above)")
    path.write_bytes(bytes(engine))
    return built_on()


def built_on() -> dict:
    """The GPU and versions a TensorRT engine is tied to."""
    trt = need("tensorrt")
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return {"gpu": torch.cuda.get_device_name(index), "compute_capability": f"{major}.{minor}",
            "tensorrt": trt.__version__, "cuda": torch.version.cuda}  # fmt: skip


def load_runner(fmt: str, folder: Path, task: str, precision: str, device: torch.device) -> Runner:
    """The artifact in `folder`, loaded with its runtime's own API, as pixels -> the task's raw outputs."""
    names = output_names(task)
    if fmt == "onnx":
        ort = need("onnxruntime")
        providers = ["CPUExecutionProvider"]
        if device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        session = ort.InferenceSession(str(folder / "model.onnx"), providers=providers)

        def run_onnx(pixels: torch.Tensor) -> dict[str, torch.Tensor]:
            out = session.run(names, {INPUT_NAME: pixels.detach().float().cpu().numpy()})
            return {n: torch.from_numpy(np.asarray(v)) for n, v in zip(names, out, strict=True)}

        return run_onnx
    if fmt == "openvino":
        hint = "bf16" if precision == "bf16" else "f32"
        compiled = openvino_core().compile_model(str(folder / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": hint})

        def run_openvino(pixels: torch.Tensor) -> dict[str, torch.Tensor]:
            out = compiled(pixels.detach().float().cpu().numpy())
            return {n: torch.from_numpy(np.asarray(out[compiled.output(n)])) for n in names}

        return run_openvino
    return tensorrt_runner(folder / "model.engine", names)


def tensorrt_runner(path: Path, names: list[str]) -> Runner:
    """Runs the engine on torch tensors already on the GPU (no copies through the host)."""
    trt = need("tensorrt")
    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(path.read_bytes())
    if engine is None:
        raise Sapiens2StreamError(f"{path}: TensorRT could not load this engine (truncated, or another version's)")
    context = engine.create_execution_context()
    dtypes = {trt.DataType.FLOAT: torch.float32, trt.DataType.HALF: torch.float16, trt.DataType.BF16: torch.bfloat16}

    def run_tensorrt(pixels: torch.Tensor) -> dict[str, torch.Tensor]:
        x = pixels.to("cuda", dtypes[engine.get_tensor_dtype(INPUT_NAME)]).contiguous()
        context.set_input_shape(INPUT_NAME, tuple(x.shape))
        context.set_tensor_address(INPUT_NAME, x.data_ptr())
        out = {}
        for name in names:
            out[name] = torch.empty(tuple(context.get_tensor_shape(name)), dtype=dtypes[engine.get_tensor_dtype(name)],
                                    device="cuda")  # fmt: skip
            context.set_tensor_address(name, out[name].data_ptr())
        context.execute_async_v3(torch.cuda.current_stream().cuda_stream)
        return out

    return run_tensorrt
