"""MkDocs hook: the pipeline YAML's reference page (reference/yaml.md), generated at build time from the
assembled configuration (`sapiens2_stream.runtime.pipeline_config`: every component's section, each key's type,
default and comment where the component declares it), so the page cannot drift from the code."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import yaml
from mkdocs.structure.files import File

PAGE = "reference/yaml.md"


def on_files(files, config):
    files.append(File.generated(config, PAGE, content=reference()))
    return files


def reference() -> str:
    from sapiens2_stream import config as schema
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig

    lines = [
        "# The pipeline YAML (reference)",
        "",
        "Every key a pipeline file takes, generated from the sections the components declare (each stage's and "
        "each output's options class, put together by `runtime/pipeline_config.py`): types, defaults and "
        "comments. `sapiens2-stream validate PIPELINE.yaml` checks a file against it; `--set "
        "key.path=value` overrides any key. Sections marked *(per task)* have one entry per task of the task table "
        "(`models/tasks.py`).",
        "",
    ]
    lines += section(PipelineConfig, "", schema, "")
    return "\n".join(lines) + "\n"


def section(cls: type, prefix: str, schema, comment: str) -> list[str]:
    """A section's heading, what it is (the field's comment, else the class's docstring) and a row per key; then
    its nested sections."""
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    rows, nested = [], []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = f"{prefix}{schema.yaml_key(f)}"
        inner = section_type(tp)
        if inner is not None:
            each = ".NAME" if typing.get_origin(tp) is dict else ""  # a mapping of sections by name (events.zones)
            nested.append((key + each, inner, comments.get(f.name, "")))
            continue
        rows.append(f"| `{key}` | {schema._type_name(tp)} | {default_of(f)} | {comments.get(f.name, '')} |")
    out = []
    if rows:
        doc = inspect.getdoc(cls) if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else ""
        out += [f"## `{prefix.rstrip('.') or 'top level'}`", ""]
        for text in dict.fromkeys(t for t in (comment, " ".join(doc.split())) if t):
            out += [text, ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|", *rows, ""]
    for key, inner, inner_comment in nested:
        out += section(inner, f"{key}.", schema, inner_comment)
    return out


def section_type(tp) -> type | None:
    """The dataclass a field holds (a nested section), also through `X | None` and `list[X]`."""
    if dataclasses.is_dataclass(tp):
        return tp
    for arg in typing.get_args(tp):
        if dataclasses.is_dataclass(arg):
            return arg
        if typing.get_origin(arg) is typing.Annotated and dataclasses.is_dataclass(typing.get_args(arg)[0]):
            return typing.get_args(arg)[0]
    return None


def default_of(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    if isinstance(value, tuple):
        value = list(value)
    return "`" + yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip() + "`"


def field_comments(cls: type) -> dict[str, str]:
    """Each key's comment where its section is declared (`sapiens2_stream.schema.field_comments`), escaped for a
    table, by the name the YAML spells (aliases: `in`, `out`)."""
    from sapiens2_stream.schema import field_comments as comments

    return {k: v.replace("|", "\\|") for k, v in comments(cls).items()}
