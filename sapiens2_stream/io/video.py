"""H.264 mp4 writing with PyAV: yuv420p (plays in browsers), source timestamps kept, audio copied at the end.

The file is finalised on close, so a run cut short still leaves a playable video.
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

TIME_BASE = Fraction(1, 90000)


class VideoWriter:
    """Encodes RGB frames at their own timestamps. Frame size is fixed by the first frame (made even)."""

    def __init__(self, path: str | Path, fps: float | None = None, crf: int = 23, preset: str = "veryfast") -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fps = fps or 30.0
        self.options = {"crf": str(crf), "preset": preset}
        self.container: av.container.OutputContainer | None = None
        self.stream = None
        self.size: tuple[int, int] | None = None
        self.last_pts = -1
        self.frames = 0

    def _open(self, h: int, w: int) -> None:
        self.size = (h - h % 2, w - w % 2)
        self.container = av.open(str(self.path), "w", options={"movflags": "+faststart"})
        rate = Fraction(self.fps).limit_denominator(1001)
        stream = self.container.add_stream("libx264", rate=rate, options=self.options)
        stream.width, stream.height = self.size[1], self.size[0]
        stream.pix_fmt = "yuv420p"
        stream.codec_context.time_base = TIME_BASE
        self.stream = stream

    def write(self, rgb: np.ndarray, pts_s: float) -> None:
        if self.container is None:
            self._open(*rgb.shape[:2])
        h, w = self.size
        if rgb.shape[:2] != (h, w):
            if rgb.shape[0] - h <= 1 and rgb.shape[1] - w <= 1 and rgb.shape[0] >= h and rgb.shape[1] >= w:
                rgb = rgb[:h, :w]  # odd size: drop the last row/column
            else:  # the source changed resolution (e.g. after a reconnect): keep the output size
                rgb = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        pts = max(int(round(pts_s / TIME_BASE)), self.last_pts + 1)
        frame.pts, frame.time_base = pts, TIME_BASE
        self.last_pts = pts
        for packet in self.stream.encode(frame):
            self.container.mux(packet)
        self.frames += 1

    def prefill(self, previous: Path, end_pts: float) -> None:
        """Re-encode the frames of an earlier file up to `end_pts` (resuming an interrupted run)."""
        with av.open(str(previous)) as old:
            for frame in old.decode(video=0):
                if frame.time is None or frame.time > end_pts + 1e-6:
                    break
                self.write(frame.to_ndarray(format="rgb24"), float(frame.time))

    def close(self) -> None:
        if self.container is None:
            return
        for packet in self.stream.encode(None):
            self.container.mux(packet)
        self.container.close()
        self.container = None


def copy_audio(video_path: str | Path, audio_source: str | Path, end_s: float | None = None) -> bool:
    """Remux the audio of `audio_source` (up to `end_s`) into the finished video. False if it cannot be copied."""
    video_path = Path(video_path)
    tmp = video_path.with_name(video_path.stem + ".audio-tmp.mp4")
    try:
        with av.open(str(video_path)) as vin, av.open(str(audio_source)) as ain:
            if not ain.streams.audio:
                return False
            with av.open(str(tmp), "w", options={"movflags": "+faststart"}) as out:
                v_out = out.add_stream_from_template(vin.streams.video[0])
                a_in = ain.streams.audio[0]
                a_out = out.add_stream_from_template(a_in)
                for packet in vin.demux(vin.streams.video[0]):
                    if packet.dts is not None:
                        packet.stream = v_out
                        out.mux(packet)
                for packet in ain.demux(a_in):
                    if packet.dts is None:
                        continue
                    if end_s is not None and packet.pts is not None and float(packet.pts * a_in.time_base) > end_s:
                        break
                    packet.stream = a_out
                    out.mux(packet)
        os.replace(tmp, video_path)
        return True
    except (av.FFmpegError, ValueError, OSError):
        tmp.unlink(missing_ok=True)
        return False
