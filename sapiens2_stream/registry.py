"""Every kind of component people name, one mechanism: a `Registry` per kind, all of them in `REGISTRIES`.

The built-in stages, the outputs (sinks), the detectors, the kinds of input and the model tasks are each an entry
of one registry, added where the component lives (`STAGES.add(...)`, or `@register_stage` for a stage), with its
name written once: in the entry. Everything else reads the registry: `sapiens2-stream list KIND` (each entry says
its own row, `listing()`), the YAML's choices (`detector.type` and `source.kind` accept the registered names, and
the JSON Schema lists them: `registered(...)`), the Python API's `output=None` (each stage's and sink's
`files_off`), the stage order (`stages.base.ORDER`).

A registry knows the module that fills it (`home`), so asking it for its entries imports that module first: a
registry is complete however little of the package was imported before.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar

from pydantic import AfterValidator, GetJsonSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

from .errors import Sapiens2StreamError

Row = tuple[str, str, str, str, str]  # name, scope, place, YAML section, what it does (`sapiens2-stream list`)
ROW_HEADER: Row = ("name", "scope", "place", "section", "what it does")


class Listed(Protocol):
    """What an entry of a registry has: its name and its row in `sapiens2-stream list`."""

    name: str

    def listing(self) -> Row: ...


T = TypeVar("T", bound=Listed)


class Registry(Mapping[str, T], Generic[T]):
    """The entries of one kind by name, in the order they were added (an order some kinds rely on: `auto` takes
    the first kind of input that claims a URI, the outputs are written in theirs)."""

    def __init__(self, kind: str, what: str, home: str, notes: tuple[Row, ...] = (), ranked: bool = False) -> None:
        """`kind`: its name in `sapiens2-stream list`; `what`: one entry in words ("detector"), for errors;
        `home`: the module whose import adds the built-in entries; `notes`: rows `list` prints after them;
        `ranked`: `list` prints the entries by their `rank()` (the stages: their place), not as they were added."""
        self.kind, self.what, self.home, self.notes, self.ranked = kind, what, home, notes, ranked
        self._entries: dict[str, T] = {}
        REGISTRIES[kind] = self

    def add(self, entry: T, *, replace: bool = False) -> T:
        """Register `entry` under its own `name` (a second entry of one name is a programming error unless
        `replace`)."""
        name = entry.name
        if name in self._entries and not replace:
            raise ValueError(f"a {self.what} named {name!r} is registered already")
        self._entries[name] = entry
        return entry

    @contextlib.contextmanager
    def kept(self) -> Iterator[Registry[T]]:
        """The registry as it is now, restored on leaving: entries added inside (a test's) are gone after."""
        saved = dict(self._entries)
        try:
            yield self
        finally:
            self._entries.clear()
            self._entries.update(saved)

    def loaded(self) -> Registry[T]:
        """The registry with its built-in entries (their module imported)."""
        importlib.import_module(self.home)
        return self

    def pick(self, name: str) -> T:
        """The entry `name`, or one line naming the choices."""
        if name not in self.loaded():
            raise Sapiens2StreamError(f"unknown {self.what} {name!r}; choose one of {', '.join(self._entries)}")
        return self._entries[name]

    def rows(self) -> list[Row]:
        entries = list(self.loaded().values())
        if self.ranked:
            entries.sort(key=lambda entry: entry.rank())  # type: ignore[attr-defined]  (a ranked kind's entries)
        return [entry.listing() for entry in entries] + list(self.notes)

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


REGISTRIES: dict[str, Registry[Any]] = {}


def registry(kind: str) -> Registry[Any]:
    """The registry `kind` (stages, sinks, detectors, sources, tasks), filled."""
    if kind not in REGISTRIES:
        raise Sapiens2StreamError(f"unknown kind {kind!r}; choose one of {', '.join(REGISTRIES)}")
    return REGISTRIES[kind].loaded()


class registered:  # noqa: N801  (used as a type annotation: `kind: Annotated[str, registered(SOURCES, "auto")]`)
    """A YAML value that names an entry of a registry (plus `extra` names of its own, such as `auto`): checked
    against the registry when a pipeline is read, listed as the JSON Schema's `enum`, so the names are written
    only in the entries."""

    def __init__(self, of: Registry[Any], *extra: str) -> None:
        self.of, self.extra = of, extra

    def names(self) -> list[str]:
        return [*self.extra, *self.of.loaded()]

    def check(self, value: str) -> str:
        names = self.names()
        if value not in names:  # worded as pydantic words a choice it does not know
            expected = ", ".join(map(repr, names[:-1])) + f" or {names[-1]!r}" if len(names) > 1 else repr(names[0])
            raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], core_schema.CoreSchema]):
        return AfterValidator(self.check).__get_pydantic_core_schema__(source, handler)

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> dict:
        return {"enum": self.names(), "type": "string"}


# The kinds, each with the module that adds its built-in entries.
STAGES: Registry[Any] = Registry("stages", "stage", "sapiens2_stream.runtime.stages", ranked=True)
SINKS: Registry[Any] = Registry(
    "sinks", "output", "sapiens2_stream.io.outputs",
    notes=(("(yours)", "files", "after the built-in files", "outputs.sinks",
            "your own class: open(folder, append), write(state, result), close"),),
)  # fmt: skip
DETECTORS: Registry[Any] = Registry("detectors", "detector", "sapiens2_stream.detect.kinds")
SOURCES: Registry[Any] = Registry("sources", "kind of input", "sapiens2_stream.io.source_kinds")
TASKS: Registry[Any] = Registry("tasks", "task", "sapiens2_stream.models.tasks")
