"""GPU check for a session lent one: a 0.4b-sized random pose model at 1024x768, bf16.

Crops per second at batch 1, 8 and 32, with and without flip TTA, for ours (eager, and torch.compile with
bucketed static shapes and CUDA graphs) and transformers 5.23.0 (eager; flip as its documented second forward
with flip_pairs), plus achieved TFLOP/s against the device's peak. Run through `benchmarks/gpu.sh`.
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch

from sapiens2_stream.models import load_model, pose_metadata, preset
from sapiens2_stream.models.config import to_transformers_config
from sapiens2_stream.models.fp8 import fp8_refusal, to_fp8

PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0}


def peak_tflops() -> float | None:
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def timed(fn, repeats: int) -> float:
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def forward_flops(model, x) -> int:
    """FLOPs of one forward. The counter's attention formula wants as many key/value heads as query heads (it
    asserts on CUDA's grouped-query path), and grouped-query attention does the same arithmetic per query head as
    full attention, so the count runs with the key/value heads repeated."""
    from unittest import mock

    from torch.nn import functional as F
    from torch.utils.flop_counter import FlopCounterMode

    plain = F.scaled_dot_product_attention

    def repeated_heads(q, k, v, *args, enable_gqa: bool = False, **kwargs):
        if enable_gqa:
            k, v = (t.repeat_interleave(q.shape[-3] // t.shape[-3], dim=-3) for t in (k, v))
        return plain(q, k, v, *args, **kwargs)

    with (
        mock.patch.object(F, "scaled_dot_product_attention", repeated_heads),
        FlopCounterMode(display=False) as counter,
        torch.inference_mode(),
    ):
        model(x)
    return counter.get_total_flops()


def implementations(ours, compiled, ref, x, flip, order, pairs, fp8=None) -> dict:
    """The three ways to get (flip-averaged) heatmaps for batch x; flip runs the mirrored crops too. `fp8`: ours
    compiled with the backbone's products in fp8 (runtime.fp8), a fourth row without flip, where the GPU has fp8."""
    if not flip:
        runs = {"ours eager": lambda: ours(x), "ours compiled": lambda: compiled(x), "transformers": lambda: ref(x)}
        return runs | ({"ours compiled fp8": lambda: fp8(x)} if fp8 is not None else {})
    both = torch.cat([x, x.flip(-1)])
    return {
        "ours eager": lambda: ours.flip_tta(x, order),
        "ours compiled": lambda: compiled(both),
        "transformers": lambda: (ref(x), ref(x.flip(-1), flip_pairs=pairs)),
    }


def main() -> None:
    import transformers

    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device, dtype = torch.device("cuda"), torch.bfloat16
    cfg = to_transformers_config(preset("pose", "0.4b"))
    cfg.pop("model_type")
    cfg.pop("architectures")
    ref = transformers.Sapiens2ForPoseEstimation(transformers.Sapiens2Config(**cfg)).to(device, dtype).eval()
    ours = load_model({k: v for k, v in ref.state_dict().items()}, device=device, dtype=dtype)
    compiled = torch.compile(ours, dynamic=False, mode="reduce-overhead")
    fp8 = None
    if fp8_refusal(device) is None:
        fast = copy.deepcopy(ours)
        to_fp8(fast.backbone)
        fp8 = torch.compile(fast, dynamic=False, mode="reduce-overhead")
    else:
        print(f"no fp8 row: {fp8_refusal(device)}", flush=True)
    order = pose_metadata().flip_indices
    pairs = torch.tensor(pose_metadata().flip_pairs, device=device)
    flops_per_crop = forward_flops(ours, torch.randn(1, 3, 1024, 768, device=device, dtype=dtype))
    peak = peak_tflops()
    rows = []
    with torch.inference_mode():
        for batch in (int(b) for b in args.batches.split(",")):
            x = torch.randn(batch, 3, 1024, 768, device=device, dtype=dtype)
            for flip in (False, True):
                runs = implementations(ours, compiled, ref, x, flip, order, pairs, fp8)
                for name, fn in runs.items():
                    seconds = timed(fn, args.repeats)
                    forwards = batch * (2 if flip else 1)
                    tflops = flops_per_crop * forwards / seconds / 1e12
                    fraction = round(tflops / peak, 3) if peak else None
                    rows.append(dict(impl=name, batch=batch, flip=flip, crops_per_s=round(batch / seconds, 2),
                                     tflops=round(tflops, 1), peak_fraction=fraction))  # fmt: skip
                    print(rows[-1], flush=True)
    for batch in {r["batch"] for r in rows}:
        for flip in (False, True):
            group = {r["impl"]: r["crops_per_s"] for r in rows if r["batch"] == batch and r["flip"] == flip}
            print(f"batch {batch:3d} flip {flip!s:5s}: compiled/transformers "
                  f"{group['ours compiled'] / group['transformers']:.2f}x, eager/transformers "
                  f"{group['ours eager'] / group['transformers']:.2f}x")  # fmt: skip
            if "ours compiled fp8" in group:
                print(f"batch {batch:3d}: fp8/bf16 compiled {group['ours compiled fp8'] / group['ours compiled']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "flops_per_crop": flops_per_crop, "rows": rows}, f,
                      indent=2)  # fmt: skip


if __name__ == "__main__":
    main()
