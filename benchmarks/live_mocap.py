"""Live motion capture's added latency: from a moment's last camera result to its 3-D result, against the bound
`max_skew_s` + 20 ms. Eight cameras at 30 frames/s, each result arriving 0-20 ms after its capture (the 2-D
pipeline's own delay, drawn at random), four people walking (tests/scenes3d.py); after 4 s one camera dies, so
every later moment waits `max_skew_s` for it. The moments are made as in a run: by the results as they arrive and
by the group stages' thread polling for cameras gone silent (the fleet's `MocapHub`, used here in-process).

Run: `python -m benchmarks.live_mocap`.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.common import print_table

FPS, SECONDS, DIES_AT_S, CAMERAS, PEOPLE = 30, 8, 4, 8, 4


def measure() -> dict:
    from benchmarks.triangulate import people
    from sapiens2_stream.config import from_dict
    from sapiens2_stream.fleet.mocap import MocapHub
    from sapiens2_stream.runtime.pipeline import check_group_stages, group_plan
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig
    from sapiens2_stream.runtime.stages import builtin_stages, in_order
    from sapiens2_stream.threed.calibration import write_calibration
    from tests import scenes3d as S

    work = Path(tempfile.mkdtemp(prefix="bench-mocap-"))
    rig = S.rig(CAMERAS)
    write_calibration(work / "Calib.toml", rig)
    cfg = from_dict(PipelineConfig, {
        "sources": [{"name": c.name, "uri": f"rtsp://127.0.0.1/{c.name}"} for c in rig],
        "outputs": {"dir": str(work / "out")}, "threed": {"calibration": str(work / "Calib.toml"), "formats": []},
    })  # fmt: skip
    stages = check_group_stages(cfg, in_order(builtin_stages()))
    hub = MocapHub(group_plan(cfg, stages, rates={c.name: float(FPS) for c in rig}))  # its stages' thread, in-process
    live = hub.mocap
    scene, rng = people(PEOPLE), np.random.default_rng(0)
    frames = round(FPS * SECONDS)
    views = [{c.name: S.seen_by(c, scene(i / FPS), rng) for c in rig} for i in range(frames)]
    start = time.monotonic() + 0.5
    made_before_death = []

    def camera(index: int, name: str) -> None:
        delays = np.random.default_rng(index).uniform(0.0, 0.02, frames)
        for i in range(frames):
            if index == CAMERAS - 1 and i >= DIES_AT_S * FPS:
                return  # this camera dies
            captured = start + i / FPS
            time.sleep(max(0.0, captured + delays[i] - time.monotonic()))
            live.add(name, captured, *views[i][name])
            if index == 0 and i == DIES_AT_S * FPS:
                made_before_death.append(len(live.latency_ms))

    threads = [threading.Thread(target=camera, args=(i, c.name)) for i, c in enumerate(rig)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(0.2)
    hub.close()
    latency = np.array(live.latency_ms)
    split = made_before_death[0]
    return {"max_skew_ms": live.max_skew_s * 1000, "all": latency[:split], "one dead": latency[split + 5 :],
            "moments": live.moments, "missing": live.missing[rig[-1].name]}  # fmt: skip


def run() -> list[dict]:
    """Rows of the common table: each case's p95 latency against the bound (a ratio above 1: within it)."""
    result = measure()
    bound = result["max_skew_ms"] + 20
    print(f"live motion capture, {CAMERAS} cameras x {PEOPLE} people at {FPS} frames/s: max_skew "
          f"{result['max_skew_ms']:.1f} ms, bound {bound:.1f} ms, {result['moments']} moments")  # fmt: skip
    rows = []
    for case in ("all", "one dead"):
        ms = result[case]
        print(f"  {case:9s} cameras: latency p50 {np.percentile(ms, 50):5.1f} ms, p95 {np.percentile(ms, 95):5.1f} ms, "
              f"max {ms.max():5.1f} ms ({(ms <= bound).mean():.1%} within the bound)")  # fmt: skip
        rows.append(dict(name=f"live mocap latency p95, {case} cameras", ours_s=np.percentile(ms, 95) / 1000,
                         baseline="the bound max_skew_s + 20 ms", baseline_s=bound / 1000))  # fmt: skip
    return rows


if __name__ == "__main__":
    print_table(run())
