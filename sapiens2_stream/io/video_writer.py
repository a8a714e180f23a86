"""H.264 mp4 writing with PyAV: yuv420p (plays in browsers), source timestamps kept, audio copied at the end.

Crash-safe: the file is written as fragmented MP4 (an empty index up front, then self-contained fragments of one
GOP each, flushed to disk as they are made) with a keyframe every second and no encoder delay (`zerolatency`: no
B-frames, no look-ahead), so a process killed at any moment (SIGKILL, the OOM killer, a power cut) leaves a file
that plays up to within about a second of the kill. A normal close remuxes it (a stream copy, with the source's
audio) into a regular MP4 with the index at the front, which every player and browser opens with its duration.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

from ..config import DEFAULT_FPS
from .pixels import encodable, rgb_of
from .pyav import av

TIME_BASE = Fraction(1, 90000)
# frag_discont + use_editlist: the first fragment keeps the source's start time (an empty index cannot carry the
# edit list that would otherwise shift the timeline back to it)
FRAGMENTED = {"movflags": "frag_keyframe+empty_moov+default_base_moof+frag_discont", "use_editlist": "1",
              "flush_packets": "1"}  # fmt: skip


class Discard:
    """A file that keeps nothing (the muxer of a writer without a file)."""

    def write(self, data) -> int:
        return len(data)


class VideoWriter:
    """Encodes RGB frames at their own timestamps. Frame size is fixed by the first frame (made even).

    With `background`, the pictures are encoded on a thread of the writer's own, at most `AHEAD` behind: the
    caller (a source's writer thread, which also steadies, draws and writes the records) goes on to the next frame
    while this one is converted and encoded (at 1080p about half of the writer's time per frame). An encoding
    error is raised by the next `write` or by `close`; frames a crash leaves unencoded are what `--resume` draws
    again anyway (it counts the frames the file plays)."""

    AHEAD = 2  # pictures waiting for the encoder at most (the caller waits beyond: memory stays bounded)

    def __init__(
        self, path: str | Path | None, fps: float | None = None, crf: int = 23, preset: str = "veryfast", *,
        on_packet: Callable[[av.Packet, object], None] | None = None,
        on_picture: Callable[[np.ndarray], None] | None = None, background: bool = False, encoder: str = "cpu",
    ) -> None:  # fmt: skip
        """`on_packet(packet, stream)`: told every encoded packet, after it is muxed (the stream's codec
        parameters are then known); `on_picture(rgb)`: every picture encoded (a live view, `io.video_feed`).
        `path` None: no file, only the callbacks (a live view of a source that records no annotated video).
        `background`: encode on a thread of its own (the callbacks are then called there). `encoder`: "cpu"
        (x264), or "auto" / "nvenc": the GPU's encoder where it opens here, else x264 (`codec` and `why_not` say
        which, and why)."""
        self.path = Path(path) if path is not None else None
        self.on_packet, self.on_picture = on_packet, on_picture
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fps = fps or DEFAULT_FPS
        gop = max(1, round(self.fps))  # a keyframe, so a fragment, at least every second
        self.options = {"crf": str(crf), "preset": preset, "tune": "zerolatency",
                        "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0"}  # fmt: skip
        self.codec, self.why_not = "libx264", None
        if encoder != "cpu":
            self.why_not = nvenc_refusal()
            if self.why_not is None:  # NVENC with what x264 is given: a keyframe a second, no B-frames, no delay
                self.codec = "h264_nvenc"
                self.options = {"preset": "p4", "tune": "ll", "zerolatency": "1", "bf": "0", "g": str(gop),
                                "rc": "vbr", "cq": str(crf)}  # fmt: skip
        self.container: av.container.OutputContainer | None = None
        self.stream = None
        self.size: tuple[int, int] | None = None
        self.last_pts = -1
        self.frames = 0
        self.pending: queue.Queue | None = queue.Queue(self.AHEAD) if background else None
        self.encoder: threading.Thread | None = None
        self.failure: BaseException | None = None  # the encoder's error, until the caller is told
        self.failed = False

    def _open(self, h: int, w: int) -> None:
        self.size = (h - h % 2, w - w % 2)
        target = str(self.path) if self.path is not None else Discard()
        self.container = av.open(target, "w", format="mp4", options=FRAGMENTED)
        rate = Fraction(self.fps).limit_denominator(1001)
        stream = self.container.add_stream(self.codec, rate=rate, options=self.options)
        stream.width, stream.height = self.size[1], self.size[0]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.time_base = TIME_BASE
        self.stream = stream

    def write(self, rgb: np.ndarray, pts_s: float) -> None:
        """Encode `rgb` (kept as it is until encoded: never changed by the caller after) at `pts_s`."""
        if self.pending is None:
            self._encode(rgb, pts_s)
            return
        self._raise_failure()
        if self.encoder is None:
            self.encoder = threading.Thread(target=self._work, name="video-encoder", daemon=True)
            self.encoder.start()
        self.pending.put((rgb, pts_s))

    def _work(self) -> None:
        while (item := self.pending.get()) is not None:
            if not self.failed:  # after a failure nothing more is encoded: the caller hears of it once
                try:
                    self._encode(*item)
                except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                    self.failure, self.failed = e, True

    def _raise_failure(self) -> None:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure

    def _encode(self, rgb: np.ndarray, pts_s: float) -> None:
        if self.container is None:
            self._open(*rgb.shape[:2])
        h, w = self.size
        if rgb.shape[:2] != (h, w):
            if rgb.shape[0] - h <= 1 and rgb.shape[1] - w <= 1 and rgb.shape[0] >= h and rgb.shape[1] >= w:
                rgb = rgb[:h, :w]  # odd size: drop the last row/column
            else:  # the source changed resolution (e.g. after a reconnect): keep the output size
                rgb = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
        frame = encodable(rgb, self.stream)
        pts = max(int(round(pts_s / TIME_BASE)), self.last_pts + 1)
        frame.pts, frame.time_base = pts, TIME_BASE
        self.last_pts = pts
        for packet in self.stream.encode(frame):
            self.container.mux(packet)
            if self.on_packet is not None:  # after the mux: the file's header (so the codec parameters) is written
                self.on_packet(packet, self.stream)
        if self.on_picture is not None:
            self.on_picture(rgb)
        self.frames += 1

    def prefill(self, previous: Path, frames: int) -> None:
        """Re-encode the first `frames` frames of an earlier file (resuming an interrupted run)."""
        for rgb, pts in decoded_frames(previous, frames):
            self.write(rgb, pts)

    def close(self, audio_source: str | Path | None = None, end_s: float | None = None) -> None:
        """Finish the file: flush the encoder, then remux into a regular MP4 with the audio of `audio_source` (up
        to `end_s`) when given. Where the remux fails the fragmented file stays, still playable."""
        if self.encoder is not None:  # every picture handed over encoded first
            self.pending.put(None)
            self.encoder.join()
            self.encoder = None
        failure, self.failure = self.failure, None
        if self.container is not None:
            try:
                for packet in self.stream.encode(None):
                    self.container.mux(packet)
            finally:
                self.container.close()
                self.container = self.stream = None  # the encoder's threads and buffers go now, not at a GC
            if self.frames and self.path is not None and failure is None:
                finalize(self.path, audio_source, end_s)
        if failure is not None:  # the frames before it are in the file, which plays
            raise failure


@functools.cache
def nvenc_refusal() -> str | None:
    """Why NVENC (h264_nvenc) cannot encode in this process, or None when it can: tried once on a small picture
    (the FFmpeg PyAV carries has the encoder; it opens only where an NVIDIA driver and GPU are)."""
    try:
        container = av.open(Discard(), "w", format="mp4")
        stream = container.add_stream("h264_nvenc", rate=30)
        stream.width, stream.height, stream.pix_fmt = 256, 256, "yuv420p"
        picture = av.VideoFrame.from_ndarray(np.zeros((256, 256, 3), np.uint8), format="rgb24")
        for packet in stream.encode(picture.reformat(format="yuv420p")):
            container.mux(packet)
        container.close()
    except (av.FFmpegError, OSError, ValueError) as e:
        return f"NVENC does not open here ({type(e).__name__}: {str(e)[:120]})"
    return None


def decoded_frames(path: Path, limit: int | None = None):
    """(rgb, pts seconds) of a video's frames in order, up to `limit`, stopping quietly where a file cut short by a
    crash stops being decodable."""
    try:
        with av.open(str(path)) as container:
            for i, frame in enumerate(container.decode(video=0)):
                if limit is not None and i >= limit:
                    return
                yield rgb_of(frame), float(frame.time)
    except (av.FFmpegError, OSError):
        return


def playable_frames(path: Path) -> int:
    """How many frames of a video decode (a file cut short by a crash plays up to its last complete fragment)."""
    count = 0
    try:
        with av.open(str(path)) as container:
            for packet in container.demux(video=0):
                count += len(packet.decode())
    except (av.FFmpegError, OSError):
        pass
    return count


def finalize(video_path: str | Path, audio_source: str | Path | None = None, end_s: float | None = None) -> bool:
    """Remux a (fragmented) video into a regular MP4 with the index up front, adding the audio of `audio_source` up
    to `end_s`. Replaces the file only once the new one is complete. False where it could not be done."""
    video_path = Path(video_path)
    tmp = video_path.with_name(video_path.stem + ".final-tmp.mp4")
    try:
        with av.open(str(video_path)) as vin, av.open(str(tmp), "w", options={"movflags": "+faststart"}) as out:
            v_out = out.add_stream_from_template(vin.streams.video[0])
            audio = av.open(str(audio_source)) if audio_source else None
            try:
                a_in = audio.streams.audio[0] if audio is not None and audio.streams.audio else None
                a_out = out.add_stream_from_template(a_in) if a_in is not None else None
                for packet in vin.demux(vin.streams.video[0]):
                    if packet.dts is not None:
                        packet.stream = v_out
                        out.mux(packet)
                if a_in is not None:
                    for packet in audio.demux(a_in):
                        if packet.dts is None:
                            continue
                        if end_s is not None and packet.pts is not None and float(packet.pts * a_in.time_base) > end_s:
                            break
                        packet.stream = a_out
                        out.mux(packet)
            finally:
                if audio is not None:
                    audio.close()
        os.replace(tmp, video_path)
        return True
    except (av.FFmpegError, ValueError, OSError):
        tmp.unlink(missing_ok=True)
        return False
