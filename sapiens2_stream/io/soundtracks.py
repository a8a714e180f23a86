"""Time offsets between the cameras of one take from their soundtracks (from the keypoints' movement:
`threed.motion_sync`).

The onset envelope of each soundtrack (where the sound gets louder, e.g. a clap), cross-correlated with the
reference camera's.

An offset is the reference clock's time at the camera's own time 0: camera time t is reference time t + offset.
Confidence: 1 - the strongest correlation away from the winner / the winner's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..threed.motion_sync import Offset
from .pyav import av

AUDIO_RATE = 8000
AUDIO_CONFIDENCE = 0.5  # `auto` takes the soundtracks only when every camera's onset is at least this clear
ENVELOPE_HOP = 32  # samples: a 4 ms envelope


def soundtrack(path: Path) -> tuple[np.ndarray, float] | None:
    """A file's audio as mono samples at AUDIO_RATE and the time of the first one; None without audio."""
    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                return None
            resampler = av.AudioResampler(format="flt", layout="mono", rate=AUDIO_RATE)
            chunks, start = [], None
            for frame in container.decode(audio=0):
                if start is None and frame.time is not None:
                    start = float(frame.time)
                chunks += [r.to_ndarray().reshape(-1) for r in resampler.resample(frame)]
            chunks += [r.to_ndarray().reshape(-1) for r in resampler.resample(None)]
    except (av.FFmpegError, OSError):
        return None
    if not chunks:
        return None
    return np.concatenate(chunks), start or 0.0


def onsets(samples: np.ndarray) -> np.ndarray:
    """Where the sound gets suddenly louder (a clap): the rise of a 4 ms loudness envelope on a log scale, kept only
    where it stands out from the soundtrack's own fluctuations (the noise floor has small rises everywhere)."""
    n = len(samples) // ENVELOPE_HOP
    envelope = np.sqrt((samples[: n * ENVELOPE_HOP].reshape(n, ENVELOPE_HOP) ** 2).mean(axis=1))
    loud = np.log10(envelope + 1e-5)
    rise = np.maximum(np.diff(loud, prepend=loud[0]), 0)
    return np.where(rise > rise.mean() + 4 * rise.std(), rise, 0.0)


def audio_offsets(sounds: dict[str, tuple[np.ndarray, float]], step: float) -> dict[str, Offset]:
    """Every camera's offset against the first one, from the cross-correlation of their onset envelopes."""
    names = list(sounds)
    ref = names[0]
    ref_onsets, ref_start = onsets(sounds[ref][0]), sounds[ref][1]
    out = {ref: Offset(0.0, 0, 1.0, "reference")}
    hop_s = ENVELOPE_HOP / AUDIO_RATE
    for name in names[1:]:
        cam_onsets, cam_start = onsets(sounds[name][0]), sounds[name][1]
        from scipy.signal import correlate  # here: scipy.signal takes 1.4 s to import, and most runs never sync

        xc = correlate(ref_onsets, cam_onsets, mode="full", method="fft")
        best = int(np.argmax(xc))
        vertex = 0.0
        if 0 < best < len(xc) - 1:  # a parabola through the peak: finer than one envelope hop
            a, b, c = xc[best - 1], xc[best], xc[best + 1]
            vertex = 0.5 * (a - c) / (a - 2 * b + c) if a - 2 * b + c < 0 else 0.0
        lag = (best + vertex - (len(cam_onsets) - 1)) * hop_s  # the camera's sound sits this much later in the ref
        offset = float(lag + ref_start - cam_start)
        guard = max(1, int(0.05 / hop_s))
        away = np.delete(xc, np.arange(max(0, best - guard), best + guard + 1))
        conf = float(np.clip(1 - away.max() / xc[best], 0, 1)) if xc[best] > 0 and len(away) else 0.0
        out[name] = Offset(offset, round(offset / step), conf, "audio")
    return out


def sound_offsets(sounds: dict[str, tuple[np.ndarray, float] | None], step: float, method: str) -> dict[str, Offset]:
    """Every camera's offset from its soundtrack (`soundtrack`'s answer, None without one), or {} when they cannot
    say: `auto` wants every camera's soundtrack and each offset at least AUDIO_CONFIDENCE clear; `audio` takes
    whatever they give and names the cameras without one (ValueError)."""
    missing = [name for name, sound in sounds.items() if sound is None]
    if missing:
        if method == "audio":
            raise ValueError(f"no soundtrack for {', '.join(missing)}")
        return {}
    offsets = audio_offsets(sounds, step)
    clear = min(o.confidence for o in offsets.values()) >= AUDIO_CONFIDENCE
    return offsets if method == "audio" or clear else {}
