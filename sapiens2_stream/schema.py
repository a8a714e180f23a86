"""The pipeline YAML's JSON Schema and its words: the schema of `config.py` (pydantic) with every key's comment in
the source as its description (the configuration is assembled from the components' sections,
`runtime.pipeline_config`), so that editors complete, check and explain keys (`sapiens2-stream schema`; every
shipped pipeline names `docs/pipeline.schema.json` in its `# yaml-language-server: $schema=...` line) and the docs'
YAML reference says the same (docs/hooks/yaml_reference.py)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing

from . import config
from .models.tasks import pipeline_tasks
from .runtime.pipeline_config import PipelineConfig

SCHEMA_URI = "https://json-schema.org/draft/2020-12/schema"


def json_schema() -> dict:
    """The JSON Schema of a pipeline YAML (draft 2020-12)."""
    schema = config._adapter(PipelineConfig).json_schema(by_alias=True)
    sections = reachable(PipelineConfig)
    for name, definition in [("PipelineConfig", schema), *schema.get("$defs", {}).items()]:
        cls = sections.get(name)
        if cls is None:
            continue
        comments = field_comments(cls)
        aliases = {config.yaml_key(f): f.name for f in dataclasses.fields(cls)}
        for key, prop in definition.get("properties", {}).items():
            text = comments.get(aliases.get(key, key))
            if text:
                prop["description"] = text
            prop.pop("title", None)
        doc = inspect.getdoc(cls) if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else ""
        if doc:
            definition["description"] = " ".join(doc.split())
    schema["title"] = "sapiens2-stream pipeline"
    return {"$schema": SCHEMA_URI, **schema}


def reachable(cls: type, found: dict | None = None) -> dict[str, type]:
    """Every section class under `cls` (itself included), by name, as the schema's `$defs` name them."""
    found = {} if found is None else found
    found[cls.__name__] = cls
    for tp in typing.get_type_hints(cls).values():
        for inner in type_parts(tp):
            if dataclasses.is_dataclass(inner) and inner.__name__ not in found:
                reachable(inner, found)
    return found


def type_parts(tp) -> list:
    """A type and every type inside it (X | None, list[X], dict[str, X], Annotated[X, ...])."""
    return [tp, *(part for arg in typing.get_args(tp) for part in type_parts(arg))]


def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the source: the text after `#` on its line and on comment lines right below it. The
    per-task fields made from the task table take their comments from it."""
    tasks = {t.name: f"the {t.name} model ({', '.join(t.results)}) *(per task)*" for t in pipeline_tasks()}
    filters = {t.temporal.key: f"{t.temporal.comment or t.name} *(per task)*" for t in pipeline_tasks() if t.temporal}
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        comments.update({f.name: f.metadata["doc"] for f in dataclasses.fields(klass) if "doc" in f.metadata})
        table = tasks if klass.__name__ == "ModelsConfig" else filters if klass.__name__ == "TemporalConfig" else None
        if table is not None:  # made by make_dataclass from the task table
            names = {f.name for f in dataclasses.fields(klass)}
            comments.update({k: v for k, v in table.items() if k in names})
            continue
        try:
            source = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        current = None
        for line in source:
            field = re.match(r"^    (\w+): [^#]*?(?:#\s*(.*))?$", line)
            more = re.match(r"^    #\s*(.*)$", line)
            if field and not line.strip().startswith(("def ", "@")):
                current = field.group(1)
                comments[current] = (field.group(2) or "").strip()
            elif more and current is not None:
                comments[current] = f"{comments[current]} {more.group(1).strip()}".strip()
            else:
                current = None
    return comments
