"""The console of a fleet, served by the driver: every camera with its worker and node, cameras added (placed like
any other) and removed, and each camera's live view relayed from its worker.

The numbers are those the driver already collects from its workers; the recordings and keypoints are read from the
shared output folder; only the live view crosses Ray, and only while someone watches: a relay on the driver asks
the camera's worker for the fragments made since the last ones it got (small: one frame each), and fans them out
to its viewers as a camera's own tap does.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from pathlib import Path

from ..console.live import LiveTap
from ..console.status import source_status
from ..io.options import SourceConfig

RELAY_POLL_S = 0.05  # how often a watched camera's relay asks its worker
CALL_TIMEOUT_S = 5.0


class Relay(LiveTap):
    """A camera's live view on the driver, fed from its worker while watched."""

    def __init__(self, backend: FleetBackend, camera: str) -> None:
        super().__init__()
        self.backend, self.camera = backend, camera
        self.task: asyncio.Task | None = None
        self.picture: bytes | None = None

    def join(self):
        self._poll_soon()
        return super().join()

    def jpeg(self, quality: int = 80) -> bytes | None:
        self.asked_at = time.monotonic()
        self._poll_soon()
        return self.picture

    def _poll_soon(self) -> None:
        if self.task is None or self.task.done():
            self.loop = asyncio.get_running_loop()
            self.task = self.loop.create_task(self._poll())

    async def _poll(self) -> None:
        while self.watched():
            handle = self.backend.handle_of(self.camera)
            try:
                if handle is not None:
                    got = await self._call(handle.live.remote(self.camera, self.sent))
                    if got is not None:
                        self._feed(got)
                    if time.monotonic() - self.asked_at < 1.0:  # a snapshot or MJPEG client is asking
                        self.picture = await self._call(handle.snapshot.remote(self.camera)) or self.picture
            except Exception:  # the worker restarting or moving: ask again
                await asyncio.sleep(0.5)
            await asyncio.sleep(RELAY_POLL_S)

    async def _call(self, ref):
        return await asyncio.wait_for(asyncio.wrap_future(ref.future()), CALL_TIMEOUT_S)

    def _feed(self, got: dict) -> None:
        """New fragments from the worker (on the driver's loop), numbered as the worker numbers them."""
        with self.lock:
            if got["init"] != self.init:  # the first, or a new recorder (segment, another worker)
                self.info, self.init = got["info"], got["init"]
                self._fan_out(self.init, True, self.sent)
            for i, (number, fragment) in enumerate(got["fragments"]):
                key = got["from_keyframe"] and i == 0
                self._keep_fragment(number, fragment, key)
                self._fan_out(fragment, key, number)


class FleetBackend:
    def __init__(self, fleet) -> None:
        self.fleet = fleet
        self.cfg = fleet.cfg
        self.relays: dict[str, Relay] = {}
        self.recent = fleet.events  # the cameras' events, as the workers report them

    def tick(self, loop: asyncio.AbstractEventLoop) -> None:
        pass  # the workers report their cameras' rates

    def names(self) -> list[str]:
        return list(self.fleet.record.data["sources"])

    def camera_stats(self, name: str) -> dict | None:
        where = self.fleet.record.data["sources"].get(name)
        if where is None:
            return None
        worker = self.fleet.workers.get(where["worker"])
        return None if worker is None else worker.stats["cameras"].get(name)

    def status(self, name: str) -> dict | None:
        fleet = self.fleet
        where = fleet.record.data["sources"].get(name)
        if where is None:
            return None
        c = self.camera_stats(name) or {}
        state = c.get("state", "starting") if fleet.health.owner_alive(name) else "no owner"
        known = fleet.cameras.get(name)
        age = (
            fleet.health.result_age(name, time.time()) if known is not None and known.result_wall is not None else None
        )
        return {**source_status(name, c.get("uri", ""), state, c, age),
                "worker": where["worker"], "node": where["node_id"], "epoch": where["epoch"]}  # fmt: skip

    def running(self) -> list[SourceConfig]:
        return self.fleet.camera_sources()

    async def add(self, source: SourceConfig) -> dict:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.fleet.add_camera, asdict(source))
        return self.status(source.name)

    async def remove(self, name: str) -> bool:
        if name not in self.fleet.record.data["sources"]:
            return False
        await asyncio.get_running_loop().run_in_executor(None, self.fleet.remove_camera, name)
        self.relays.pop(name, None)
        return True

    def latest_3d(self) -> dict | None:
        """The hub's latest moment (as its last report to the driver said), or None without a calibrated group."""
        if self.fleet.hub is None:
            return None
        report = (self.fleet.mocap_report or {"reports": {}})["reports"].get("3d") or {}
        return report.get("latest") or {"time": None, "views": [], "people": []}

    def view(self, name: str) -> Relay | None:
        if name not in self.fleet.record.data["sources"]:
            return None
        return self.relays.setdefault(name, Relay(self, name))

    def handle_of(self, name: str):
        where = self.fleet.record.data["sources"].get(name)
        worker = None if where is None else self.fleet.workers.get(where["worker"])
        return None if worker is None else worker.handle

    def folder(self, name: str) -> Path:
        return self.fleet.out / name

    def recording_now(self, name: str) -> list[Path]:
        recording = (self.camera_stats(name) or {}).get("recording")
        return [Path(recording)] if recording else []
