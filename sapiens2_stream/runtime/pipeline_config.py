"""The pipeline YAML's whole shape, assembled from the sections the packages declare.

Each package declares the sections its components read in its own light `options` module (`@section(key=...)`:
`detect/options.py` the detector's, `io/options.py` the inputs' and each kind of output's under `outputs:`,
`runtime/options.py` the runtime's, `runtime/task_sections.py` the models' and temporal filter's, ...); the stages
name theirs (`Stage.section`). `PipelineConfig` is every declared section put together (nested by their dotted
keys), as `models:` is made from the task table: a new component's keys are its options class, nothing here
changes. What is no component's own (the inputs, users' stages, the name) is `PipelineBase`
(`runtime/pipeline_base.py`). Reading a pipeline file imports these light modules only (no torch, PyAV or
ultralytics). Loading, `--set`, `${VAR}` and error wording are `config.py`'s; the checks that span sections are
`check_config` below.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import config as kit
from ..config import SOURCE_NAME, apply_sources, expand_env, from_dict, parse_yaml, section, set_dotted
from ..detect.boxes_file import detections_beside, read_boxes
from ..errors import Sapiens2StreamError
from ..models.tasks import pipeline_tasks
from .pipeline_base import PipelineBase
from .task_sections import check_temporal

# The packages' options modules, in the order their sections come in the YAML (each declares its own).
OPTIONS = ("detect.options", "track.options", "runtime.options", "runtime.task_sections", "io.options",
           "threed.options", "angles.options", "kinematics.options", "events.options", "export.options")  # fmt: skip


def declared_sections() -> list[kit.Declared]:
    """Every section the packages declare, in the order of `OPTIONS` (those declared elsewhere last), each package's
    in the order it declares them."""
    for name in OPTIONS:
        importlib.import_module(f"sapiens2_stream.{name}")
    sections = list(kit.SECTIONS.values())
    home = {d.key: d.type.__module__.removeprefix("sapiens2_stream.") for d in sections if "." not in d.key}

    def rank(declared: kit.Declared) -> int:
        module = home.get(declared.key.split(".")[0])
        return OPTIONS.index(module) if module in OPTIONS else len(OPTIONS)

    return sorted(sections, key=rank)


def section_field(declared: kit.Declared) -> dataclasses.Field:
    """A section's field: a mapping made with its defaults (its class says what it is), or a plain value (a switch)
    with its default, described by its declaration."""
    metadata = {"doc": declared.doc} if declared.doc else {}
    if dataclasses.is_dataclass(declared.type):
        return field(default_factory=declared.type, metadata=metadata)
    return field(default=declared.default, metadata=metadata)


def assembled(name: str, base: type, prefix: str, sections: list[kit.Declared]) -> type:
    """`base` with a field for each section directly under `prefix` (each itself assembled from the sections
    under it), in the order they are declared."""
    fields = []
    for declared in sections:
        key = declared.key[len(prefix) :]
        if not declared.key.startswith(prefix) or "." in key:
            continue
        if any(d.key.startswith(f"{declared.key}.") for d in sections):
            inner = assembled(key.title().replace("_", "") + "Config", declared.type, f"{declared.key}.", sections)
            declared = dataclasses.replace(declared, type=inner)
        fields.append((key, declared.type, section_field(declared)))
    namespace = {"__module__": __name__, "__doc__": base.__doc__}
    return section(dataclasses.make_dataclass(name, fields, bases=(base,), namespace=namespace))


def assembled_config() -> type:
    """The configuration of every section declared now (a section declared later, say in a test, is in the next
    one assembled)."""
    return assembled("PipelineConfig", PipelineBase, "", declared_sections())


if TYPE_CHECKING:  # editors and type checkers follow the same classes written out (`schema --stub`)
    from .config_shape import PipelineConfig
else:
    PipelineConfig = assembled_config()


def load_config(
    path: str | Path | None,
    overrides: list[str] = (),
    source: str | list[str] | None = None,
    output: str | None = None,
) -> PipelineConfig:
    """Read and validate a pipeline YAML, then apply --set overrides and --source (one or several) / --output."""
    if path is None:
        return config_from({}, overrides, source, output, "configuration")
    return config_from(read_pipeline(path), overrides, source, output, str(path))


def read_pipeline(path: str | Path) -> dict:
    """A pipeline YAML as data, read with the safe loader (checked when a configuration is built from it)."""
    p = Path(path)
    if not p.is_file():
        raise Sapiens2StreamError(f"{path}: no such pipeline file (see the ready ones in pipelines/)")
    return parse_yaml(p.read_text(), str(path))


def config_from(
    data: dict, overrides=(), source: str | list[str] | None = None, output: str | None = None,
    origin: str = "configuration",
) -> PipelineConfig:  # fmt: skip
    """A validated configuration from YAML-shaped data: `overrides` ("key.path=value"), the source(s), the output;
    `${NAME}` in any string taken from the environment."""
    if "source" in data and "sources" in data:
        raise Sapiens2StreamError(
            f"{origin}: both source: and sources: are given; use source: for one input or sources: for several"
        )
    for assignment in overrides:
        set_dotted(data, assignment)
    data = expand_env(data, origin)
    if source:
        apply_sources(data, [source] if isinstance(source, str) else list(source), origin)
    if output is not None:
        node = data.setdefault("outputs", {})
        if not isinstance(node, dict):
            raise Sapiens2StreamError(f"{origin}: outputs must be a mapping")
        node["dir"] = output
    try:
        config = from_dict(PipelineConfig, data)
    except Sapiens2StreamError as e:
        raise Sapiens2StreamError(f"{origin}: {e}") from None
    check_config(config, origin)
    return config


def check_config(config: PipelineConfig, origin: str) -> None:
    """Checks across fields that the types alone cannot express."""

    def fail(message: str) -> None:
        raise Sapiens2StreamError(f"{origin}: {message}")

    if config.sources is None and not config.source.uri:
        fail("source.uri is missing: give a video file, rtsp://..., webcam:0 or a folder (or pass --source)")
    if config.sources is not None:
        if not config.sources:
            fail("sources is empty: list at least one {name, uri} (or use source: for a single input)")
        names = set()
        for i, src in enumerate(config.sources):
            if not src.uri:
                fail(f"sources[{i}].uri is missing: a video file, rtsp://..., webcam:0 or a folder")
            if not SOURCE_NAME.match(src.name):
                fail(f"sources[{i}].name {src.name!r} must be letters, digits, - and _ (it names OUTPUT/<name>/)")
            if src.name in names:
                fail(f"sources[{i}].name {src.name!r} is used twice; every source needs its own name")
            names.add(src.name)
    if not config.enabled_models():
        fail(f"models: enable at least one of {', '.join(t.name for t in pipeline_tasks())} (each with a source:)")
    for name, model in config.enabled_models().items():
        if not model.source:
            fail(f"models.{name}.source is missing: a hub id, a folder or a .safetensors file")
        if model.input_size and any(v % 16 for v in model.input_size):
            fail(f"models.{name}.input_size must be [height, width], multiples of 16 (released models: [1024, 768])")
    if config.detector.type == "file" and not config.detector.path:  # each video's own detections, beside it
        for src in config.sources if config.sources is not None else [config.source]:
            try:
                read_boxes(detections_beside(src.uri))
            except Sapiens2StreamError as e:
                fail(f"source {src.name}: {e}" if src.name else str(e))
    if config.detector.type == "fixed":
        if not config.detector.boxes:
            fail("detector.boxes is empty: a fixed detector needs at least one [x, y, w, h] box")
    url = config.outputs.stream.url
    if url and not url.startswith(("rtmp://", "rtmps://", "rtsp://", "rtsps://")):
        fail(f"outputs.stream.url {url!r} must be rtmp://... or rtsp://... (a media server that takes a stream)")
    mqtt = config.outputs.mqtt
    if mqtt.host and mqtt.password_env and mqtt.username is None:
        fail("outputs.mqtt.password_env is set but outputs.mqtt.username is not")
    tls = config.runtime.console.tls
    if tls is not None and not (tls.certfile and tls.keyfile):
        fail("runtime.console.tls needs both certfile and keyfile (PEM files)")
    if config.outputs.pose2sim.enabled:
        if config.sources is None or len(config.sources) < 2 or config.models.pose is None:
            fail("outputs.pose2sim needs the pose model and two or more sources (the cameras of one take)")
        if not config.outputs.jsonl.enabled:
            fail("outputs.pose2sim needs outputs.jsonl.enabled: the project is made from each source's JSONL")
    bg = config.outputs.matting.background
    ok_bg = bg == "blur" or (isinstance(bg, (list, tuple)) and len(bg) == 3) or isinstance(bg, str)
    if not ok_bg:
        fail('outputs.matting.background must be [r, g, b], an image path or "blur"')
    if "matting" in config.outputs.video.draw and config.models.matting is None:
        fail("outputs.video.draw lists matting but models.matting is not enabled")
    if "seg" in config.outputs.video.draw and config.models.seg is None:
        fail("outputs.video.draw lists seg but models.seg is not enabled")
    check_temporal(config.temporal, config.models, fail)
