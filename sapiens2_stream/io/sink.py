"""The base of every output (a sink) and what several kinds share: which keypoints a person shows.

Every sink writes as results arrive and finishes its output on `close`. Each kind lives in a module of its own in
this package (`sapiens2-stream list sinks` names them) and builds on this one; io.outputs assembles them from the
configuration."""

from __future__ import annotations

import numpy as np


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


def best_keypoints(person) -> np.ndarray | None:
    """A person's smoothed keypoints where the smoother ran, else the raw ones: what drawing, events, 3-D, MQTT and
    the Python API's supervision output use."""
    return person.smoothed if person.smoothed is not None else person.keypoints


class Fenced(Exception):
    """This process may no longer write a source's files: the source was given to another worker."""
