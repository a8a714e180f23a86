"""The pipeline YAML: schema, loading, overrides and error messages that name the key and the fix.

The schema is made of sections that each package declares beside its code (`@section`, `declare`; pydantic
dataclasses: types, bounds, `extra="forbid"`) and `runtime/pipeline_config.py` assembles; `from_dict` validates
a parsed YAML mapping against them with pydantic, strictly as JSON Schema reads it (no string taken for a number),
and says the first problem in one line: the dotted key, what was expected, a did-you-mean for unknown keys. The
same models give the JSON Schema (`sapiens2-stream schema`, `sapiens2_stream.schema`) and the docs' YAML
reference. YAML is read with the safe loader only; `${VAR}` in a string is the environment variable (`expand_env`:
secrets stay out of the file), and a variable that is not set is an error, never an empty string."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import os
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import yaml
from pydantic import BeforeValidator, ConfigDict, Field

from .errors import Sapiens2StreamError
from .registry import registered

DEFAULT_FPS = 30.0  # the frame rate assumed where a source does not say (image folders, streams without a rate,
# the Python API's pictures)

SCHEMA = ConfigDict(extra="forbid")  # every section: unknown keys refused


@dataclasses.dataclass(frozen=True)
class Declared:
    """A section of the pipeline YAML as a package declares it: its dotted key (`outputs.video`), its type (a
    section class, or a plain type such as a switch), the default of a plain one and what it is."""

    key: str
    type: Any
    default: Any = None
    doc: str = ""


SECTIONS: dict[str, Declared] = {}  # dotted key -> its declaration, in the order the packages declare them


def section(cls: type | None = None, *, key: str | None = None, doc: str = ""):
    """A section of the schema: a plain dataclass (made as any, `replace`d as any) that pydantic validates, unknown
    keys refused, when a YAML is read (`from_dict`). Plain rather than pydantic's own dataclasses: the schema is
    built once, when first needed, not class by class at import (`validate` stays quick). With `key` it is that
    section of the pipeline YAML (`@section(key="outputs.video")`, `doc` its description where it is the
    section's key that needs one): `runtime/pipeline_config.py` assembles the whole configuration from these
    declarations."""

    def make(cls: type) -> type:
        if not dataclasses.is_dataclass(cls):
            cls = dataclasses.dataclass(cls)
        cls.__pydantic_config__ = SCHEMA
        if key is not None:
            declare(key, cls, doc=doc)
        return cls

    return make if cls is None else make(cls)


def declare(key: str, tp: Any, default: Any = None, doc: str = "") -> None:
    """`key` is a section of the pipeline YAML of type `tp` (a plain value, a switch, takes `default` and `doc`)."""
    if key in SECTIONS and SECTIONS[key].type is not tp:
        raise ValueError(f"the section {key!r} is declared twice")
    SECTIONS[key] = Declared(key, tp, default, doc)


def yaml_key(f: dataclasses.Field) -> str:
    """A field's key as the YAML spells it (an alias where the name is Python's: `in`, `out`)."""
    return f.metadata.get("alias", f.name)


def on_off(value: Any) -> Any:
    """YAML 1.1 reads a bare on/off as a boolean; a switch takes it as "on" / "off"."""
    return ("on" if value else "off") if isinstance(value, bool) else value


def as_bool(value: Any) -> Any:
    """A true/false switch also takes "on" / "off" (what the other switches say)."""
    return {"on": True, "off": False}.get(value, value) if isinstance(value, str) else value


AtLeast0 = Annotated[float, Field(ge=0)]
Above0 = Annotated[float, Field(gt=0)]
Share = Annotated[float, Field(ge=0, le=1)]
Count = Annotated[int, Field(ge=1)]
Port = Annotated[int, Field(ge=0, le=65535)]
Switch = Annotated[bool | Literal["on", "off"], BeforeValidator(as_bool)]  # (YAML 1.2 editors read on as "on")


def switched_section(value: Any) -> Any:
    """A section that `on` / true switches on with its defaults and `off` / false switches off."""
    value = as_bool(value)
    return ({} if value else None) if isinstance(value, bool) else value


Mode = Annotated[Literal["auto", "on", "off"] | bool, BeforeValidator(on_off)]  # (YAML 1.1 reads on as true)


# ---------------------------------------------------------------------------------------------- validation

BOUNDS = {"greater_than_equal": "at least {ge}", "greater_than": "above {gt}", "less_than_equal": "at most {le}",
          "less_than": "below {lt}", "too_short": "{min_length} long at least", "too_long": "{max_length} long at most",
          "string_pattern_mismatch": "a name of letters, digits, - and _"}  # fmt: skip


def _type_name(tp: Any) -> str:
    """What a type reads as in an error line and in the docs."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        named = [m for m in typing.get_args(tp)[1:] if isinstance(m, registered)]
        return "one of " + ", ".join(map(repr, named[0].names())) if named else _type_name(typing.get_args(tp)[0])
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}.get(
        tp, str(tp)
    )


@functools.cache
def _adapter(cls: type) -> pydantic.TypeAdapter:
    return pydantic.TypeAdapter(cls)


def from_dict(cls: type, data: dict, path: str = "") -> Any:
    """Build the section `cls` from a mapping (validated strictly, as the JSON Schema reads it), naming the exact
    key and the fix for the first thing wrong; `path` prefixes the keys in messages."""
    try:
        return _adapter(cls).validate_json(json.dumps(data, default=str), strict=True)
    except pydantic.ValidationError as e:
        raise Sapiens2StreamError(explain(cls, e.errors(), path)) from None


def _fields(cls: type) -> dict[str, tuple[str, Any]]:
    """A section's keys as the YAML spells them (aliases) -> (field name, type without bounds); also of a user's
    pydantic model."""
    hints = typing.get_type_hints(cls, include_extras=True)
    if dataclasses.is_dataclass(cls):
        return {yaml_key(f): (f.name, hints[f.name]) for f in dataclasses.fields(cls)}
    return {(info.alias or name): (name, hints[name]) for name, info in getattr(cls, "model_fields", {}).items()}


def _walk(cls: type, loc: tuple) -> tuple[list, Any, type | None]:
    """Follow an error's location through the schema: the part of it that names keys and list items, the type
    there and the section holding it (the rest of a location names the members of a union)."""
    known, tp, parent = [], cls, None
    for part in loc:
        bare = typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp
        options = [a for a in typing.get_args(bare) if a is not type(None)]
        if typing.get_origin(bare) in (typing.Union, types.UnionType) and len(options) == 1:
            bare = options[0]  # X | None
        origin = typing.get_origin(bare)
        if isinstance(bare, type) and (dataclasses.is_dataclass(bare) or hasattr(bare, "model_fields")):
            keys = _fields(bare)
            if part not in keys:
                return known, tp, bare
            known.append(part)
            tp, parent = keys[part][1], bare
        elif origin is list and isinstance(part, int):
            known.append(part)
            tp = typing.get_args(bare)[0]
        elif origin is dict:
            known.append(part)
            tp = typing.get_args(bare)[1]
        else:
            break
    return known, tp, parent


def _dotted(prefix: str, parts: list) -> str:
    out = prefix
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def explain(cls: type, errors: list[dict], prefix: str = "") -> str:
    """pydantic's errors as the one line a user reads: the first wrong key, what it must be, what it was."""
    first = errors[0]
    known, tp, parent = _walk(cls, first["loc"])
    key = _dotted(prefix, known)
    if first["type"] in ("unexpected_keyword_argument", "extra_forbidden") and parent is not None:
        name = str(first["loc"][len(known)])
        keys = list(_fields(parent))
        close = difflib.get_close_matches(name, keys, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else f" (known keys: {', '.join(keys)})"
        return f"unknown key '{_dotted(prefix, [*known, name])}'{hint}"
    if first["type"] == "value_error":  # a section's own check (__post_init__): its message goes on from the key
        said = str(first.get("ctx", {}).get("error", first["msg"]))
        return f"{key}{said}"
    if first["type"] in ("missing", "missing_argument"):
        return f"{_dotted(prefix, [*known, first['loc'][-1]]) if parent is None else key} is missing"
    if not known:
        return f"{prefix or 'the configuration'} must be a mapping of sections, got {first.get('input')!r}"
    here = [e for e in errors if _walk(cls, e["loc"])[0] == known]
    bound = next((e for e in here if e["type"] in BOUNDS), None)
    if bound is not None:
        alternatives = [a for a in typing.get_args(tp) if typing.get_origin(a) is Literal]
        also = "".join(f" (or {', '.join(map(str, typing.get_args(a)))})" for a in alternatives)
        ctx = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in bound.get("ctx", {}).items()}
        return f"{key} must be {BOUNDS[bound['type']].format(**ctx)}{also}, got {bound['input']!r}"
    return f"{key} must be {_type_name(tp)}, got {first.get('input')!r}"


def parse_yaml(text: str, origin: str) -> dict:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise Sapiens2StreamError(f"{origin}: invalid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise Sapiens2StreamError(f"{origin}: the top level must be a mapping of sections (source:, models:, ...)")
    return data


def set_dotted(data: dict, assignment: str) -> None:
    """Apply `a.b.c=value` (value parsed as YAML) to a nested mapping."""
    if "=" not in assignment:
        raise Sapiens2StreamError(f"--set {assignment!r}: expected KEY=VALUE, e.g. runtime.device=cpu")
    key, raw = assignment.split("=", 1)
    set_value(data, key.strip(), parse_yaml(f"v: {raw}", f"--set {key}")["v"] if raw.strip() else None, "--set ")


def set_value(data: dict, key: str, value: Any, origin: str = "") -> None:
    """`a.b.c` = value in a nested mapping (the sections made as needed)."""
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise Sapiens2StreamError(f"{origin}{key}: '{part}' is not a section")
        node = child
    node[parts[-1]] = value


SOURCE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")  # a source's name: it names OUTPUT/<name>/


def source_names(uris: list[str]) -> list[tuple[str, str]]:
    """(name, uri) for each `--source`: NAME=URI names it, otherwise the file stem or camN (N from 1)."""
    named = []
    for i, item in enumerate(uris, 1):
        name, sep, uri = item.partition("=")
        if sep and SOURCE_NAME.match(name) and uri:
            named.append((name, uri))
            continue
        stem = Path(item).stem if "://" not in item and ":" not in item.split("/")[0] else ""
        named.append((re.sub(r"[^A-Za-z0-9_-]", "_", stem) or f"cam{i}", item))
    seen: dict[str, int] = {}
    unique = []
    for name, uri in named:
        seen[name] = seen.get(name, 0) + 1
        unique.append((name if seen[name] == 1 else f"{name}-{seen[name]}", uri))
    return unique


def apply_sources(data: dict, uris: list[str], origin: str) -> None:
    """`--source` replaces the YAML's input(s): one plain URI is the single `source:`; several, or a named one,
    become `sources:`. Keys of the YAML's `source:` section (timeouts, transport, ...) carry over to each."""
    base = data.pop("source", None) or {}
    data.pop("sources", None)
    if not isinstance(base, dict):
        raise Sapiens2StreamError(f"{origin}: source must be a mapping")
    named = source_names(uris)
    if len(uris) == 1 and named[0][1] == uris[0]:  # one source, not named
        data["source"] = {**base, "uri": uris[0]}
    else:
        data["sources"] = [{**base, "uri": uri, "name": name} for name, uri in named]


ENV_REFERENCE = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)\}")  # ${NAME}; $${NAME} is a literal ${NAME}


def expand_env(node: Any, origin: str, key: str = "") -> Any:
    """`node` with every `${NAME}` in its strings replaced by that environment variable, so that a camera's
    password stays out of the file (`uri: rtsp://admin:${CAM_PASSWORD}@10.0.0.5/stream1`); an unset one is a
    configuration error naming the key and the variable. `$${NAME}` stays `${NAME}`."""
    if isinstance(node, dict):
        return {k: expand_env(v, origin, f"{key}.{k}" if key else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [expand_env(v, origin, f"{key}[{i}]") for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def value(match: re.Match) -> str:
        escaped, name = match.groups()
        if escaped:
            return "${" + name + "}"
        if name not in os.environ:
            raise Sapiens2StreamError(f"{origin}: {key} names ${{{name}}}, but that environment variable is not set")
        return os.environ[name]

    return ENV_REFERENCE.sub(value, node)
