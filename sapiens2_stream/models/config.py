"""Model configurations: backbone and head shapes, size presets, and the transformers `config.json` format.

Everything a Sapiens2 model needs to be built is in `ModelConfig`. It can come from a size preset, from the
`config.json` that the hub and `save_pretrained` write, or from the tensor shapes of a bare checkpoint
(see `checkpoint.infer_config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import Sapiens2StreamError

TASKS = ("pose", "seg", "normal", "pointmap", "matting", "pretrain")
DENSE_TASKS = ("seg", "normal", "pointmap", "matting")

#: transformers class name <-> our task name
ARCHITECTURES = {
    "Sapiens2ForPoseEstimation": "pose",
    "Sapiens2ForSemanticSegmentation": "seg",
    "Sapiens2ForNormalEstimation": "normal",
    "Sapiens2ForPointmapEstimation": "pointmap",
    "Sapiens2ForImageMatting": "matting",
    "Sapiens2Model": "pretrain",
    "Sapiens2Backbone": "pretrain",
}
TASK_ARCHITECTURE = {task: arch for arch, task in ARCHITECTURES.items() if arch != "Sapiens2Backbone"}

#: number of output channels of each task's predictor
TASK_OUTPUTS = {"pose": 308, "seg": 29, "normal": 3, "pointmap": 3, "matting": 4}

DEFAULT_IMAGE_SIZE = (1024, 768)


@dataclass(frozen=True)
class BackboneConfig:
    """Shape of the ViT backbone. `kv_heads` holds one key/value head count per layer (GQA)."""

    hidden_size: int = 1024
    num_layers: int = 24
    num_heads: int = 16
    kv_heads: tuple[int, ...] = ()
    mlp_dim: int = 4096
    patch_size: int = 16
    in_channels: int = 3
    num_registers: int = 8
    rope_theta: float = 100.0
    eps: float = 1e-6
    query_bias: bool = True
    key_bias: bool = True
    value_bias: bool = True
    proj_bias: bool = True
    mlp_bias: bool = True
    qk_norm: bool = True
    layer_scale: bool = True

    def __post_init__(self) -> None:
        if not self.kv_heads:
            object.__setattr__(self, "kv_heads", gqa_layout(self.num_layers, self.num_heads, self.num_heads // 2))
        if self.hidden_size % self.num_heads:
            raise Sapiens2StreamError(
                f"hidden size {self.hidden_size} is not divisible by {self.num_heads} heads; fix the config"
            )
        if len(self.kv_heads) != self.num_layers or any(self.num_heads % k for k in self.kv_heads):
            raise Sapiens2StreamError(
                f"key/value heads per layer {list(self.kv_heads)} must have {self.num_layers} entries that divide "
                f"{self.num_heads}; fix the config"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass(frozen=True)
class HeadConfig:
    """Shape of a task head.

    `kind` is "deconv" (pose, seg: transposed convolutions) or "pixel_shuffle" (normal, pointmap, matting).
    The pointmap scale branch exists when `scale_conv_channels` is non-empty; `scale_grid` is the backbone grid
    it was trained on (the image size over the patch size), which its flatten layer depends on.
    """

    kind: str
    upsample_channels: tuple[int, ...]
    upsample_kernels: tuple[int, ...]
    conv_channels: tuple[int, ...]
    conv_kernels: tuple[int, ...]
    num_outputs: int
    scale_conv_channels: tuple[int, ...] = ()
    scale_conv_kernels: tuple[int, ...] = ()
    scale_hidden: tuple[int, ...] = ()
    scale_grid: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class ModelConfig:
    task: str
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    head: HeadConfig | None = None
    image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise Sapiens2StreamError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)}")
        if (self.head is None) != (self.task == "pretrain"):
            raise Sapiens2StreamError(f"task {self.task!r} needs {'no' if self.head is None else 'a'} head config")


def gqa_layout(num_layers: int, num_heads: int, kv_heads: int, full_first: int = 8, full_last: int = 8) -> tuple:
    """Key/value heads per layer: full multi-head in the first and last layers, grouped in between."""
    return tuple(num_heads if (i < full_first or i >= num_layers - full_last) else kv_heads for i in range(num_layers))


# Released sizes (the original arch zoo): hidden, layers, heads, MLP width; GQA uses heads/2 key/value heads.
SIZES: dict[str, tuple[int, int, int, int]] = {
    "0.1b": (768, 12, 12, 3072),
    "0.4b": (1024, 24, 16, 4096),
    "0.8b": (1280, 32, 16, 5120),
    "1b": (1536, 40, 24, 6144),
    "5b": (2432, 56, 32, 9728),
}


def backbone_preset(size: str) -> BackboneConfig:
    if size not in SIZES:
        raise Sapiens2StreamError(f"unknown model size {size!r}; choose one of {', '.join(SIZES)}")
    d, layers, heads, mlp = SIZES[size]
    return BackboneConfig(d, layers, heads, gqa_layout(layers, heads, heads // 2), mlp)


def head_preset(task: str, size: str) -> HeadConfig | None:
    """Head widths of the released task checkpoints (original task configs). Matting's are unpublished."""
    if task == "pretrain":
        return None
    if task == "pose":
        up, conv = ((1536, 1024), (768, 512, 256)) if size == "1b" else ((1024, 768), (512, 512, 256))
        return HeadConfig("deconv", up, (4,) * len(up), conv, (1,) * len(conv), TASK_OUTPUTS["pose"])
    if task == "seg":
        return HeadConfig("deconv", (512, 256, 128, 64), (4,) * 4, (64, 64), (1, 1), TASK_OUTPUTS["seg"])
    big = size == "5b"
    if task == "normal":
        up, conv = ((1536, 768, 512, 256), (128, 64, 32)) if big else ((768, 512, 256, 128), (64, 32, 16))
        return HeadConfig("pixel_shuffle", up, (3,) * 4, conv, (3,) * 3, TASK_OUTPUTS["normal"])
    if task == "pointmap":
        up, conv = ((1536, 768, 768, 768), (128, 64, 32)) if big else ((1536, 768, 512, 256), (64, 32, 16))
        return HeadConfig(
            "pixel_shuffle", up, (3,) * 4, conv, (3,) * 3, TASK_OUTPUTS["pointmap"],
            scale_conv_channels=(1536, 512, 128), scale_conv_kernels=(1, 1, 1), scale_hidden=(512, 128),
            scale_grid=scale_grid(DEFAULT_IMAGE_SIZE, 16, (1, 1, 1)),
        )  # fmt: skip
    raise Sapiens2StreamError(
        f"no published head widths for {task!r} {size}; load the checkpoint file itself (its shapes define the head)"
    )


def preset(task: str, size: str) -> ModelConfig:
    """The configuration of a released checkpoint, by task and size name."""
    return ModelConfig(task, backbone_preset(size), head_preset(task, size))


def hub_id(task: str, size: str) -> str:
    return f"facebook/sapiens2-{task}-{size}"


def scale_grid(image_size: tuple[int, int], patch_size: int, kernels: tuple[int, ...]) -> tuple[int, int]:
    """Spatial size after the stride-2 scale convolutions for a given input size."""
    h, w = image_size[0] // patch_size, image_size[1] // patch_size
    for k in kernels:
        pad = (k - 1) // 2
        h, w = (h + 2 * pad - k) // 2 + 1, (w + 2 * pad - k) // 2 + 1
    return h, w


# ----------------------------------------------------------------------------------------------------------
# The transformers config.json format (model_type "sapiens2"), as on the hub and written by save_pretrained.


def from_transformers_config(cfg: dict, task: str | None = None) -> ModelConfig:
    """Read a transformers `config.json` dict; `task` overrides the one named by `architectures`."""
    if cfg.get("model_type") not in (None, "sapiens2"):
        raise Sapiens2StreamError(f"config.json has model_type {cfg.get('model_type')!r}, not 'sapiens2'")
    if task is None:
        archs = [a for a in cfg.get("architectures") or [] if a in ARCHITECTURES]
        if not archs:
            raise Sapiens2StreamError(
                f"config.json names no Sapiens2 architecture ({cfg.get('architectures')}); pass task=..."
            )
        task = ARCHITECTURES[archs[0]]
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
    if task == "pretrain":
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
        num_outputs=cfg.get("num_labels") or len(cfg.get("id2label") or {}) or TASK_OUTPUTS[task],
        scale_conv_channels=scale_convs if task == "pointmap" else (),
        scale_conv_kernels=scale_kernels if task == "pointmap" else (),
        scale_hidden=tuple(hc.get("scale_final_hidden_sizes") or ()) if task == "pointmap" else (),
        scale_grid=scale_grid(image_size, patch, scale_kernels) if scale_convs else (0, 0),
    )
    if task in ("normal", "pointmap"):
        head = replace(head, num_outputs=3)
    elif task == "matting":
        head = replace(head, num_outputs=4)
    return ModelConfig(task, backbone, head, image_size)


def to_transformers_config(config: ModelConfig) -> dict:
    """The transformers `config.json` for a model, so that our files load in either library."""
    b = config.backbone
    cfg = {
        "model_type": "sapiens2", "architectures": [TASK_ARCHITECTURE[config.task]],
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
