"""How whoever watches a run attaches to it from outside: an `Observer` (the console, a fleet worker's live
views, Prometheus, the progress bar, the Python API). The pipeline calls these methods and knows nothing more of
who listens."""

from __future__ import annotations

from collections.abc import Coroutine


class Observer:
    """Watches a run from outside; every method is optional. `started` runs on the pipeline's loop when the run
    starts and may return coroutines to run beside it (a server); `source_added` / `source_closed` for every
    stream (those at the start too); `result` on the source's writer thread, after the sinks; `ending` on the
    loop once the models have no more work (a server stops then); `ended` after every output closed."""

    def started(self, pipeline) -> list[Coroutine]:
        return []

    def source_added(self, stream) -> None:
        pass

    def result(self, result, stream) -> None:
        pass

    def source_closed(self, stream) -> None:
        pass

    def ending(self) -> None:
        pass

    def ended(self) -> None:
        pass


def tell(observers: list[Observer], stream, result) -> None:
    """A result `stream` wrote, to every observer of the run (`observers`: the list itself, so that observers
    attached later are told too)."""
    for observer in observers:
        observer.result(result, stream)
