"""The console's live view: what it costs the recorder per frame and per viewer, and how far behind the newest
result a viewer is.

- cost: the recorder (H.264 encode + fragmented MP4 file) on 640x360 frames alone, against the same recorder with
  the live tap (remux into one fragment per frame) and 0 or 4 viewers (fan-out into their queues, on an event
  loop thread as in the console); and a JPEG snapshot against one encoded frame.
- lag: a real `sapiens2-stream run --console` with a 10 frames/s camera that draws its frame index; 1 and then 4
  WebSocket viewers for LIVE_S seconds; each fragment's frame (from its decode time) against the newest result
  the status API reports when it arrives: p50 / p95 in seconds. And the written frames/s with 4 viewers against
  none (the pipeline must not slow down).

Run: `python -m benchmarks.console` (about 1.5 minutes on 2 cores).
"""

from __future__ import annotations

import asyncio
import io
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import av
import numpy as np
import yaml

from benchmarks.common import LIVE_S
from sapiens2_stream.console.live import LiveTap
from sapiens2_stream.io.video_writer import VideoWriter
from sapiens2_stream.models import make_tiny_checkpoints

FRAMES = 150
CATCH_UP_S = 1.5  # a viewer starts with the fragments since the latest keyframe: not counted in its lag
CAMERA = (
    "lavfi:color=c=gray:s=320x240:r=10,geq=lum='if(gt(Y\\,205)\\,if(bitand(N\\,pow(2\\,floor(X/20)))\\,235"
    "\\,16)\\,128)':cb=128:cr=128,realtime"
)


def recorder_seconds(folder: Path, viewers: int | None) -> float:
    """Seconds per frame of the recorder; `viewers` None: no tap, else the tap with that many (drained) viewers."""
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (360, 640, 3), dtype=np.uint8)
    tap = None
    if viewers is not None:
        tap = LiveTap()
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        tap.loop = loop

        async def join():
            joined = [tap.join()[0] for _ in range(viewers)]
            for viewer in joined:
                asyncio.get_running_loop().create_task(drain(viewer))

        async def drain(viewer):
            while True:
                await viewer.queue.get()

        asyncio.run_coroutine_threadsafe(join(), loop).result()
    writer = VideoWriter(folder / f"rec-{viewers}.mp4", 30.0, tap=tap)
    start = time.perf_counter()
    for i in range(FRAMES):
        writer.write(np.roll(base, i * 4, axis=1), i / 30)
    seconds = (time.perf_counter() - start) / FRAMES
    writer.close()
    if tap is not None:
        loop.call_soon_threadsafe(lambda: [task.cancel() for task in asyncio.all_tasks(loop)] and loop.stop())
    return seconds


def cost_rows(folder: Path) -> list[dict]:
    alone = statistics.median(recorder_seconds(folder, None) for _ in range(3))
    rows = []
    for viewers in (0, 4):
        tapped = statistics.median(recorder_seconds(folder, viewers) for _ in range(3))
        rows.append(dict(name=f"recorder + live view, {viewers} viewers (640x360)", ours_s=tapped,
                         baseline="the recorder alone", baseline_s=alone,
                         note=f"+{(tapped - alone) * 1e3:.2f} ms a frame"))  # fmt: skip
    tap = LiveTap()
    tap.frame(np.random.default_rng(1).integers(0, 255, (360, 640, 3), dtype=np.uint8))
    start = time.perf_counter()
    for _ in range(50):
        tap.jpeg()
    rows.append(dict(name="snapshot JPEG (640x360)", ours_s=(time.perf_counter() - start) / 50,
                     baseline="one recorder frame", baseline_s=alone))  # fmt: skip
    return rows


def status(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/sources/a", timeout=10) as r:
        return json.loads(r.read())


def fragment_time(fragment: bytes, timescale: int) -> float:
    """Seconds of a fragment's first sample (its tfdt)."""
    at = fragment.index(b"tfdt")
    version = fragment[at + 4]
    size = 8 if version == 1 else 4
    return int.from_bytes(fragment[at + 8 : at + 8 + size], "big") / timescale


def init_timescale(init: bytes) -> int:
    at = init.index(b"mdhd")
    version = init[at + 4]
    offset = at + 8 + (16 if version == 1 else 8)
    return int.from_bytes(init[offset : offset + 4], "big")


def viewer_lags(port: int, seconds: float, lags: list[float]) -> None:
    """One viewer: for each fragment, how many seconds its frame is behind the newest result at its arrival."""
    from websockets.sync.client import connect

    with connect(f"ws://127.0.0.1:{port}/api/v1/sources/a/live.mp4") as ws:
        ws.recv(timeout=30)
        init = ws.recv(timeout=30)
        timescale = init_timescale(init)
        first = ws.recv(timeout=30)
        with av.open(io.BytesIO(init + first)) as container:  # the frame index the camera drew into it
            rgb = next(container.decode(video=0)).to_ndarray(format="rgb24")
        first_index = sum(1 << i for i, v in enumerate(rgb[225, 10::20, 0]) if v > 128)
        t0, start = fragment_time(first, timescale), time.time()
        while time.time() < start + seconds:
            fragment = ws.recv(timeout=30)
            if time.time() < start + CATCH_UP_S:  # the fragments since the keyframe it joined at: the past
                continue
            index = first_index + round((fragment_time(fragment, timescale) - t0) * 10)
            lags.append((status(port)["last_frame"] - index) / 10)


def lag_rows(folder: Path, tiny: dict) -> list[dict]:
    spec = folder / "console.yaml"
    spec.write_text(yaml.safe_dump({
        "sources": [{"name": "a", "uri": CAMERA}], "detector": {"type": "fixed", "boxes": [[40, 40, 60, 150]]},
        "models": {"pose": {"source": str(tiny["pose"]), "input_size": [128, 96], "flip": "off"}},
        "outputs": {"dir": str(folder / "out")}, "runtime": {"device": "cpu", "threads": 1},
    }))  # fmt: skip
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "sapiens2_stream.cli", "run", str(spec), "--console", str(port),
                             "--no-progress"], stderr=subprocess.DEVNULL)  # fmt: skip
    rows = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if status(port)["frames_out"] > 20:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        window = max(10, LIVE_S // 2)
        before = status(port)["frames_out"]
        time.sleep(window)
        alone_fps = (status(port)["frames_out"] - before) / window
        for viewers in (1, 4):
            lags: list[float] = []
            before = status(port)["frames_out"]
            threads = [threading.Thread(target=viewer_lags, args=(port, window, lags)) for _ in range(viewers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            fps = (status(port)["frames_out"] - before) / window
            lags.sort()
            p50, p95 = lags[len(lags) // 2], lags[int(len(lags) * 0.95)]
            rows.append(dict(name=f"live view lag behind the newest result, {viewers} viewer(s)", ours_s=p50,
                             baseline="one frame interval (10 fps)", baseline_s=0.1,
                             note=f"p50 {p50:.2f} s, p95 {p95:.2f} s; written {fps:.1f} frames/s against "
                                  f"{alone_fps:.1f} without viewers"))  # fmt: skip
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    return rows


def run() -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tiny = make_tiny_checkpoints(folder / "tiny")
        return cost_rows(folder) + lag_rows(folder, tiny)


if __name__ == "__main__":
    from benchmarks.common import print_table

    print_table(run())
