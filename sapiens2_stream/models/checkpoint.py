"""Checkpoint key layouts and configuration inference.

Released files and `save_pretrained` output share the original key names; `transformers` renames them only in
memory. `to_original_keys` brings any of those (and a raw state_dict of the transformers modules) to one layout,
the original one with a `backbone.` prefix, which is also our module layout. `infer_config` rebuilds the whole
configuration from tensor names and shapes, which is the only way to load a bare file or the matting model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from ..errors import Sapiens2StreamError
from .config import ModelConfig
from .metadata import NUM_KEYPOINTS
from .shapes import DEFAULT_IMAGE_SIZE, BackboneConfig, HeadConfig, scale_grid
from .tasks import TASKS

# Tensors that may be present in released files but that inference does not use.
IGNORED = re.compile(r"^(backbone\.)?(rope_embed\.periods|mask_token)$")

_BACKBONE_RENAMES = [
    (r"^embeddings\.cls_token$", "cls_token"),
    (r"^embeddings\.register_tokens$", "storage_tokens"),
    (r"^embeddings\.patch_embeddings\.", "patch_embed.projection."),
    (r"^embeddings\.mask_token$", "mask_token"),
    (r"^model\.layer\.(\d+)\.norm1\.", r"blocks.\1.ln1."),
    (r"^model\.layer\.(\d+)\.norm2\.", r"blocks.\1.ln2."),
    (r"^model\.layer\.(\d+)\.attention\.q_proj\.", r"blocks.\1.attn.wq."),
    (r"^model\.layer\.(\d+)\.attention\.k_proj\.", r"blocks.\1.attn.wk."),
    (r"^model\.layer\.(\d+)\.attention\.v_proj\.", r"blocks.\1.attn.wv."),
    (r"^model\.layer\.(\d+)\.attention\.o_proj\.", r"blocks.\1.attn.proj."),
    (r"^model\.layer\.(\d+)\.attention\.(q_norm|k_norm)\.", r"blocks.\1.attn.\2."),
    (r"^model\.layer\.(\d+)\.layer_scale1\.lambda1$", r"blocks.\1.attn.gamma.weight"),
    (r"^model\.layer\.(\d+)\.mlp\.down_proj\.", r"blocks.\1.ffn.w3."),
    (r"^norm\.weight$", "ln1.weight"),
]


def _is_transformers_layout(keys: list[str]) -> bool:
    return any(".layer." in k and (".attention." in k or ".mlp." in k) for k in keys) or any(
        k.endswith("embeddings.cls_token") for k in keys
    )


def _transformers_backbone_key(key: str) -> str:
    for pattern, repl in _BACKBONE_RENAMES:
        new, n = re.subn(pattern, repl, key)
        if n:
            return new
    return key


def _transformers_head_key(key: str, pixel_shuffle: bool, predictor: str) -> str:
    """decode_head / scale_head keys of the transformers modules -> original `decode_head.*` names."""
    m = re.match(r"^decode_head\.(upsample_layers|conv_layers)\.(\d+)\.convolution\.(\w+)$", key)
    if m:
        kind, i, p = m.group(1), int(m.group(2)), m.group(3)
        if kind == "conv_layers":
            return f"decode_head.conv_layers.{3 * i}.{p}"
        return f"decode_head.upsample_blocks.{i}.0.{p}" if pixel_shuffle else f"decode_head.deconv_layers.{3 * i}.{p}"
    if key.startswith("decode_head.input_conv.convolution."):
        return "decode_head.input_conv.0." + key.rsplit(".", 1)[1]
    if key.startswith("decode_head.predictor."):
        return f"decode_head.{predictor}." + key.rsplit(".", 1)[1]
    m = re.match(r"^scale_head\.conv_layers\.(\d+)\.convolution\.(\w+)$", key)
    if m:
        return f"decode_head.scale_conv_layers.{3 * int(m.group(1))}.{m.group(2)}"
    mlp = {"block1.layers.0": 1, "block2.layers.0": 3, "proj": 5}
    m = re.match(r"^scale_head\.predictor\.(block1\.layers\.0|block2\.layers\.0|proj)\.(\w+)$", key)
    if m:
        return f"decode_head.scale_final_layer.{mlp[m.group(1)]}.{m.group(2)}"
    return key


def _transformers_task(sd: Mapping[str, torch.Tensor]) -> str:
    if "decode_head.predictor.weight" not in sd:
        return "pretrain"
    if any(k.startswith("scale_head.") for k in sd):
        return "pointmap"
    outputs = sd["decode_head.predictor.weight"].shape[0]
    if any(k.startswith("decode_head.input_conv.") for k in sd):
        return "matting" if outputs == 4 else "normal"
    return "pose" if outputs == NUM_KEYPOINTS else "seg"


def to_original_keys(sd: Mapping[str, torch.Tensor], task: str | None = None) -> dict[str, torch.Tensor]:
    """Any supported key layout -> original names with a `backbone.` prefix (our module layout)."""
    keys = list(sd)
    out: dict[str, torch.Tensor] = {}
    if _is_transformers_layout(keys):
        task = task or _transformers_task(sd)
        pixel_shuffle = any(k.startswith("decode_head.input_conv.") for k in keys)
        for key, value in sd.items():
            if key.startswith(("decode_head.", "scale_head.")):
                out[_transformers_head_key(key, pixel_shuffle, f"conv_{task}")] = value
                continue
            inner = key[len("model.") :] if key.startswith("model.") and task != "pretrain" else key
            gate_up = re.match(r"^model\.layer\.(\d+)\.mlp\.(gate_proj|up_proj)\.(\w+)$", inner)
            if gate_up:
                continue  # fused below
            out["backbone." + _transformers_backbone_key(inner)] = value
        prefix = "" if task == "pretrain" else "model."
        for key in keys:
            m = re.match(rf"^{re.escape(prefix)}model\.layer\.(\d+)\.mlp\.gate_proj\.(\w+)$", key)
            if m:
                i, p = m.groups()
                up = sd[f"{prefix}model.layer.{i}.mlp.up_proj.{p}"]
                out[f"backbone.blocks.{i}.ffn.w12.{p}"] = torch.cat([sd[key], up], dim=0)
        return out
    if not any(k.startswith("backbone.") for k in keys):  # pretrain files carry no prefix
        return {("backbone." + k if not k.startswith("decode_head.") else k): v for k, v in sd.items()}
    return dict(sd)


def _require(sd: Mapping[str, torch.Tensor], key: str) -> torch.Tensor:
    if key not in sd:
        raise Sapiens2StreamError(f"checkpoint has no tensor {key!r}; it is not a Sapiens2 checkpoint or is incomplete")
    return sd[key]


def _indexed(sd: Mapping[str, torch.Tensor], prefix: str) -> list[tuple[int, str]]:
    """Sorted (index, weight key) of `prefix.N.weight` entries."""
    found = []
    for key in sd:
        m = re.match(rf"^{re.escape(prefix)}\.(\d+)\.weight$", key)
        if m:
            found.append((int(m.group(1)), key))
    return sorted(found)


def infer_backbone(sd: Mapping[str, torch.Tensor]) -> BackboneConfig:
    d = _require(sd, "backbone.cls_token").shape[-1]
    proj = _require(sd, "backbone.patch_embed.projection.weight")
    layers = 1 + max(int(m.group(1)) for k in sd if (m := re.match(r"^backbone\.blocks\.(\d+)\.", k)))
    b0 = "backbone.blocks.0.attn."
    if f"{b0}q_norm.weight" in sd:
        head_dim = sd[f"{b0}q_norm.weight"].shape[0]
    else:
        raise Sapiens2StreamError("checkpoint has no QK-norm weights; cannot infer the head size of this model")
    kv = tuple(_require(sd, f"backbone.blocks.{i}.attn.wk.weight").shape[0] // head_dim for i in range(layers))
    if "backbone.blocks.0.ffn.w12.weight" not in sd:
        raise Sapiens2StreamError("checkpoint has no fused SwiGLU `ffn.w12`; only gated-MLP Sapiens2 models exist")
    theta = 100.0
    periods = sd.get("backbone.rope_embed.periods")
    if periods is not None and periods.numel() > 1 and float(periods[1]) > 0:
        theta = float(f"{float(periods[1]) ** (head_dim / 4):.5g}")
    storage = sd.get("backbone.storage_tokens")
    return BackboneConfig(
        hidden_size=d, num_layers=layers, num_heads=d // head_dim, kv_heads=kv,
        mlp_dim=_require(sd, "backbone.blocks.0.ffn.w3.weight").shape[1], patch_size=proj.shape[-1],
        in_channels=proj.shape[1], num_registers=0 if storage is None else storage.shape[1], rope_theta=theta,
        query_bias=f"{b0}wq.bias" in sd, key_bias=f"{b0}wk.bias" in sd, value_bias=f"{b0}wv.bias" in sd,
        proj_bias=f"{b0}proj.bias" in sd, mlp_bias="backbone.blocks.0.ffn.w12.bias" in sd,
        layer_scale=f"{b0}gamma.weight" in sd,
    )  # fmt: skip


def _trained_image_size(flat: int, channels: int, patch: int, kernels: tuple[int, ...]) -> tuple[int, int]:
    """The 3:4 (H:W) input size whose scale-branch grid gives the MLP's flatten size (1024x768 when released)."""
    cells = flat // channels
    candidates = [DEFAULT_IMAGE_SIZE] + [(gh * patch, gh * 3 // 4 * patch) for gh in range(4, 1025, 4)]
    for size in candidates if flat % channels == 0 else []:
        h, w = scale_grid(size, patch, kernels)
        if h * w == cells:
            return size
    raise Sapiens2StreamError(
        f"pointmap scale MLP takes {flat} inputs, which matches no 3:4 input size; load it with its config.json"
    )


def infer_config(sd: Mapping[str, torch.Tensor], task: str | None = None) -> ModelConfig:
    """Every shape of a model from the names and shapes of its tensors (original layout, see to_original_keys)."""
    backbone = infer_backbone(sd)
    # a head's predictor is named after its task: decode_head.conv_<task>
    predictors = [(f"conv_{t}", t) for t in TASKS if f"decode_head.conv_{t}.weight" in sd]
    if not predictors:
        if any(k.startswith("decode_head.") for k in sd):
            raise Sapiens2StreamError(
                "checkpoint has a decode_head without a known predictor (conv_pose, conv_seg, conv_normal, "
                "conv_pointmap, conv_matting): unknown task"
            )
        return ModelConfig("pretrain", backbone)
    name, found_task = predictors[0]
    if task is not None and task != found_task:
        raise Sapiens2StreamError(f"checkpoint holds a {found_task} model, not {task}")
    pred = sd[f"decode_head.{name}.weight"]
    conv = [sd[k] for _, k in _indexed(sd, "decode_head.conv_layers")]
    if "decode_head.input_conv.0.weight" in sd:
        blocks = {m.group(1) for k in sd if (m := re.match(r"^decode_head\.upsample_blocks\.(\d+)\.0\.weight$", k))}
        ups = [_require(sd, f"decode_head.upsample_blocks.{i}.0.weight") for i in range(len(blocks))]
        kind, up_ch, up_k = "pixel_shuffle", [w.shape[0] // 4 for w in ups], [w.shape[-1] for w in ups]
    else:
        ups = [sd[k] for _, k in _indexed(sd, "decode_head.deconv_layers")]
        kind, up_ch, up_k = "deconv", [w.shape[1] for w in ups], [w.shape[-1] for w in ups]
    scale_convs = [sd[k] for _, k in _indexed(sd, "decode_head.scale_conv_layers")]
    image_size, scale_kw = DEFAULT_IMAGE_SIZE, {}
    if scale_convs:
        channels, kernels = tuple(w.shape[0] for w in scale_convs), tuple(w.shape[-1] for w in scale_convs)
        first = _require(sd, "decode_head.scale_final_layer.1.weight")
        image_size = _trained_image_size(first.shape[1], channels[-1], backbone.patch_size, kernels)
        scale_kw = dict(
            scale_conv_channels=channels, scale_conv_kernels=kernels,
            scale_hidden=(first.shape[0], _require(sd, "decode_head.scale_final_layer.3.weight").shape[0]),
            scale_grid=scale_grid(image_size, backbone.patch_size, kernels),
        )  # fmt: skip
    head = HeadConfig(
        kind=kind, upsample_channels=tuple(up_ch), upsample_kernels=tuple(up_k),
        conv_channels=tuple(w.shape[0] for w in conv), conv_kernels=tuple(w.shape[-1] for w in conv),
        num_outputs=pred.shape[0], **scale_kw,
    )  # fmt: skip
    return ModelConfig(found_task, backbone, head, image_size)


def check_state_dict(expected: Mapping[str, torch.Tensor], found: Mapping[str, torch.Tensor]) -> None:
    """Raise one error naming every missing, unexpected and mis-shaped tensor."""

    def listing(names: list[str]) -> str:
        return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")

    found = {k: v for k, v in found.items() if not IGNORED.match(k)}
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    shapes = sorted(
        f"{k} {tuple(found[k].shape)} (model expects {tuple(expected[k].shape)})"
        for k in set(expected) & set(found)
        if tuple(found[k].shape) != tuple(expected[k].shape)
    )
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing: {listing(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected: {listing(unexpected)}")
    if shapes:
        problems.append(f"{len(shapes)} with wrong shape: {listing(shapes)}")
    if problems:
        raise Sapiens2StreamError(
            "checkpoint does not match the model: "
            + "; ".join(problems)
            + " (is it the right task and size, and complete?)"
        )


def rope_periods(theta: float, head_dim: int) -> torch.Tensor:
    """The `rope_embed.periods` buffer released files carry: theta^(4i/d) for i < d/4."""
    return theta ** (torch.arange(head_dim // 4, dtype=torch.float32) * 4 / head_dim)


def split_pretrain_prefix(sd: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our layout -> released pretrain layout (no `backbone.` prefix)."""
    return {k[len("backbone.") :] if k.startswith("backbone.") else k: v for k, v in sd.items()}
