"""The stand-in device of `benchmarks.standin_device` (issue 72): it costs what the model costs, the GPU script's
rows run (a dry run on the CPU, the real engine in place of the stand-in), and a live camera that keeps falling
behind when flip TTA comes back on stays behind longer each time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.standin import TaskCost


def test_the_stand_in_costs_what_the_h200_measured_and_scales_by_flops_pixels_and_flip():
    """docs/speed.md's H200 rows for a 0.4b pose model at 1024x768 (bf16, compiled): 103.3 crops/s at batch 1
    and 116.6 at batch 8, flip off; flip on 56.4 and 58.0 (the stand-in counts a flipped crop twice: within 10%)."""
    pose = TaskCost("0.4b")
    assert 1 / pose.seconds(1, False) == pytest.approx(103.3, rel=0.01)
    assert 8 / pose.seconds(8, False) == pytest.approx(116.6, rel=0.01)
    assert 1 / pose.seconds(1, True) == pytest.approx(56.4, rel=0.1)
    assert 8 / pose.seconds(8, True) == pytest.approx(58.0, rel=0.1)
    big = TaskCost("1b")  # by FLOPs per input: 12.2 / 3.9 TFLOP
    assert (big.seconds(8, False) - big.seconds(0, False) * 0) / pose.seconds(8, False) == pytest.approx(
        (1.26 + 8 * 8.42 * 12.2 / 3.9) / (1.26 + 8 * 8.42), rel=1e-6
    )
    half = TaskCost("0.4b", (512, 384))  # a quarter of the pixels: a quarter of the per-input cost
    assert half.seconds(8, False) - half.seconds(1, False) == pytest.approx(
        (pose.seconds(8, False) - pose.seconds(1, False)) / 4
    )
    assert pose.seconds(0, True) == 0.0
    # the arithmetic the docs give: one H200 at 116 crops/s carries 5.8 cameras at 10 results/s, two people each
    assert pose.per_second() / (10 * 2) == pytest.approx(5.9, abs=0.1)


def test_a_camera_that_falls_behind_again_soon_after_catching_up_stays_behind_longer():
    """`flip: auto` turns flip TTA on whenever a live source is not behind; where the flipped model does not fit
    the camera's rate, frames drop and it turns off again. So falling behind within a hold of catching up doubles
    the hold (1, 2, 4 ... 60 s), and a long calm brings it back to 1 s."""
    from sapiens2_stream.runtime.flow import LOAD_HOLD_MAX_S, Waiting
    from sapiens2_stream.runtime.numbers import SourceNumbers
    from sapiens2_stream.runtime.options import RuntimeConfig

    class Stats:
        frames = 0

    waiting = Waiting("latest", True, RuntimeConfig(), SourceNumbers(Stats(), True))
    waiting.fell_behind(100.0)
    assert waiting.under_load(100.9) and not waiting.under_load(101.1)
    waiting.fell_behind(100.5)  # still behind: the same hold, from now
    assert waiting.behind_until == 101.5
    t, holds = 101.5, []
    for _ in range(8):  # each time behind again half a second after catching up
        t += 0.5
        waiting.fell_behind(t)
        holds.append(waiting.hold)
        t = waiting.behind_until
    assert holds == [2.0, 4.0, 8.0, 16.0, 32.0, LOAD_HOLD_MAX_S, LOAD_HOLD_MAX_S, LOAD_HOLD_MAX_S]
    waiting.fell_behind(t + 11 * LOAD_HOLD_MAX_S)  # after a long calm
    assert waiting.hold == 1.0


def test_gpu_sh_runs_the_device_rows_dry_on_the_cpu(tmp_path):
    """`ONLY=gpu_rows DEVICE=cpu bash benchmarks/gpu.sh`: the rows a lent GPU runs, on the CPU's real engine
    (tiny models, a few frames): every row prints one JSON line with the keys a check reads, and the JSON holds
    them all."""
    root = Path(__file__).parents[1]
    env = {**os.environ, "ONLY": "gpu_rows", "DEVICE": "cpu", "OUT": str(tmp_path),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    done = subprocess.run(["bash", str(root / "benchmarks" / "gpu.sh")], env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert "=== gpu_rows: exit 0" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [json.loads(line) for line in (tmp_path / "gpu_rows.log").read_text().splitlines() if line.startswith("{")]
    rows = {row["row"]: row for row in lines}
    matrix = [f"{n}x{res}-{tasks}@1" for n in (1, 4, 8) for res in ("720p", "1080p") for tasks in ("pose", "pose+seg")]
    cameras = [f"cameras-{n}" for n in (4, 5, 6, 7)]
    assert list(rows) == [*matrix, *cameras, "webcam_matting", "host_parts_1080p"]
    parts = rows.pop("host_parts_1080p")
    assert parts["draw_ms"] > 0 and parts["jsonl_ms"] > 0 and parts["detector_preparation_ms"] > 0
    for row in rows.values():
        assert {"row", "device_bound", "device_busy_share", "written_fps", "frame_age_p95_s",
                "host_cpu_ms_per_frame"} <= set(row), row  # fmt: skip
        assert row["written_fps"] > 0 and 0 < row["device_busy_share"] <= 1.0 and row["host_cpu_ms_per_frame"] > 0
    for name in cameras:
        row = rows[name]
        assert row["cameras"] == len(row["results_per_s"]) == int(name[-1])
        assert 0 <= row["cameras_served"] <= row["cameras"]
    assert "temporal" in rows["1x720p-pose+seg@1"]["host_cpu_ms_by_stage"]  # seg's steadying, on the writer
    saved = json.loads((tmp_path / "standin_device_cpu.json").read_text())
    assert saved["device"] == "cpu" and [r["row"] for r in saved["rows"]] == [*rows, "host_parts_1080p"]
    assert json.loads((tmp_path / "run.json").read_text())["torch"]
