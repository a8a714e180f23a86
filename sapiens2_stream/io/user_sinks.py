"""Users' own outputs (`outputs.sinks: [{name, use, options}]`) behind the sink interface.

The class is made once with its options (as users' stages are) and opens a state for each folder it writes into:
`open(folder, append) -> state` (the output folder, or each segment folder with outputs.segment_s; `append`: a
--resume continuing the file there), `write(state, result)` for every result in frame order, `close(state)` once
per folder. Being made where the built-in files are, it is fenced on a fleet, rolled with the segments and
continued by --resume like them.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import Sapiens2StreamError
from .sink import Sink


class UserSink(Sink):
    """One folder's share of a user's output object."""

    def __init__(self, output, name: str, folder: Path, append: bool) -> None:
        for part in ("open", "write"):
            if not callable(getattr(output, part, None)):
                raise Sapiens2StreamError(f"outputs.sinks {name!r}: {type(output).__name__} has no {part}()")
        self.output, self.name = output, name
        self.redraw = bool(getattr(output, "redraw", False))
        self.state = output.open(folder, append)

    def write(self, result) -> None:
        self.output.write(self.state, result)

    def close(self) -> None:
        closer = getattr(self.output, "close", None)
        if closer is not None:
            closer(self.state)
