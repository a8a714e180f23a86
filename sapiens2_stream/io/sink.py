"""The base of every output (a sink) and what several kinds share: how a record rounds its numbers.

Every sink writes as results arrive and finishes its output on `close`. Each kind lives in a module of its own in
this package (`sapiens2-stream list sinks` names them) and builds on this one; io.outputs assembles them from the
configuration."""

from __future__ import annotations

import numpy as np

from ..models.metadata import NUM_SEG_CLASSES


class Sink:
    redraw = False  # takes the frames `--resume` draws again (videos); records (JSONL, tracks) have them already

    def write(self, result) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Finish the output; called once, also after an interruption."""

    def stats(self) -> dict | None:
        """What an output that can refuse work (a server away) sent and dropped, or what else its summary says (a
        video asked to encode on the GPU: which encoder it got); None for files."""
        return None


PX_DIGITS, SCORE_DIGITS, PTS_DIGITS, METRE_DIGITS = 2, 4, 6, 4  # what the JSONL keeps: 0.01 px, 1e-4 score, 1 us,
# 0.1 mm


def rounded(a: np.ndarray | None, digits: int = PX_DIGITS) -> list | None:
    """An array as a JSON list, rounded (0.01 px by default)."""
    return None if a is None else np.round(np.asarray(a, np.float64), digits).tolist()


def rounded_points(a: np.ndarray, digits: int) -> list:
    """[N, D] points as JSON lists, rounded, a point with no value (NaN) as null."""
    return [None if not np.isfinite(p).all() else [round(float(v), digits) for v in p] for p in np.asarray(a)]


def best_keypoints(person) -> np.ndarray | None:
    """A person's smoothed keypoints where the smoother ran, else the raw ones: what drawing, events, 3-D, MQTT and
    the Python API's supervision output use."""
    return person.smoothed if person.smoothed is not None else person.keypoints


def as_recorded(pts_s: float, keypoints: np.ndarray, scores: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """A person's time, keypoints and scores exactly as the JSONL records them. The smoother takes these, so a
    resumed run that replays the records reproduces its state bit for bit (a score rounded across the gating
    threshold would otherwise change it)."""
    return (round(pts_s, PTS_DIGITS), np.round(np.asarray(keypoints, np.float64), PX_DIGITS),
            np.round(np.asarray(scores, np.float64), SCORE_DIGITS))  # fmt: skip


def seg_counts(labels: np.ndarray) -> dict[int, int]:
    """Pixels per body-part class (the classes present)."""
    counts = np.bincount(labels.ravel(), minlength=NUM_SEG_CLASSES)
    return {int(c): int(n) for c, n in enumerate(counts) if n}


class Fenced(Exception):
    """This process may no longer write a source's files: the source was given to another worker."""
