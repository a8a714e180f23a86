"""Builders for the transformers 5.23.0 reference models used as the parity oracle."""

from __future__ import annotations

import torch

TASK_CLASSES = {
    "pose": "Sapiens2ForPoseEstimation",
    "seg": "Sapiens2ForSemanticSegmentation",
    "normal": "Sapiens2ForNormalEstimation",
    "pointmap": "Sapiens2ForPointmapEstimation",
    "matting": "Sapiens2ForImageMatting",
    "pretrain": "Sapiens2Model",
}

HEADS = {
    "pose": dict(upsample_out_channels=[24, 16], conv_out_channels=[16, 12]),
    "seg": dict(upsample_out_channels=[16, 12, 8], conv_out_channels=[8, 8]),
    "normal": dict(use_pixel_shuffle=True, upsample_out_channels=[24, 16, 8], upsample_kernel_sizes=[3, 3, 3],
                   conv_out_channels=[8, 4], conv_kernel_sizes=[3, 3]),
    "matting": dict(use_pixel_shuffle=True, upsample_out_channels=[16, 8], upsample_kernel_sizes=[3, 3],
                    conv_out_channels=[8, 4, 4], conv_kernel_sizes=[3, 3, 3]),
    "pointmap": dict(use_pixel_shuffle=True, upsample_out_channels=[24, 16, 8], upsample_kernel_sizes=[3, 3, 3],
                     conv_out_channels=[8, 4], conv_kernel_sizes=[3, 3], scale_conv_out_channels=[24, 16, 8],
                     scale_final_hidden_sizes=[16, 8]),
}  # fmt: skip
NUM_LABELS = {"pose": 308, "seg": 29, "normal": 3, "pointmap": 3, "matting": 4}


def reference_model(task: str, seed: int = 0, image_size=(256, 192), **backbone):
    """A random transformers Sapiens2 model for `task`; `backbone` overrides the small default shape."""
    import transformers

    shape = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=96,
                 num_key_value_attention_heads=2, num_first_full_attention_layers=1,
                 num_last_full_attention_layers=1)  # fmt: skip
    shape.update(backbone)
    kwargs = dict(shape, image_size=list(image_size))
    if task != "pretrain":
        kwargs.update(head_config=HEADS[task], num_labels=NUM_LABELS[task])
    config = transformers.Sapiens2Config(**kwargs)
    torch.manual_seed(seed)
    model = getattr(transformers, TASK_CLASSES[task])(config).eval()
    with torch.no_grad():  # LayerScale starts at 1 and norms at 1: perturb so every parameter matters
        for name, p in model.named_parameters():
            if name.endswith(
                ("lambda1", "norm.weight", "norm1.weight", "norm2.weight", "q_norm.weight", "k_norm.weight")
            ):
                p.add_(0.1 * torch.randn_like(p))
    return model
