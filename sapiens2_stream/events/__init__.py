"""Events from tracked people: zones (enter, exit, dwell, loitering, crowding), lines (crossings with direction) and
poses (falls, hands up). `EventRules` is the whole of it; the pipeline's events stage runs one per source."""

from .rules import EventRules

__all__ = ["EventRules"]
