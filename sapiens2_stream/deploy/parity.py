"""The parity gate every export passes before anything runs it: the exported graph against our PyTorch model at
the same precision, on realistic inputs, in the task's own terms.

Inputs are synthetic people (`humans.datasets.random_view`: rooms, lenses, one to four people in any motion),
fed as the pipeline feeds the task: 32 person crops (pose) or 16 whole frames (fitted or stretched). Random
noise would give flat heatmaps that never show a drift.

The measures are the ones a drift would hurt: keypoint distance in crop pixels (median and p99) and whether the
heatmap's peak is the same cell (pose), label agreement (seg), the matte's mean absolute difference (matting),
the normals' angle (normal), the relative depth of the metric points (pointmap), and no NaN or Inf anywhere.

Tolerances: an fp32 export is held to float rounding (`FP32`); a reduced-precision one (bf16, fp16, int8) to
`MULTIPLE[precision]` times PyTorch's own bf16-vs-fp32 difference on the same inputs (and never tighter than the
fp32 bounds), since that difference is what the released bf16-trained models already live with.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch

from ..humans.datasets import MIN_AREA, random_view
from ..models.tasks import task_spec
from ..processing.crops import crop_persons
from ..processing.dense import prepare_frames
from ..processing.heatmaps import decode_heatmaps
from .graph import output_names

CROPS, FRAMES = 32, 16
FRAME_SIZE = (240, 320)  # the rendered pictures (height, width)

FP32 = {  # measure -> bound for an fp32 export against PyTorch fp32
    "keypoint_px_median": 0.05,
    "keypoint_px_p99": 0.5,
    "argmax_agreement": 0.999,
    "label_agreement": 0.999,
    "alpha_mean_abs": 1e-4,
    "angle_deg_mean": 0.05,
    "angle_deg_p99": 0.5,
    "relative_depth_median": 1e-4,
}
AGREEMENTS = ("argmax_agreement", "label_agreement")  # higher is better; the rest are differences
MULTIPLE = {"bf16": 2.0, "fp16": 2.0, "int8": 4.0, "fp8": 4.0}  # times PyTorch's bf16-vs-fp32 difference

Outputs = dict[str, np.ndarray]


def parity_inputs(task: str, size: tuple[int, int], seed: int = 0) -> tuple[torch.Tensor, str]:
    """(pixels [N, 3, H, W] float32, what they are) for `task` at input `size`."""
    spec = task_spec(task)
    height, width = FRAME_SIZE
    pictures = _pictures(seed, spec.per_person)
    if spec.per_person:
        crops = [crop_persons([image], [boxes], size).pixel_values for image, boxes in pictures]
        return torch.cat(crops)[:CROPS], f"{CROPS} person crops of synthetic people (seed {seed})"
    pixels = prepare_frames([image for image, _ in pictures], size, spec.keep_aspect).pixel_values
    return pixels, f"{FRAMES} frames of synthetic people, {width}x{height} (seed {seed})"


@functools.lru_cache(maxsize=4)
def _pictures(seed: int, per_person: bool) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The rendered pictures of `seed` with their people's boxes: enough for CROPS person crops, or FRAMES
    frames. Kept for the process: rendering is most of a small model's gate, and every export (and every format
    of it) is gated on the same pictures."""
    rng = np.random.default_rng(seed)
    height, width = FRAME_SIZE
    out, count = [], 0
    while count < CROPS if per_person else len(out) < FRAMES:
        view = random_view(rng, width, height)
        boxes = np.array([p.box for p in view.people if p.area >= MIN_AREA], np.float32).reshape(-1, 4)
        if len(boxes) or not per_person:
            out.append((view.image, boxes))
            count += len(boxes)
    return tuple(out)


def run_torch(graph: torch.nn.Module, pixels: torch.Tensor, dtype: torch.dtype, batch: int = 8) -> Outputs:
    """The PyTorch graph's outputs (float32 numpy) with weights and inputs in `dtype`."""
    names = output_names(graph.model.task)
    graph = graph.to(dtype)
    out: dict[str, list] = {n: [] for n in names}
    with torch.inference_mode():
        for start in range(0, len(pixels), batch):
            for name, value in zip(names, graph(pixels[start : start + batch].to(dtype)), strict=True):
                out[name].append(value.float().cpu().numpy())
    graph.float()
    return {n: np.concatenate(v) for n, v in out.items()}


def run_batches(
    call: Callable[[torch.Tensor], dict[str, torch.Tensor]], pixels: torch.Tensor, batch: int = 8
) -> Outputs:
    """An exported runtime's outputs (float32 numpy), in batches of `batch` (it has a dynamic batch dimension)."""
    parts = [call(pixels[s : s + batch]) for s in range(0, len(pixels), batch)]
    return {n: np.concatenate([p[n].float().cpu().numpy() for p in parts]) for n in parts[0]}


def keypoint_differences(ours: Outputs, theirs: Outputs, size: tuple[int, int]) -> dict[str, float]:
    a, b = ours["heatmaps"], theirs["heatmaps"]
    distance = np.linalg.norm(crop_keypoints(a, size) - crop_keypoints(b, size), axis=-1).ravel()
    flat_a, flat_b = a.reshape(*a.shape[:2], -1), b.reshape(*b.shape[:2], -1)
    return {
        "keypoint_px_median": float(np.median(distance)),
        "keypoint_px_p99": float(np.percentile(distance, 99)),
        "argmax_agreement": float((flat_a.argmax(-1) == flat_b.argmax(-1)).mean()),
    }


def normal_differences(ours: Outputs, theirs: Outputs, size: tuple[int, int]) -> dict[str, float]:
    a, b = unit(ours["normals"]), unit(theirs["normals"])
    angle = np.degrees(np.arccos(np.clip((a * b).sum(1), -1, 1))).ravel()
    return {"angle_deg_mean": float(angle.mean()), "angle_deg_p99": float(np.percentile(angle, 99))}


def depth_differences(ours: Outputs, theirs: Outputs, size: tuple[int, int]) -> dict[str, float]:
    za, zb = metric_depth(ours), metric_depth(theirs)
    return {"relative_depth_median": float(np.median(np.abs(za - zb) / np.maximum(np.abs(za), 1e-6)))}


# By the kind of truth a task's outputs are (`TaskSpec.truth`): the measures the gate bounds, and how they are taken
MEASURES: dict[str, tuple[tuple[str, ...], Callable[[Outputs, Outputs, tuple[int, int]], dict[str, float]]]] = {
    "keypoints": (("keypoint_px_median", "keypoint_px_p99", "argmax_agreement"), keypoint_differences),
    "classes": (("label_agreement",), lambda ours, theirs, size: {
        "label_agreement": float((ours["logits"].argmax(1) == theirs["logits"].argmax(1)).mean())}),
    "alpha": (("alpha_mean_abs",), lambda ours, theirs, size: {
        "alpha_mean_abs": float(np.abs(ours["alphas"] - theirs["alphas"]).mean())}),
    "normals": (("angle_deg_mean", "angle_deg_p99"), normal_differences),
    "points": (("relative_depth_median",), depth_differences),
}  # fmt: skip


def differences(task: str, ours: Outputs, theirs: Outputs, size: tuple[int, int]) -> dict[str, float]:
    """How far `theirs` is from `ours`, in the task's terms."""
    return MEASURES[task_spec(task).truth][1](ours, theirs, size)


def crop_keypoints(heatmaps: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """[N, K, 2] keypoints in crop pixels, decoded as the pipeline decodes them (the crop as the box)."""
    n = heatmaps.shape[0]
    boxes = torch.tensor([[0.0, 0.0, size[1], size[0]]]).repeat(n, 1)
    keypoints, _ = decode_heatmaps(torch.from_numpy(heatmaps), boxes, size, padding=1.0)
    return keypoints.numpy()


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)


def metric_depth(out: Outputs) -> np.ndarray:
    z = out["pointmaps"][:, 2]
    scales = out.get("scales")
    return z if scales is None else z / scales.reshape(-1, 1, 1)


def tolerances(task: str, precision: str, bf16_gap: dict[str, float] | None) -> dict[str, float]:
    """The bound of each of the task's measures at `precision` (`bf16_gap`: PyTorch bf16 against fp32)."""
    bounds = {}
    for key in differences_keys(task):
        fp32 = FP32[key]
        if precision == "fp32" or bf16_gap is None:
            bounds[key] = fp32
        elif key in AGREEMENTS:
            bounds[key] = min(fp32, 1 - MULTIPLE[precision] * (1 - bf16_gap[key]))
        else:
            bounds[key] = max(fp32, MULTIPLE[precision] * bf16_gap[key])
    return bounds


def differences_keys(task: str) -> list[str]:
    return list(MEASURES[task_spec(task).truth][0])


def finite(out: Outputs) -> bool:
    return all(np.isfinite(v).all() for v in out.values())


def judge(measured: dict[str, float], bounds: dict[str, float], is_finite: bool) -> list[str]:
    """What fails the gate, one phrase each (empty: it passes)."""
    failures = [] if is_finite else ["NaN or Inf in the outputs"]
    for key, bound in bounds.items():
        value = measured[key]
        if (value < bound) if key in AGREEMENTS else (value > bound):
            failures.append(f"{key} {value:.6g} {'<' if key in AGREEMENTS else '>'} {bound:.6g}")
    return failures


def fp8_gate(model: torch.nn.Module, size: tuple[int, int], device: torch.device) -> dict:
    """`runtime.fp8`'s gate: a copy of `model` with its backbone's products in fp8 (`models.fp8`) against the
    model in bf16 on the task's parity inputs, held to `MULTIPLE["fp8"]` times the model's own bf16-vs-fp32
    difference. {"passed", "measured", "bounds", "failures", "model": the fp8 copy (None when it failed)}."""
    import copy

    from ..models.fp8 import to_fp8
    from .graph import ExportGraph

    task = model.task
    pixels, _ = parity_inputs(task, size)
    pixels = pixels.to(device)
    reference = ExportGraph(copy.deepcopy(model).float(), flip=False)
    fp32 = run_torch(reference, pixels, torch.float32)
    bf16 = run_torch(reference, pixels, torch.bfloat16)
    fast = copy.deepcopy(model).to(torch.bfloat16)
    to_fp8(fast.backbone)
    names, graph = output_names(task), ExportGraph(fast, flip=False)
    parts: dict[str, list] = {n: [] for n in names}
    with torch.inference_mode():
        for start in range(0, len(pixels), 8):
            for name, value in zip(names, graph(pixels[start : start + 8].to(torch.bfloat16)), strict=True):
                parts[name].append(value.float().cpu().numpy())
    fp8 = {n: np.concatenate(v) for n, v in parts.items()}
    measured = differences(task, fp8, bf16, size)
    bounds = tolerances(task, "fp8", differences(task, fp32, bf16, size))
    failures = judge(measured, bounds, finite(fp8))
    return {"passed": not failures, "measured": measured, "bounds": bounds, "failures": failures,
            "model": None if failures else fast}  # fmt: skip
