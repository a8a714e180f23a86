"""A model's whole configuration (`ModelConfig`): its task, backbone and head shapes; the released presets by task
and size name; and the transformers `config.json` format.

A `ModelConfig` can come from a size preset, from the `config.json` that the hub and `save_pretrained` write, or
from the tensor shapes of a bare checkpoint (see `checkpoint.infer_config`). What differs between tasks is read
from the one table of tasks (`tasks.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import Sapiens2StreamError
from .shapes import DEFAULT_IMAGE_SIZE, BackboneConfig, HeadConfig, gqa_layout, scale_grid
from .tasks import TASKS, backbone_preset, task_spec


def architectures() -> dict[str, str]:
    """transformers class name -> our task name (Sapiens2Backbone: the backbone alone, as `pretrain`)."""
    return {**{spec.architecture: name for name, spec in TASKS.items()}, "Sapiens2Backbone": "pretrain"}


@dataclass(frozen=True)
class ModelConfig:
    task: str
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    head: HeadConfig | None = None
    image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE

    def __post_init__(self) -> None:
        spec = task_spec(self.task)
        if (self.head is None) != (spec.model_outputs is None):
            raise Sapiens2StreamError(f"task {self.task!r} needs {'no' if self.head is None else 'a'} head config")


def head_preset(task: str, size: str) -> HeadConfig | None:
    """Head widths of the released task checkpoints (original task configs). Matting's are unpublished."""
    spec = task_spec(task)
    if spec.model_outputs is None:
        return None
    if spec.head is None:
        raise Sapiens2StreamError(
            f"no published head widths for {task!r} {size}; load the checkpoint file itself "
            "(its shapes define the head)"
        )
    return spec.head(size)


def preset(task: str, size: str) -> ModelConfig:
    """The configuration of a released checkpoint, by task and size name."""
    return ModelConfig(task, backbone_preset(size), head_preset(task, size))


# ----------------------------------------------------------------------------------------------------------
# The transformers config.json format (model_type "sapiens2"), as on the hub and written by save_pretrained.


def from_transformers_config(cfg: dict, task: str | None = None) -> ModelConfig:
    """Read a transformers `config.json` dict; `task` overrides the one named by `architectures`."""
    if cfg.get("model_type") not in (None, "sapiens2"):
        raise Sapiens2StreamError(f"config.json has model_type {cfg.get('model_type')!r}, not 'sapiens2'")
    if task is None:
        known = architectures()
        archs = [a for a in cfg.get("architectures") or [] if a in known]
        if not archs:
            raise Sapiens2StreamError(
                f"config.json names no Sapiens2 architecture ({cfg.get('architectures')}); pass task=..."
            )
        task = known[archs[0]]
    patch = cfg.get("patch_size", 16)
    patch = patch if isinstance(patch, int) else patch[0]
    layers, heads = cfg.get("num_hidden_layers", 24), cfg.get("num_attention_heads", 16)
    kv = cfg.get("num_key_value_heads_per_layer") or gqa_layout(
        layers, heads, cfg.get("num_key_value_attention_heads", 8),
        cfg.get("num_first_full_attention_layers", 8), cfg.get("num_last_full_attention_layers", 8),
    )  # fmt: skip
    if not cfg.get("use_gated_mlp", True):
        raise Sapiens2StreamError("config.json asks for a non-gated MLP; released Sapiens2 models all use SwiGLU")
    backbone = BackboneConfig(
        hidden_size=cfg.get("hidden_size", 1024), num_layers=layers, num_heads=heads, kv_heads=tuple(kv),
        mlp_dim=cfg.get("intermediate_size", 4096), patch_size=patch, in_channels=cfg.get("num_channels", 3),
        num_registers=cfg.get("num_register_tokens", 8), rope_theta=float(cfg.get("rope_theta", 100.0)),
        eps=cfg.get("rms_norm_eps", 1e-6), query_bias=cfg.get("query_bias", True),
        key_bias=cfg.get("key_bias", True), value_bias=cfg.get("value_bias", True),
        proj_bias=cfg.get("proj_bias", True), mlp_bias=cfg.get("mlp_bias", True),
        qk_norm=cfg.get("use_qk_norm", True),
    )  # fmt: skip
    image_size = cfg.get("image_size", list(DEFAULT_IMAGE_SIZE))
    image_size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    if task_spec(task).model_outputs is None:
        return ModelConfig(task, backbone, None, image_size)
    hc = cfg.get("head_config") or {}
    if not hc.get("upsample_out_channels"):
        raise Sapiens2StreamError("config.json has no head_config.upsample_out_channels; it cannot build a task head")
    ps = bool(hc.get("use_pixel_shuffle"))

    def kernels(channels_key: str, kernels_key: str, default_key: str, default: int) -> tuple[int, ...]:
        n = len(hc.get(channels_key) or [])
        return tuple(hc.get(kernels_key) or [hc.get(default_key) or default] * n)

    scale_convs = tuple(hc.get("scale_conv_out_channels") or ())
    scale_kernels = kernels("scale_conv_out_channels", "scale_conv_kernel_sizes", "scale_conv_kernel_size", 1)
    head = HeadConfig(
        kind="pixel_shuffle" if ps else "deconv",
        upsample_channels=tuple(hc["upsample_out_channels"]),
        upsample_kernels=kernels("upsample_out_channels", "upsample_kernel_sizes", "upsample_kernel_size", 4),
        conv_channels=tuple(hc.get("conv_out_channels") or ()),
        conv_kernels=kernels("conv_out_channels", "conv_kernel_sizes", "conv_kernel_size", 1),
        num_outputs=cfg.get("num_labels") or len(cfg.get("id2label") or {}) or task_spec(task).channels,
        scale_conv_channels=scale_convs if task_spec(task).scale_branch else (),
        scale_conv_kernels=scale_kernels if task_spec(task).scale_branch else (),
        scale_hidden=tuple(hc.get("scale_final_hidden_sizes") or ()) if task_spec(task).scale_branch else (),
        scale_grid=scale_grid(image_size, patch, scale_kernels) if scale_convs else (0, 0),
    )
    if task_spec(task).fixed_channels:
        head = replace(head, num_outputs=task_spec(task).channels)
    return ModelConfig(task, backbone, head, image_size)


def to_transformers_config(config: ModelConfig) -> dict:
    """The transformers `config.json` for a model, so that our files load in either library."""
    b = config.backbone
    cfg = {
        "model_type": "sapiens2", "architectures": [task_spec(config.task).architecture],
        "hidden_size": b.hidden_size, "num_hidden_layers": b.num_layers, "num_attention_heads": b.num_heads,
        "num_key_value_heads_per_layer": list(b.kv_heads), "intermediate_size": b.mlp_dim,
        "patch_size": b.patch_size, "num_channels": b.in_channels, "num_register_tokens": b.num_registers,
        "rope_theta": b.rope_theta, "rms_norm_eps": b.eps, "query_bias": b.query_bias, "key_bias": b.key_bias,
        "value_bias": b.value_bias, "proj_bias": b.proj_bias, "mlp_bias": b.mlp_bias, "use_qk_norm": b.qk_norm,
        "use_gated_mlp": True, "hidden_act": "silu", "image_size": list(config.image_size),
    }  # fmt: skip
    h = config.head
    if h is not None:
        head = {
            "upsample_out_channels": list(h.upsample_channels), "upsample_kernel_sizes": list(h.upsample_kernels),
            "conv_out_channels": list(h.conv_channels), "conv_kernel_sizes": list(h.conv_kernels),
        }  # fmt: skip
        if h.kind == "pixel_shuffle":
            head["use_pixel_shuffle"] = True
        if h.scale_conv_channels:
            head.update(
                scale_conv_out_channels=list(h.scale_conv_channels),
                scale_conv_kernel_sizes=list(h.scale_conv_kernels),
                scale_final_hidden_sizes=list(h.scale_hidden),
            )
        cfg["head_config"] = head
        cfg["num_labels"] = h.num_outputs
    return cfg
