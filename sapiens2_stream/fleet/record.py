"""What the fleet keeps on the shared output folder, so that any process on any node can act on it.

- `OUTPUT/fleet.json`: the fleet's record (workers, which camera runs where and with which epoch, the moves, the
  `sources:` entries of cameras added at the console), rewritten atomically on every change by the driver; a
  restarted worker reads its cameras from it.
- `OUTPUT/<camera>/owner.json`: the camera's current worker and epoch. A worker asks it before it opens or
  rolls any file of the camera (the fence): a worker cut off from the others stops writing a camera that moved.
- `OUTPUT/<camera>/writers.jsonl`: one line per folder of files opened (segment, writer, pid, node, epoch), the
  evidence that no camera ever had two writers.
- `OUTPUT/.fleet-marker-<id>`: written by the driver; a worker that cannot see it is not on shared storage.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..io.sink import Fenced


def write_json(path: Path, data: dict) -> None:
    """Whole or not at all: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


class FleetRecord:
    """fleet.json: {"workers": {...}, "sources": {camera: {"worker", "node_id", "epoch"}}, "moves": [...]}."""

    def __init__(self, out_dir: str | Path) -> None:
        self.dir = Path(out_dir)
        self.path = self.dir / "fleet.json"
        self.data = {"workers": {}, "sources": {}, "moves": []}

    def save(self) -> None:
        write_json(self.path, self.data)

    def assign(self, camera: str, worker: str, node_id: str, reason: str | None = None) -> int:
        """Give `camera` to `worker` with the next epoch (recorded in the camera's owner.json first, so a fence
        asked at any time sees the new owner); a move (`reason`: to another worker, or to the same one restarted
        elsewhere) is recorded with its reason."""
        before = self.data["sources"].get(camera)
        epoch = (before["epoch"] + 1) if before else 1
        folder = self.dir / camera
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / "owner.json", {"worker": worker, "epoch": epoch})
        self.data["sources"][camera] = {"worker": worker, "node_id": node_id, "epoch": epoch}
        if before is not None and (before["worker"] != worker or reason):
            self.data["moves"].append({"source": camera, "from": before["worker"], "to": worker,
                                       "reason": reason or "moved", "wall": round(time.time(), 3)})  # fmt: skip
        return epoch

    def release(self, camera: str) -> None:
        """The camera leaves the fleet (removed at the console): its owner.json names no worker, so whoever still
        holds it stops writing, and the record forgets it."""
        epoch = self.data["sources"].pop(camera)["epoch"] + 1
        write_json(self.dir / camera / "owner.json", {"worker": None, "epoch": epoch})
        self.data.get("added", {}).pop(camera, None)


def added_sources(out_dir: str | Path) -> dict[str, dict]:
    """The `sources:` entries of cameras added while running (at the console), by name."""
    return read_json(Path(out_dir) / "fleet.json").get("added", {})


def assigned_to(out_dir: str | Path, worker: str) -> dict[str, int]:
    """The cameras fleet.json gives `worker`, with their epochs."""
    sources = read_json(Path(out_dir) / "fleet.json").get("sources", {})
    return {cam: s["epoch"] for cam, s in sources.items() if s["worker"] == worker}


def fence_for(camera_dir: Path, worker: str, epoch: int, node_id: str):
    """The fence of one camera for one worker: before a folder of files is opened, the camera must still be this
    worker's at this epoch; every folder opened is logged to writers.jsonl."""

    def fence(folder: Path) -> None:
        owner = read_json(camera_dir / "owner.json")
        if owner.get("worker") != worker or owner.get("epoch") != epoch:
            raise Fenced(f"{camera_dir.name} now belongs to {owner.get('worker')} (epoch {owner.get('epoch')}); "
                         f"{worker} (epoch {epoch}) stopped writing it")  # fmt: skip
        line = {"folder": folder.name, "worker": worker, "pid": os.getpid(), "node_id": node_id, "epoch": epoch,
                "wall": round(time.time(), 3)}  # fmt: skip
        with open(camera_dir / "writers.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")

    return fence


def continuation(camera_dir: Path, jsonl_name: str = "results.jsonl") -> tuple[int, int]:
    """Where a camera continues: (the next frame index, the next track id) after everything its segments hold,
    so a camera restarted or moved never repeats a frame index or a track id."""
    next_frame, next_track = 0, 1
    for path in camera_dir.glob(f"*/{jsonl_name}"):
        for line in path.read_bytes().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            next_frame = max(next_frame, record["frame"] + 1)
            next_track = max([next_track, *(p["track_id"] + 1 for p in record["people"])])
    return next_frame, next_track


def write_marker(out_dir: Path, fleet_id: str) -> Path:
    marker = out_dir / f".fleet-marker-{fleet_id}"
    marker.write_text(fleet_id)
    return marker
