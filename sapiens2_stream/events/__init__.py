"""Events from tracked people: zones (enter, exit, dwell, loitering, crowding), lines (crossings with direction) and
poses (falls, hands up). `EventRules` is the whole of it; the pipeline's events stage runs one per source (imported
when first used: reading a pipeline file needs only `events.options`)."""

from ..lazy import lazy_names

__getattr__ = lazy_names(__name__, {"EventRules": ".rules"})
__all__ = ["EventRules"]
