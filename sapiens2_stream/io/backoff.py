"""The one way the outputs and sources wait between tries of something that is away (a camera, a media server, a
webhook receiver): waits that double after each failure up to a ceiling, and start over after a success."""

from __future__ import annotations


class Backoff:
    def __init__(self, initial_s: float, max_s: float) -> None:
        self.initial_s, self.max_s = initial_s, max_s
        self.wait = initial_s

    def next(self) -> float:
        """How long to wait after this failure (the following one waits twice as long, up to max_s)."""
        wait = self.wait
        self.wait = min(self.wait * 2, self.max_s)
        return wait

    def reset(self) -> None:
        """It worked: the next failure waits `initial_s` again."""
        self.wait = self.initial_s
