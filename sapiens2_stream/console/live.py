"""The live view of one source for browsers, from the H.264 its recorder already encodes (no second encode).

The recorder's encoded packets are remuxed (a stream copy, about 0.02 ms a frame) into fragmented MP4 with one
fragment per frame: an init segment (ftyp + moov) and then moof + mdat pairs, which a browser's Media Source
Extensions play as they come. The fragments since the latest keyframe are kept, so a viewer who joins starts
at once, at that keyframe. Each viewer has a bounded queue on the console's event loop: a viewer that falls
behind loses fragments up to the next keyframe (and so never decodes a broken picture), never slows the
pipeline. The latest annotated picture is kept too, for JPEG snapshots, encoded only when someone asks.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import cv2
import numpy as np

from ..io.pyav import av
from ..runtime.observer import Observer

VIEWER_QUEUE = 50  # fragments a viewer may have waiting before it skips to the next keyframe
ASKED_HOLD_S = 5.0  # a picture asked for keeps a source without its own video drawing for this long


class Capture:
    """A file-like sink for the muxer: splits what it writes into whole MP4 boxes."""

    def __init__(self, on_box) -> None:
        self.pending = bytearray()
        self.on_box = on_box

    def write(self, data) -> int:
        self.pending += data
        while len(self.pending) >= 8:
            size = int.from_bytes(self.pending[:4], "big")
            if size < 8 or len(self.pending) < size:
                break
            box, self.pending = bytes(self.pending[:size]), self.pending[size:]
            self.on_box(box[4:8].decode("latin-1"), box)
        return len(data)


def codec_string(extradata: bytes) -> str:
    """The `avc1.PPCCLL` codec string of H.264 parameters (avcC or Annex B), as MediaSource wants it."""
    if extradata[:1] == b"\x01":  # avcC: version, profile, compatibility, level
        profile = extradata[1:4]
    else:  # Annex B: the SPS after its start code
        start = extradata.find(b"\x00\x00\x01")
        profile = extradata[start + 4 : start + 7]
    return "avc1." + profile.hex()


class Viewer:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(VIEWER_QUEUE)  # None: the console ends
        self.skipping = False  # lost fragments: waits for the next keyframe
        self.lost = 0
        self.after = 0  # the number of the last fragment it started with


class LiveTap:
    """Fed by a recorder (`frame`, `packet`) on its writer thread; read by the console on its event loop."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None  # set by the console
        self.lock = threading.Lock()
        self.muxer = None
        self.source_stream = None
        self.out_stream = None
        self.info: dict | None = None  # {"codec", "width", "height"}
        self.init: bytes | None = None
        self.gop: list[tuple[int, bytes]] = []  # (number, fragment) since the latest keyframe (the first)
        self.sent = 0  # fragments made so far (their numbers)
        self.fragment = bytearray()
        self.keyframes: list[bool] = []  # per packet muxed and not yet out as a fragment: a keyframe?
        self.viewers: set[Viewer] = set()
        self.latest: np.ndarray | None = None  # the latest annotated picture (RGB)
        self.pictures = 0
        self.asked_at = -1e9  # when a picture was last asked for (snapshot, MJPEG)
        self.picture_event = asyncio.Event()

    # ------------------------------------------------------------------------------------------- writer side

    def frame(self, rgb: np.ndarray) -> None:
        self.latest = rgb
        self.pictures += 1
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.picture_event.set)

    def packet(self, packet: av.Packet, stream) -> None:
        """One encoded packet of the recorder (its stream gives the codec parameters, known from the first)."""
        with self.lock:
            if stream is not self.source_stream:  # the first packet, or a new recorder (a new segment)
                self._open(stream)
            copy = av.Packet(bytes(packet))
            copy.pts, copy.dts, copy.time_base = packet.pts, packet.dts, packet.time_base
            copy.is_keyframe = packet.is_keyframe
            copy.stream = self.out_stream
            self.keyframes.append(bool(packet.is_keyframe))
            self.muxer.mux(copy)

    def _open(self, stream) -> None:
        if self.muxer is not None:
            self.muxer.close()
        self.init, self.gop, self.fragment, self.keyframes = None, [], bytearray(), []
        self.muxer = av.open(Capture(self._box), "w", format="mp4",
                             options={"movflags": "frag_every_frame+empty_moov+default_base_moof"})  # fmt: skip
        self.source_stream, self.out_stream = stream, self.muxer.add_stream_from_template(stream)
        self.info = {"codec": codec_string(bytes(stream.codec_context.extradata)), "width": stream.width,
                     "height": stream.height}  # fmt: skip
        self.init_parts: list[bytes] = []

    def _box(self, kind: str, box: bytes) -> None:
        if kind in ("ftyp", "moov"):
            self.init_parts.append(box)
            if kind == "moov":
                self.init = b"".join(self.init_parts)
                if self.loop is not None and self.viewers:  # a new recorder: viewers take its init (MSE allows)
                    self.loop.call_soon_threadsafe(self._fan_out, self.init, True, self.sent)
            return
        self.fragment += box
        if kind != "mdat":
            return
        fragment, self.fragment = bytes(self.fragment), bytearray()
        key = self.keyframes.pop(0) if self.keyframes else False
        self._keep_fragment(self.sent + 1, fragment, key)
        if self.loop is not None and self.viewers:
            self.loop.call_soon_threadsafe(self._fan_out, fragment, key, self.sent)

    def _keep_fragment(self, number: int, fragment: bytes, key: bool) -> None:
        """Number the fragment and keep it with those since the latest keyframe, which a joining viewer starts
        with (under the lock)."""
        self.sent = number
        if key:
            self.gop = []
        self.gop.append((number, fragment))

    def close(self) -> None:
        """The source ended: its recorder's stream is let go (its encoder, threads and buffers with it); the
        latest picture and the fragments stay for the console."""
        with self.lock:
            if self.muxer is not None:
                self.muxer.close()
                self.muxer = None
            self.source_stream = self.out_stream = None

    # ------------------------------------------------------------------------------------------- console side

    def _fan_out(self, fragment: bytes, key: bool, number: int) -> None:
        for viewer in list(self.viewers):
            if number <= viewer.after and fragment is not self.init:
                continue  # it started with this one (joined between its making and this call)
            if viewer.skipping and not key:
                viewer.lost += 1
                continue
            viewer.skipping = False
            try:
                viewer.queue.put_nowait(fragment)
            except asyncio.QueueFull:  # too slow: drop what waits, start again at the next keyframe
                viewer.lost += viewer.queue.qsize() + 1
                while not viewer.queue.empty():
                    viewer.queue.get_nowait()
                viewer.skipping = True

    def join(self) -> tuple[Viewer, list[bytes]]:
        """A new viewer and what it starts with: the init segment and the fragments since the latest keyframe
        (nothing before the first frame is encoded: the init then comes through its queue). On the console's
        loop."""
        viewer = Viewer()
        with self.lock:
            start = [self.init, *(f for _, f in self.gop)] if self.init is not None else []
            viewer.after = self.gop[-1][0] if start and self.gop else self.sent
        self.viewers.add(viewer)
        return viewer, start

    def leave(self, viewer: Viewer) -> None:
        self.viewers.discard(viewer)

    def since(self, after: int) -> dict | None:
        """For a console elsewhere (the fleet driver's): the codec, the init segment and the fragments made after
        number `after` (from the latest keyframe, when `after` is older than that); None before the first frame.
        Counts as watching."""
        self.asked_at = time.monotonic()
        with self.lock:
            if self.init is None:
                return None
            fresh = [(n, f) for n, f in self.gop if n > after]
            return {"info": self.info, "init": self.init, "fragments": fresh,
                    "from_keyframe": bool(fresh) and fresh[0][0] == self.gop[0][0]}  # fmt: skip

    def watched(self) -> bool:
        """Whether someone watches: a live viewer, or a picture asked for within the last few seconds."""
        return bool(self.viewers) or time.monotonic() - self.asked_at < ASKED_HOLD_S

    def jpeg(self, quality: int = 80) -> bytes | None:
        """The latest annotated picture as JPEG, or None before the first."""
        self.asked_at = time.monotonic()
        rgb = self.latest
        if rgb is None:
            return None
        ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
        return data.tobytes() if ok else None


class LiveViews(Observer):
    """A pipeline's observer that keeps a live view (`LiveTap`) of every source, subscribed to the source's video
    feed: the console's own, or a fleet worker's for the driver's console."""

    def __init__(self) -> None:
        self.taps: dict[int, LiveTap] = {}

    def source_added(self, stream) -> None:
        tap = LiveTap()
        with contextlib.suppress(RuntimeError):  # added from another thread: the console's tick sets the loop
            tap.loop = asyncio.get_running_loop()
        stream.feed.subscribe(tap)
        self.taps[id(stream)] = tap

    def source_closed(self, stream) -> None:
        tap = self.taps.get(id(stream))
        if tap is not None:
            stream.feed.leave(tap)
            tap.close()

    def of(self, stream) -> LiveTap | None:
        return self.taps.get(id(stream))
