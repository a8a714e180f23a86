"""What the user sees while a run goes: a progress bar for files (frames, fps, ETA), a status line for live
input (fps, frame age, drops), and the summary at the end."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tqdm import tqdm


class Progress:
    def __init__(self, total: int | None, live: bool, enabled: bool = True) -> None:
        self.live = live
        self.bar = tqdm(
            total=total, unit="frame", dynamic_ncols=True, disable=not enabled, file=sys.stderr,
            desc="live" if live else "frames", smoothing=0.1,
        )  # fmt: skip
        self.last_status = 0.0

    def __call__(self, result, pipeline) -> None:
        self.bar.update(1)
        now = time.time()
        if now - self.last_status > 0.5:
            self.last_status = now
            age_ms = (now - result.frame.wall_s) * 1e3
            drops = sum(q.dropped for q in pipeline.queues) + pipeline.metrics.stale
            people = len(result.people)
            self.bar.set_postfix_str(f"age {age_ms:.0f}ms drops {drops} people {people}", refresh=False)

    def close(self) -> None:
        self.bar.close()


def format_summary(summary: dict) -> str:
    lines = [
        f"frames in {summary['frames_in']}, out {summary['frames_out']} in {summary['seconds']}s "
        f"({summary['fps']} fps, {summary['device']} {summary['dtype']})"
        + (" - interrupted" if summary["interrupted"] else ""),
    ]
    if summary["dropped"]:
        lines.append("dropped: " + ", ".join(f"{k} {v}" for k, v in summary["dropped"].items()))
    if summary["reconnects"]:
        lines.append(f"reconnects {summary['reconnects']}, total gap {summary['gap_s']}s")
    if summary["corrupt_skipped"]:
        lines.append(f"skipped {summary['corrupt_skipped']} undecodable packets or images")
    for stage, v in summary["stage_ms_per_frame"].items():
        lines.append(f"  {stage:7s} p50 {v['p50']:8.1f} ms/frame   p95 {v['p95']:8.1f}")
    if summary["batch_size"]:
        lines.append(
            "batch sizes: "
            + ", ".join(f"{k} max {v['max']} mean {v['mean']}" for k, v in summary["batch_size"].items())
        )
    age = summary["frame_age_ms"]
    lines.append(f"frame age (arrival to written) p50 {age['p50']} ms, p95 {age['p95']} ms, max {age['max']} ms")
    lines.extend(f"note: {e}" for e in summary["events"])
    return "\n".join(lines)


def save_summary(summary: dict, out_dir: str | Path) -> None:
    """summary.json beside the outputs, as `run` and each video of `batch` leave it."""
    (Path(out_dir) / "summary.json").write_text(json.dumps(summary, indent=2))
