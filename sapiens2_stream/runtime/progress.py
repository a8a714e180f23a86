"""What the user sees while a run goes: a progress bar for files (frames, fps, ETA), a status line for live
input (frames/s processed and written, frame age, drops by reason, time under load), and the summary at the end."""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

SHORT_REASONS = {"waiting_too_long": "waiting", "queue_full": "queue full", "output_too_slow": "output slow"}


class Progress:
    def __init__(self, pipeline, enabled: bool = True) -> None:
        streams = pipeline.streams
        self.live = any(s.live for s in streams)
        self.enabled = enabled
        totals = [s.source.total_frames for s in streams]
        total = None if self.live or None in totals else sum(totals)
        self.bar = tqdm(
            total=total, unit="frame", dynamic_ncols=True, disable=not enabled, file=sys.stderr,
            desc="live" if self.live else "frames", smoothing=0.1,
        )  # fmt: skip
        self.last_status = time.time()
        self.last_counts = {id(s): (s.processed, s.metrics.frames_out) for s in streams}

    def __call__(self, result, pipeline) -> None:
        self.bar.update(1)
        now = time.time()
        if self.live and self.enabled and now - self.last_status > 1.0:
            parts = [self.status(s, now - self.last_status, now) for s in pipeline.streams if s.live]
            self.last_status = now
            self.bar.set_postfix_str(" | ".join(parts), refresh=False)

    def status(self, stream, seconds: float, now: float) -> str:
        """processed and written frames/s since the last status, frame age, drops by reason, share of time behind."""
        processed, written = stream.processed, stream.metrics.frames_out
        before = self.last_counts[id(stream)]
        self.last_counts[id(stream)] = (processed, written)
        ages = list(itertools.islice(reversed(stream.metrics.frame_age_ms), 10))  # the latest ten
        drops = ", ".join(f"{SHORT_REASONS[r]} {n}" for r, n in stream.dropped.items() if n) or "none"
        behind = stream.behind_s / max(now - stream.started, 1e-9)
        name = f"{stream.name}: " if stream.name else ""
        rates = f"{(processed - before[0]) / seconds:.1f} fps processed, {(written - before[1]) / seconds:.1f} written"
        age = sum(ages) / max(len(ages), 1)
        return f"{name}{rates}, age {age:.0f} ms, drops: {drops}, behind {behind:.0%}"

    def close(self) -> None:
        self.bar.close()


def format_source(summary: dict) -> list[str]:
    lines = [
        f"frames in {summary['frames_in']}, out {summary['frames_out']} in {summary['seconds']}s "
        f"({summary['processed_fps']} fps processed, {summary['written_fps']} written)"
    ]
    if summary["dropped"]:
        lines.append("dropped: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in summary["dropped"].items()))
    if summary.get("under_load_share"):
        lines.append(f"behind the live source {summary['under_load_share']:.0%} of the time")
    det = summary["detector"]
    if det["every"] != 1:
        lines.append(f"detector (every {det['every']}) ran on {det['frames_detected']} frames")
    if summary["reconnects"]:
        lines.append(f"reconnects {summary['reconnects']}, total gap {summary['gap_s']}s")
    if summary.get("left_unprocessed"):
        lines.append(f"stopped: {summary['left_unprocessed']} frames read were left unprocessed (for a file or "
                     "image folder, run --resume continues from them)")  # fmt: skip
    if summary["corrupt_skipped"]:
        lines.append(f"skipped {summary['corrupt_skipped']} undecodable packets or images")
    lines.extend(f"frames {c}" for c in summary.get("conversions", []))
    if "temporal" in summary:
        lines.append(format_temporal(summary["temporal"]))
    for stage, v in summary["stage_ms_per_frame"].items():
        lines.append(f"  {stage:8s} p50 {v['p50']:8.1f} ms/frame   p95 {v['p95']:8.1f}")
    age = summary["frame_age_ms"]
    lines.append(f"frame age (arrival to written) p50 {age['p50']} ms, p95 {age['p95']} ms, max {age['max']} ms")
    if "error" in summary:
        lines.append(f"failed: {summary['error']}")
    lines.extend(f"note: {e}" for e in summary["events"])
    return lines


def format_temporal(temporal: dict) -> str:
    """The temporal filter's line: what ran, its cost per frame, how often the history was dropped."""
    outputs = {k: v for k, v in temporal.items() if isinstance(v, dict)}
    parts = ", ".join(f"{k} {v['ms_per_frame']} ms" for k, v in outputs.items())
    resets = max(v["resets"] for v in outputs.values())
    return (f"steady over time: {parts} per frame, flow {temporal['flow_ms_per_frame']} ms; "
            f"history dropped {resets} times (cuts, light jumps, moves the flow could not follow)")  # fmt: skip


def format_summary(summary: dict) -> str:
    head = f"{summary['device']} {summary['dtype']} ({summary['dtype_reason']})" + (
        " - interrupted" if summary["interrupted"] else "")  # fmt: skip
    lines = [head]
    if "sources" in summary:
        for name, source in summary["sources"].items():
            lines.append(f"[{name}] " + "\n  ".join(format_source(source)))
        t = summary["totals"]
        lines.append(f"total: frames in {t['frames_in']}, out {t['frames_out']} in {t['seconds']}s "
                     f"({t['processed_fps']} fps processed, {t['written_fps']} written)")  # fmt: skip
        lines.extend(f"note: {e}" for e in summary["events"])
    else:
        lines += format_source(summary)
    if summary["batch_size"]:
        lines.append("batch sizes: " + ", ".join(
            f"{k} max {v['max']} mean {v['mean']}" for k, v in summary["batch_size"].items()))  # fmt: skip
    if summary["live_batch_sizes"]:
        lines.append("live batches (frames x times): " + ", ".join(
            f"{k} x {v}" for k, v in summary["live_batch_sizes"].items()))  # fmt: skip
    return "\n".join(lines)


def save_summary(summary: dict, out_dir: str | Path) -> None:
    """summary.json beside the outputs, as `run` and each video of `batch` leave it; with several sources also
    each source's own in its folder."""
    out = Path(out_dir)
    for name, source in summary.get("sources", {}).items():
        save_summary(source, out / name)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
