"""`sapiens2-stream list stages|sinks|detectors|sources|tasks`: every registry of components, one table each (name,
scope, place, YAML section, what it does), read from the registries themselves so it cannot fall out of date."""

from __future__ import annotations

KINDS = ("stages", "sinks", "detectors", "sources", "tasks")
HEADER = ("name", "scope", "place", "section", "what it does")


def rows(kind: str) -> list[tuple[str, str, str, str, str]]:
    """The registry `kind` as rows of HEADER's columns, in its order."""
    if kind == "stages":
        from .runtime.stages import builtin_stages, in_order

        stages = in_order(builtin_stages(None))
        return [(s.name, s.scope, f"after {s.after}" if s.after else "first", s.section or "", s.doc)
                for s in stages]  # fmt: skip
    if kind == "sinks":
        from .io.outputs import SINKS

        return [(k.name, k.scope, "after the files" if k.scope == "run" else "output folder", k.section, k.doc)
                for k in SINKS.values()] + [("(yours)", "files", "after the built-in files", "outputs.sinks",
                                             "your own class: open(folder, append), write(state, result), close")]
    if kind == "detectors":
        from .detect import DETECTORS

        return [(k.name, "batch", "detect stage", "detector", k.doc) for k in DETECTORS.values()]
    if kind == "sources":
        from .io.sources import SOURCE_KINDS

        return [(name, "live" if kind.live else "whole", "take stage", "source", kind.doc)
                for name, kind in SOURCE_KINDS.items()]  # fmt: skip
    from .models.tasks import TASKS

    return [(t.name, "crops" if t.per_person else "frames" if t.in_pipeline else "none", "infer stage",
             f"models.{t.name}" if t.in_pipeline else "", t.doc) for t in TASKS.values()]  # fmt: skip


def table(kind: str) -> str:
    """The registry as aligned text columns, the header first."""
    lines = [HEADER, *rows(kind)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[-1]]).rstrip()
                     for line in lines)  # fmt: skip
