"""The host's CPU per 1080p frame to decode a video and to encode the annotated one, on the CPU and on the GPU's
video engines (issue 61, item 4):

    python -m benchmarks.hardware_video [--frames 120] [--json PATH]

Decoding: a 1080p H.264 clip (made here with x264) read with `source.decoder: cpu` and `nvdec`; encoding: the same
pictures written with `outputs.video.encoder: cpu` and `nvenc`. Each row says which codec did the work (a machine
without an NVIDIA GPU falls back to the CPU and says so) and the process's CPU milliseconds per frame (user +
system, every thread). On a GPU the difference is the host CPU the video engines save per frame.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from sapiens2_stream.io.options import SourceConfig
from sapiens2_stream.io.sources import Source
from sapiens2_stream.io.synthetic import make_clip
from sapiens2_stream.io.video_writer import VideoWriter


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(work) -> tuple[object, float, float]:
    """work() -> (its value, CPU seconds, wall seconds)."""
    cpu, wall = cpu_seconds(), time.perf_counter()
    value = work()
    return value, cpu_seconds() - cpu, time.perf_counter() - wall


def decode(clip: Path, decoder: str) -> dict:
    source = Source(SourceConfig(uri=str(clip), decoder=decoder))
    pictures, cpu, wall = timed(lambda: [f.rgb for f in source.frames()])
    said = [c for c in source.stats.conversions if c.startswith("decoded")]
    return {"decoder": decoder, "frames": len(pictures), "said": said[0] if said else "decoded on the CPU",
            "cpu_ms_per_frame": round(1000 * cpu / len(pictures), 2), "wall_ms_per_frame":
            round(1000 * wall / len(pictures), 2)}, pictures  # fmt: skip


def encode(pictures: list[np.ndarray], encoder: str, folder: Path) -> dict:
    writer = VideoWriter(folder / f"{encoder}.mp4", 30, encoder=encoder)

    def work() -> None:
        for i, rgb in enumerate(pictures):
            writer.write(rgb, i / 30)
        writer.close()

    _, cpu, wall = timed(work)
    return {"encoder": encoder, "codec": writer.codec, "why_not": writer.why_not,
            "cpu_ms_per_frame": round(1000 * cpu / len(pictures), 2),
            "wall_ms_per_frame": round(1000 * wall / len(pictures), 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        clip = folder / "clip.mp4"
        make_clip(clip, frames=args.frames, size=(1080, 1920), people=2)
        rows = []
        for decoder in ("cpu", "nvdec"):
            row, pictures = decode(clip, decoder)
            rows.append(row)
        rows += [encode(pictures, encoder, folder) for encoder in ("cpu", "nvenc")]
    report = {"frames": args.frames, "size": "1920x1080", "rows": rows}
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
