"""What the user sees while a run goes: a progress bar for files (frames, fps, ETA), a status line for live
input (frames/s processed and written, frame age, drops by reason, time under load), and the summary at the end."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

from .observer import Observer

SHORT_REASONS = {"waiting_too_long": "waiting", "queue_full": "queue full", "output_too_slow": "output slow"}


class Progress(Observer):
    """The progress bar (files) or status line (live sources) of a run, from each source's numbers."""

    def __init__(self, pipeline, enabled: bool = True) -> None:
        streams = pipeline.streams
        self.pipeline = pipeline
        self.live = any(s.live for s in streams)
        self.enabled = enabled
        totals = [s.source.total_frames for s in streams]
        total = None if self.live or None in totals else sum(totals)
        self.bar = tqdm(
            total=total, unit="frame", dynamic_ncols=True, disable=not enabled, file=sys.stderr,
            desc="live" if self.live else "frames", smoothing=0.1,
        )  # fmt: skip
        self.last_status = time.time()

    def result(self, result, stream) -> None:
        self.bar.update(1)
        now = time.time()
        if self.live and self.enabled and now - self.last_status > 1.0:
            parts = [self.status(s) for s in self.pipeline.streams if s.live]
            self.last_status = now
            self.bar.set_postfix_str(" | ".join(parts), refresh=False)

    @staticmethod
    def status(stream) -> str:
        """Recent frames/s processed and written, the latest frames' age, drops by reason, share of time behind."""
        n = stream.numbers.snapshot()
        connection = stream.source.connection
        if connection is not None and not connection.up:  # a camera not delivering: why, and when it is tried next
            c = connection.snapshot()
            why = f" ({c['reason']})" if c["reason"] else ""
            nxt = f", next try in {c['next_attempt_in_s']:.0f} s" if c["next_attempt_in_s"] is not None else ""
            return f"{stream.name + ': ' if stream.name else ''}{c['state']}{why}{nxt}"
        drops = ", ".join(f"{SHORT_REASONS[r]} {k}" for r, k in n["dropped"].items()) or "none"
        name = f"{stream.name}: " if stream.name else ""
        recent = n["recent_fps"]
        rates = f"{recent['processed']:.1f} fps processed, {recent['written']:.1f} written"
        served = f", served {min(recent['processed'] / recent['in'], 1):.0%}" if stream.live and recent["in"] else ""
        return (f"{name}{rates}{served}, age {n['frame_age_ms']['recent']:.0f} ms, drops: {drops}, "
                f"behind {n['under_load_share']:.0%}")  # fmt: skip

    def ended(self) -> None:
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
    if summary.get("served_share") is not None and summary["served_share"] < 0.995:
        lines.append(
            f"served {summary['served_share']:.0%} of the camera's frames (the rest dropped for want of "
            "time: the models are at capacity)"
        )
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
    lines.extend(f"note: {e}" for e in summary["source_log"])
    return lines


def format_temporal(temporal: dict) -> str:
    """The temporal filter's line: what ran, its cost per frame, how often the history was dropped."""
    outputs = {k: v for k, v in temporal.items() if isinstance(v, dict)}
    parts = ", ".join(f"{k} {v['ms_per_frame']} ms" for k, v in outputs.items())
    resets = max(v["resets"] for v in outputs.values())
    return (f"temporal filter: {parts} per frame, flow {temporal['flow_ms_per_frame']} ms; "
            f"history dropped {resets} times (cuts, light jumps, moves the flow could not follow)")  # fmt: skip


def format_summary(summary: dict) -> str:
    head = f"{summary['device']} {summary['dtype']} ({summary['dtype_reason']})" + (
        " - interrupted" if summary["interrupted"] else "")  # fmt: skip
    lines = [head]
    sources = summary["sources"]
    named = [s for s in sources.values() if "name" in s]
    if not named:  # the single `source:`
        lines += [line for s in sources.values() for line in format_source(s)]
    else:
        for source in named:
            lines.append(f"[{source['name']}] " + "\n  ".join(format_source(source)))
        t = summary["totals"]
        lines.append(f"total: frames in {t['frames_in']}, out {t['frames_out']} in {t['seconds']}s "
                     f"({t['processed_fps']} fps processed, {t['written_fps']} written)")  # fmt: skip
    for stage, v in summary["stage_ms_per_frame"].items():
        lines.append(f"  {stage:8s} p50 {v['p50']:8.1f} ms/frame   p95 {v['p95']:8.1f}")
    lines.extend(f"note: {e}" for e in summary["engine_notes"])
    if summary["batch_size"]:
        lines.append("batch sizes: " + ", ".join(
            f"{k} max {v['max']} mean {v['mean']}" for k, v in summary["batch_size"].items()))  # fmt: skip
    if summary["live_batch_sizes"]:
        lines.append("live batches (frames x times): " + ", ".join(
            f"{k} x {v}" for k, v in summary["live_batch_sizes"].items()))  # fmt: skip
    return "\n".join(lines)


def save_summary(summary: dict, out_dir: str | Path) -> None:
    """summary.json beside the outputs, as `run` and each video of `batch` leave it; a named source (several
    sources, the fleet) also gets its own part in its folder."""
    out = Path(out_dir)
    for source in summary.get("sources", {}).values():
        if "name" in source:
            folder = out / source["name"]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "summary.json").write_text(json.dumps(source, indent=2))
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
