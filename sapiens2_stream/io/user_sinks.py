"""Users' own outputs (`outputs.sinks: [{name, use, options}]`) behind the sink interface.

The class is made once with its options (as users' stages are) and opens a state for each folder it writes into:
`open(folder, append) -> state` (the output folder, or each segment folder with outputs.segment_s; `append`: a
--resume continuing the file there), `write(state, result)` for every result in frame order, `close(state)` once
per folder. Being made where the built-in files are, it is fenced on a fleet, rolled with the segments and
continued by --resume like them. One that raises while writing is said once and written no more into that folder
(its `close` still runs; with outputs.segment_s the next segment opens it afresh); the built-in outputs go on, and
the summary's `outputs` names the frame and the error (under `segments` and the segment's folder with
outputs.segment_s).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..errors import Sapiens2StreamError
from .sink import Fenced, Sink

log = logging.getLogger("sapiens2_stream")


class UserSink(Sink):
    """One folder's share of a user's output object."""

    def __init__(self, output, name: str, folder: Path, append: bool) -> None:
        for part in ("open", "write"):
            if not callable(getattr(output, part, None)):
                raise Sapiens2StreamError(f"outputs.sinks {name!r}: {type(output).__name__} has no {part}()")
        self.output, self.name, self.kind = output, name, name
        self.redraw = bool(getattr(output, "redraw", False))
        self.state = output.open(folder, append)
        self.failure: dict | None = None

    def write(self, result) -> None:
        if self.failure is not None:
            return
        try:
            self.output.write(self.state, result)
        except Fenced:
            raise
        except Exception as e:
            self.failure = {"failed_at_frame": result.frame.index, "error": f"{type(e).__name__}: {e}"}
            log.error(
                f"outputs.sinks {self.name!r} failed at frame {result.frame.index}: {type(e).__name__}: {e} "
                "(written no more for this source; the other outputs go on)"
            )

    def stats(self) -> dict | None:
        return self.failure

    def close(self) -> None:
        closer = getattr(self.output, "close", None)
        if closer is not None:
            closer(self.state)
