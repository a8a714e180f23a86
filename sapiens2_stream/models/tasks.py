"""The one table of Sapiens2 tasks: everything that differs between pose, seg, matting, normal, pointmap and the
pretrained backbone, in one entry each. Config, models, engine, temporal filter, outputs and the command line
read this table; adding a task is adding an entry (`register_task`), nothing else.

An entry says what the model is (its transformers class, its head kind and output channels, its released sizes
and head widths), what its forward returns, how flip test-time augmentation mirrors each output back, how the
engine feeds it (per-person crops or whole frames, aspect kept or not), how its raw outputs become the result's
arrays, and which temporal filter steadies them.

Reading the table loads no torch (the YAML schema and the command line read it, `validate` and `--help` stay
quick): the post-processing functions import the array code when they first run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import Sapiens2StreamError
from ..registry import TASKS, Row
from .metadata import NUM_KEYPOINTS, NUM_SEG_CLASSES, pose_metadata, seg_metadata
from .outputs import MattingOutput, NormalOutput, PointmapOutput, PoseOutput, PretrainOutput, SegOutput
from .shapes import DEFAULT_IMAGE_SIZE, BackboneConfig, HeadConfig, gqa_layout, scale_grid

#: Released backbone sizes (the original arch zoo), by name; key/value heads are half the heads (GQA).
SIZES: dict[str, dict[str, int]] = {
    "0.1b": dict(hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    "0.4b": dict(hidden_size=1024, num_layers=24, num_heads=16, mlp_dim=4096),
    "0.8b": dict(hidden_size=1280, num_layers=32, num_heads=16, mlp_dim=5120),
    "1b": dict(hidden_size=1536, num_layers=40, num_heads=24, mlp_dim=6144),
    "5b": dict(hidden_size=2432, num_layers=56, num_heads=32, mlp_dim=9728),
}
TASK_SIZES = ("0.4b", "0.8b", "1b", "5b")  # the sizes released with task heads (0.1b: the backbone only)

if TYPE_CHECKING:
    import torch

    from ..processing.dense import FrameBatch

# (head output, backbone features, model) -> the forward's named outputs
ModelOutputs = Callable[[Any, Any, Any], dict]
# (forward outputs, the frames they came from (processing.dense.FrameBatch), the probabilities' width or None) ->
# per frame, the result arrays (tensors)
FramePost = Callable[[dict, Any, "int | None"], list[dict]]
# (forward outputs, the crops' boxes, the crops' input size) -> the result arrays of every crop (tensors)
CropPost = Callable[[dict, Any, tuple[int, int]], dict]


@dataclass(frozen=True)
class Flip:
    """How one forward output is mirrored back after flip TTA: `kind` as `processing.flip.merge_flip` takes it,
    and the channel order that swaps left and right (a function of the metadata, read when first needed)."""

    kind: str  # "channels", "vectors" or "scalar"
    order: Callable[[], list[int]] | None = None


@dataclass(frozen=True)
class Temporal:
    """Which temporal filter steadies the task's output: its switch in the YAML's `temporal:` section and the
    stabiliser kind (`temporal.DenseStabilizer`)."""

    key: str
    kind: str
    comment: str = ""


@dataclass(frozen=True)
class TaskSpec:
    name: str
    architecture: str  # the transformers class name
    output_type: type  # what the model's forward returns
    model_outputs: ModelOutputs | None  # None: the pretrained backbone (no head)
    channels: int = 0  # the predictor's output channels (0: no head)
    fixed_channels: bool = False  # a config.json's num_labels does not change them
    head: Callable[[str], HeadConfig] | None = None  # released head widths by size name
    tiny_head: HeadConfig | None = None  # a few-thousand-parameter head for tests and the demo
    flips: dict[str, Flip] = field(default_factory=dict)  # forward output -> how flip TTA mirrors it back
    fuse_flip: bool = False  # one channel-mirrored output from a 1x1 predictor: mirror its inputs back instead
    per_person: bool = False  # fed person crops (pose) rather than whole frames
    keep_aspect: bool = False  # whole frames: letterboxed (True) or stretched (False) to the input size
    frame_post: FramePost | None = None
    crop_post: CropPost | None = None
    results: tuple[str, ...] = ()  # the result arrays it gives (FrameResult attributes, or each person's)
    temporal: Temporal | None = None
    geometry: bool = False  # 3-D outputs written by the geometry sink (normals / depth videos, maps)
    scale_branch: bool = False  # its head predicts a per-image scale too (a config.json's scale_* keys apply)
    sizes: tuple[str, ...] = TASK_SIZES
    doc: str = ""  # one line, for `sapiens2-stream list tasks`
    truth: str = ""  # what it learns from and is measured by (finetune's data, loss and scores; export-model's
    # parity gate): keypoints, classes, alpha, normals or points. A new task of a known kind trains and exports
    # as its entry; "" : neither

    @property
    def in_pipeline(self) -> bool:
        """Whether a pipeline can run it (the backbone alone gives no result)."""
        return self.frame_post is not None or self.crop_post is not None

    def listing(self) -> Row:
        scope = "crops" if self.per_person else "frames" if self.in_pipeline else "none"
        return self.name, scope, "infer stage", f"models.{self.name}" if self.in_pipeline else "", self.doc

    def flip_order(self, output: str) -> list[int] | None:
        order = self.flips[output].order
        return None if order is None else list(order())


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add (or replace) a task in the registry (`registry.TASKS`). Modules that build per-task schemas when
    imported (the pipeline YAML's `models:` and `temporal:` sections) see tasks registered before they are first
    imported."""
    return TASKS.add(spec, replace=True)


def task_spec(name: str) -> TaskSpec:
    return TASKS.pick(name)


def pipeline_tasks() -> list[TaskSpec]:
    """The tasks a pipeline can run, in the order a batch launches them."""
    return [t for t in TASKS.values() if t.in_pipeline]


def hub_id(task: str, size: str) -> str:
    return f"facebook/sapiens2-{task}-{size}"


def backbone_preset(size: str) -> BackboneConfig:
    if size not in SIZES:
        raise Sapiens2StreamError(f"unknown model size {size!r}; choose one of {', '.join(SIZES)}")
    s = SIZES[size]
    return BackboneConfig(**s, kv_heads=gqa_layout(s["num_layers"], s["num_heads"], s["num_heads"] // 2))


# ---------------------------------------------------------------------------------------------- the entries


def _pose_head(size: str) -> HeadConfig:
    wide = size == "1b"
    return HeadConfig(kind="deconv", upsample_channels=(1536, 1024) if wide else (1024, 768), upsample_kernels=(4, 4),
                      conv_channels=(768, 512, 256) if wide else (512, 512, 256), conv_kernels=(1, 1, 1),
                      num_outputs=NUM_KEYPOINTS)  # fmt: skip


def _seg_head(size: str) -> HeadConfig:
    return HeadConfig(kind="deconv", upsample_channels=(512, 256, 128, 64), upsample_kernels=(4,) * 4,
                      conv_channels=(64, 64), conv_kernels=(1, 1), num_outputs=NUM_SEG_CLASSES)  # fmt: skip


def _normal_head(size: str) -> HeadConfig:
    big = size == "5b"
    return HeadConfig(kind="pixel_shuffle", upsample_channels=(1536, 768, 512, 256) if big else (768, 512, 256, 128),
                      upsample_kernels=(3,) * 4, conv_channels=(128, 64, 32) if big else (64, 32, 16),
                      conv_kernels=(3,) * 3, num_outputs=3)  # fmt: skip


def _pointmap_head(size: str) -> HeadConfig:
    big = size == "5b"
    return HeadConfig(kind="pixel_shuffle", upsample_channels=(1536, 768, 768, 768) if big else (1536, 768, 512, 256),
                      upsample_kernels=(3,) * 4, conv_channels=(128, 64, 32) if big else (64, 32, 16),
                      conv_kernels=(3,) * 3, num_outputs=3, scale_conv_channels=(1536, 512, 128),
                      scale_conv_kernels=(1, 1, 1), scale_hidden=(512, 128),
                      scale_grid=scale_grid(DEFAULT_IMAGE_SIZE, 16, (1, 1, 1)))  # fmt: skip


def _pointmap_outputs(out: torch.Tensor, features: torch.Tensor, model) -> dict:
    scales = model.decode_head.scale(features, model.trained_grid) if model.decode_head.has_scale else None
    return {"pointmaps": out, "scales": scales}


def _matting_outputs(out: torch.Tensor, features: torch.Tensor, model) -> dict:
    matte = out.sigmoid()
    return {"alphas": matte[:, 3:], "foregrounds": matte[:, :3]}


def _pose_post(out: dict, boxes: torch.Tensor, size: tuple[int, int]) -> dict:
    from ..processing.heatmaps import decode_heatmaps

    keypoints, scores = decode_heatmaps(out["heatmaps"], boxes, size)
    return {"keypoints": keypoints, "keypoint_scores": scores}


def _seg_post(out: dict, frames: FrameBatch, width: int | None) -> list[dict]:
    import torch

    from ..processing.dense import seg_labels, seg_probabilities

    per_frame = [{"seg": labels.to(torch.uint8)} for labels in seg_labels(out["logits"], frames)]
    if width is not None:  # the part labels' temporal filter works on class probabilities at this width
        for item, p in zip(per_frame, seg_probabilities(out["logits"], frames, width), strict=True):
            item["seg_probabilities"] = p
    return per_frame


def _matting_post(out: dict, frames: FrameBatch, width: int | None) -> list[dict]:
    from ..processing.dense import mattes

    return [{"alpha": a[0], "foreground": f.permute(1, 2, 0)} for a, f in mattes(out["alphas"], out["foregrounds"],
                                                                                   frames)]  # fmt: skip


def _normal_post(out: dict, frames: FrameBatch, width: int | None) -> list[dict]:
    from ..processing.dense import unit_normals

    return [{"normals": n.permute(1, 2, 0)} for n in unit_normals(out["normals"], frames)]


def _pointmap_post(out: dict, frames: FrameBatch, width: int | None) -> list[dict]:
    from ..processing.dense import metric_pointmaps

    return [{"pointmap": m.permute(1, 2, 0)} for m in metric_pointmaps(out["pointmaps"], out["scales"], frames)]


def _pose_order() -> list[int]:
    return pose_metadata().flip_indices


def _seg_order() -> list[int]:
    return seg_metadata().flip_indices


def _tiny_dense(outputs: int, **scale) -> HeadConfig:
    return HeadConfig(kind="pixel_shuffle", upsample_channels=(32, 16, 8, 8), upsample_kernels=(3,) * 4,
                      conv_channels=(8,), conv_kernels=(3,), num_outputs=outputs, **scale)  # fmt: skip


register_task(TaskSpec(
    name="pose", truth="keypoints", doc="308 keypoints per person (body, feet, hands, face) from person crops",
    architecture="Sapiens2ForPoseEstimation", output_type=PoseOutput,
    model_outputs=lambda out, features, model: {"heatmaps": out}, channels=NUM_KEYPOINTS, head=_pose_head,
    tiny_head=HeadConfig(kind="deconv", upsample_channels=(32, 32), upsample_kernels=(4, 4), conv_channels=(32,),
                         conv_kernels=(1,), num_outputs=NUM_KEYPOINTS),
    flips={"heatmaps": Flip("channels", _pose_order)}, fuse_flip=True, per_person=True, crop_post=_pose_post,
    results=("keypoints", "keypoint_scores"),
))  # fmt: skip
register_task(TaskSpec(
    name="seg", truth="classes", doc="29 body-part classes per pixel",
    architecture="Sapiens2ForSemanticSegmentation", output_type=SegOutput,
    model_outputs=lambda out, features, model: {"logits": out}, channels=NUM_SEG_CLASSES, head=_seg_head,
    tiny_head=HeadConfig(kind="deconv", upsample_channels=(16, 16, 8, 8), upsample_kernels=(4,) * 4,
                         conv_channels=(8,), conv_kernels=(1,), num_outputs=NUM_SEG_CLASSES),
    flips={"logits": Flip("channels", _seg_order)}, keep_aspect=False, frame_post=_seg_post,
    results=("seg", "seg_probabilities"), temporal=Temporal("seg", "seg", "part labels"),
))  # fmt: skip
register_task(TaskSpec(
    name="normal", truth="normals", doc="surface normals per pixel (camera frame)",
    architecture="Sapiens2ForNormalEstimation", output_type=NormalOutput,
    model_outputs=lambda out, features, model: {"normals": out}, channels=3, fixed_channels=True, head=_normal_head,
    tiny_head=_tiny_dense(3), flips={"normals": Flip("vectors")}, keep_aspect=True, frame_post=_normal_post,
    results=("normals",), temporal=Temporal("normal", "normal", "surface normals"), geometry=True,
))  # fmt: skip
register_task(TaskSpec(
    name="pointmap", truth="points", doc="a 3-D point per pixel (metres, camera frame): depth",
    architecture="Sapiens2ForPointmapEstimation", output_type=PointmapOutput,
    model_outputs=_pointmap_outputs, channels=3, fixed_channels=True, head=_pointmap_head,
    tiny_head=_tiny_dense(3, scale_conv_channels=(32, 16, 8), scale_conv_kernels=(1, 1, 1), scale_hidden=(16, 8),
                          scale_grid=(8, 6)),
    flips={"pointmaps": Flip("vectors"), "scales": Flip("scalar")}, keep_aspect=True, frame_post=_pointmap_post,
    results=("pointmap",), temporal=Temporal("pointmap", "depth", "its depth, the points moving along their rays"),
    geometry=True, scale_branch=True,
))  # fmt: skip
register_task(TaskSpec(
    name="matting", truth="alpha", doc="a person's alpha matte per pixel (virtual backgrounds)",
    architecture="Sapiens2ForImageMatting", output_type=MattingOutput,
    model_outputs=_matting_outputs, channels=4, fixed_channels=True, tiny_head=_tiny_dense(4), sizes=("1b",),
    flips={"alphas": Flip("channels"), "foregrounds": Flip("channels")}, keep_aspect=False, frame_post=_matting_post,
    results=("alpha", "foreground"), temporal=Temporal("alpha", "alpha", "the matte (composite, alpha video, "
                                                                          "virtual camera)"),
))  # fmt: skip
register_task(TaskSpec(
    name="pretrain", doc="the pretrained backbone alone (features; no result in a pipeline)",
    architecture="Sapiens2Model", output_type=PretrainOutput, model_outputs=None,
    sizes=tuple(SIZES),
))  # fmt: skip
