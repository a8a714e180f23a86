"""MkDocs hook: the pipeline YAML's reference page (reference/yaml.md), generated at build time from the schema in
`sapiens2_stream/config.py` (every key, its type, default and comment), so the page cannot drift from the code."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing

import yaml
from mkdocs.structure.files import File

PAGE = "reference/yaml.md"


def on_files(files, config):
    files.append(File.generated(config, PAGE, content=reference()))
    return files


def reference() -> str:
    from sapiens2_stream import config as schema

    lines = [
        "# The pipeline YAML (reference)",
        "",
        "Every key a pipeline file takes, generated from the schema in `sapiens2_stream/config.py` (its types, "
        "defaults and comments). `sapiens2-stream validate PIPELINE.yaml` checks a file against it; `--set "
        "key.path=value` overrides any key. Sections marked *(per task)* have one entry per task of the task table "
        "(`models/tasks.py`).",
        "",
    ]
    lines += section(schema.PipelineConfig, "", schema, "")
    return "\n".join(lines) + "\n"


def section(cls: type, prefix: str, schema, comment: str) -> list[str]:
    """A section's heading, what it is (the field's comment, else the class's docstring) and a row per key; then
    its nested sections."""
    hints = typing.get_type_hints(cls, vars(schema))
    comments = field_comments(cls)
    rows, nested = [], []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = f"{prefix}{f.name}"
        inner = section_type(tp)
        if inner is not None:
            nested.append((key, inner, comments.get(f.name, "")))
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
    return None


def default_of(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if isinstance(value, tuple):
        value = list(value)
    return "`" + yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip() + "`"


def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the source: the text after `#` on its line and on comment lines right below it. The
    per-task fields made from the task table take their comments from it."""
    from sapiens2_stream.models.tasks import pipeline_tasks

    tasks = {t.name: f"the {t.name} model ({', '.join(t.results)}) *(per task)*" for t in pipeline_tasks()}
    filters = {t.temporal.key: f"{t.temporal.comment or t.name} *(per task)*" for t in pipeline_tasks() if t.temporal}
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):  # made by make_dataclass from the task table
            names = {f.name for f in dataclasses.fields(klass)}
            comments.update({k: v for k, v in {**tasks, **filters}.items() if k in names})
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
    return {k: v.replace("|", "\\|") for k, v in comments.items()}
