"""`sapiens2-stream list stages|sinks|detectors|sources|tasks`: every registry of components
(`registry.REGISTRIES`), one table each (name, scope, place, YAML section, what it does), each row said by its
entry, so it cannot fall out of date."""

from __future__ import annotations

from .registry import ROW_HEADER, Row, registry


def rows(kind: str) -> list[Row]:
    """The registry `kind` as rows of `ROW_HEADER`'s columns, in its order."""
    return registry(kind).rows()


def table(kind: str) -> str:
    """The registry as aligned text columns, the header first."""
    lines = [ROW_HEADER, *rows(kind)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(ROW_HEADER) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[-1]]).rstrip()
                     for line in lines)  # fmt: skip
