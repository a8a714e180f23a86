"""Model forward: ours against transformers 5.23.0, same configuration and weights, CPU.

Run: `python -m benchmarks.model_forward` (needs the dev extra for transformers).
"""

from __future__ import annotations

import torch

from benchmarks.common import median_seconds, print_table
from sapiens2_stream.models import load_model
from sapiens2_stream.runtime.device import compile_model

# A 0.1b-like backbone with the real pose head structure, at half resolution, so a CPU run takes seconds.
BACKBONE = dict(
    hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536,
    num_key_value_attention_heads=3, num_first_full_attention_layers=4, num_last_full_attention_layers=4,
)  # fmt: skip
HEAD = dict(upsample_out_channels=[256, 192], conv_out_channels=[128, 128, 64])
SIZE = (512, 384)


def reference_pose_model():
    import transformers

    config = transformers.Sapiens2Config(**BACKBONE, head_config=HEAD, num_labels=308, image_size=list(SIZE))
    torch.manual_seed(0)
    return transformers.Sapiens2ForPoseEstimation(config).eval()


def compare(ref, ours, x: torch.Tensor, repeats: int) -> dict:
    with torch.inference_mode():
        diff = (ours(x).heatmaps.float() - ref(x).heatmaps.float()).abs().max().item()
        return dict(
            name=f"pose forward {str(x.dtype)[6:]} B={x.shape[0]} {SIZE[0]}x{SIZE[1]}",
            ours_s=median_seconds(lambda: ours(x), repeats),
            baseline="transformers Sapiens2ForPoseEstimation",
            baseline_s=median_seconds(lambda: ref(x), repeats),
            max_abs_diff=diff,
        )


def run(batch: int = 2, repeats: int = 3) -> list[dict]:
    ref = reference_pose_model()
    ours = load_model(ref.state_dict())
    x = torch.randn(batch, 3, *SIZE)
    return [compare(ref.to(dtype), ours.to(dtype), x.to(dtype), repeats) for dtype in (torch.float32, torch.bfloat16)]


def run_compiled(batch: int = 2, repeats: int = 3) -> list[dict]:
    """Ours with `runtime.compile: on` (static shapes). Compilation (about 25 s here) is not timed; run last, as
    the compiler's worker processes linger and would disturb later measurements."""
    ref = reference_pose_model()
    compiled = compile_model(load_model(ref.state_dict()), torch.device("cpu"))
    row = compare(ref, compiled, torch.randn(batch, 3, *SIZE), repeats)
    return [row | {"name": row["name"] + ", ours compiled"}]


if __name__ == "__main__":
    rows = run()
    print_table(rows)
    for r in rows:
        print(f"{r['name']}: max |ours - reference| = {r['max_abs_diff']:.2e}")
