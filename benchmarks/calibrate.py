"""Calibration from people: `calibrate people` on four cameras' runs of a 60 s take (1800 frames each, the synthetic
rig of tests/scenes3d.py, a person walking to and fro): reading, timing the cameras from the movement, matching
the tracks and solving (with the focal lengths as given, and refined), against reading those four runs'
results.jsonl (what any tool that uses them must do first).

Run: `python -m benchmarks.calibrate`.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import print_table
from sapiens2_stream.calibrate.people import calibrate_from_people
from sapiens2_stream.calibrate.sightings import sightings

SECONDS, FPS = 60, 30


def write_runs(folder: Path) -> list:
    """The four cameras' results.jsonl of a person walking 3 m back and forth for SECONDS."""
    from tests import scenes3d as S

    rig = S.rig(4)
    rng = np.random.default_rng(0)
    for cam in rig:
        (folder / cam.name).mkdir()
        with open(folder / cam.name / "results.jsonl", "w") as f:
            for i in range(SECONDS * FPS):
                t = i / FPS
                leg = (t % 10) / 5  # 0..2: out and back every 10 s
                pose = S.walking(min(leg, 2 - leg) * 5, yaw=-np.pi / 2 if leg < 1 else np.pi / 2)
                kp, sc = S.seen_by(cam, [pose], rng)
                person = {"track_id": 1, "keypoints": kp[0].round(2).tolist(), "keypoint_scores": sc[0].tolist()}
                f.write(json.dumps({"frame": i, "pts": t, "people": [person]}) + "\n")
    return rig


def run() -> list[dict]:
    from sapiens2_stream.threed.calibration import Camera

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rig = write_runs(folder)
        start = time.perf_counter()
        for cam in rig:
            with open(folder / cam.name / "results.jsonl") as f:
                [json.loads(line) for line in f]
        reading = time.perf_counter() - start
        cams = {c.name: Camera(c.name, c.size, c.matrix, c.distortions, np.zeros(3), np.zeros(3)) for c in rig}
        rows = []
        for refine in (False, True):
            start = time.perf_counter()
            seen = sightings(cams, {c.name: folder / c.name for c in rig}, None, sync=True)
            calibrate_from_people(cams, seen.seen, 1.727 / 0.936, seen.measured, refine_focal=refine)
            ours = time.perf_counter() - start
            rows.append(dict(name=f"calibrate people{' --refine-focal' if refine else ''}, 4 cameras x {SECONDS} s",
                             ours_s=ours, baseline="reading the 4 runs", baseline_s=reading,
                             note=f"{ours:.1f} s for a {SECONDS} s take"))  # fmt: skip
    return rows


if __name__ == "__main__":
    print_table(run())
