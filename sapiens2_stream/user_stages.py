"""Users' own stages as the YAML names them (`stages: [{name, use, after, options}]`): the class found and made with
its options. Light on purpose: `validate` checks `stages:` with it, without loading the pipeline."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from .config import (
    from_dict,
    section,
)
from .errors import Sapiens2StreamError


@section
class StageConfig:
    """One of your own stages (`stages:`): a class with open(source) -> state, __call__(state, result), close(state)
    (see the site's page "Your own stages")."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")]  # the stage's name (times, errors)
    use: str  # module:Class (importable) or path/to/file.py:Class
    after: str = "events"  # the stage it follows: infer, a stage of each source's (`list stages`) or one of yours
    options: dict[str, Any] = field(default_factory=dict)  # given to the class: Class(**options), or Class(options)
    # checked against its `Options` dataclass / model when it has one


@section
class SinkConfig:
    """One of your own outputs (`outputs.sinks`): a class with open(folder, append) -> state, write(state, result)
    and close(state) (see the site's page "Your own stages"). It writes into the output folder like the built-in
    files: into each segment folder with outputs.segment_s, continued by --resume (append), fenced on a fleet."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")]  # the output's name (errors, `list sinks`)
    use: str  # module:Class (importable) or path/to/file.py:Class
    options: dict[str, Any] = field(default_factory=dict)  # given to the class: Class(**options), or Class(options)
    # checked against its `Options` dataclass / model when it has one


def stage_object(cfg: StageConfig, where: str):
    """The stage object of a `stages:` entry: `Class(**options)`, or `Class(options)` checked against the
    dataclass or pydantic model the class declares as `Options`."""
    cls = import_class(cfg.use, f"{where}.use")
    schema = getattr(cls, "Options", None)
    try:
        if schema is not None:
            return cls(from_dict(schema, cfg.options, f"{where}.options"))
        return cls(**cfg.options)
    except TypeError as e:
        raise Sapiens2StreamError(f"{where}.options: {cfg.use} did not take them ({e})") from None


def import_class(use: str, where: str) -> type:
    """`module:Class` (importable) or `path/to/file.py:Class` (relative to the working folder)."""
    module_name, sep, class_name = use.rpartition(":")
    if not sep or not module_name or not class_name:
        raise Sapiens2StreamError(f"{where}: {use!r} must be module:Class or path/to/file.py:Class")
    try:
        module = load_file(Path(module_name), where) if module_name.endswith(".py") else \
            importlib.import_module(module_name)  # fmt: skip
    except Sapiens2StreamError:
        raise
    except Exception as e:  # an import error, or the module raised while it loaded
        raise Sapiens2StreamError(f"{where}: cannot import {module_name} ({type(e).__name__}: {e})") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise Sapiens2StreamError(f"{where}: {module_name} has no {class_name}")
    return cls


def load_file(path: Path, where: str):
    """A stage's module given as a file, loaded once per process."""
    if not path.is_file():
        raise Sapiens2StreamError(f"{where}: no such file {path}")
    key = f"sapiens2_user_stage_{abs(hash(str(path.resolve())))}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    return module
