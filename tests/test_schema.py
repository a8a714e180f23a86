"""One schema for the pipeline YAML (pydantic, in config.py): every key refuses a wrong type and a value beyond its
bounds with exit 2 and a line naming it (walked from the JSON Schema itself); every shipped pipeline passes the
JSON Schema as the `jsonschema` package reads it, and names it for editors; `sapiens2-stream schema` prints it."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from sapiens2_stream.cli import main
from sapiens2_stream.schema import STUB_PATH, json_schema

ROOT = Path(__file__).resolve().parent.parent
BASE = {"source": {"uri": "walk.mp4"}, "models": {"pose": {"source": "facebook/sapiens2-pose-0.4b"}}}
ITEMS = {  # a valid entry for the lists and mappings of sections, so that one key at a time can be made wrong
    "SourceConfig": {"name": "cam1", "uri": "walk.mp4"},
    "ZoneConfig": {"polygon": [[0, 0], [1, 0], [1, 1]]},
    "LineConfig": {"points": [[0.5, 0], [0.5, 1]]},
    "StageConfig": {"name": "mine", "use": "tests.test_stages:Counter"},
    "SinkConfig": {"name": "mine", "use": "examples/people_csv_sink.py:PeopleCSV"},
    "ModelSection": {"source": "facebook/sapiens2-pose-0.4b"},
}


def resolve(schema, node):
    """A property's own schema, its $ref followed, and whether null is allowed."""
    options = node.get("anyOf", [node])
    nullable = any(o.get("type") == "null" for o in options)
    options = [schema["$defs"][o["$ref"].split("/")[-1]] | {"name": o["$ref"].split("/")[-1]} if "$ref" in o else o
               for o in options if o.get("type") != "null"]  # fmt: skip
    return options, nullable


def cases(schema, node, path, put):
    """(dotted key, data, why) for a wrong type and each bound of every key under `node`. `put(data, value)` puts
    a value at `path` in a copy of BASE."""
    options, nullable = resolve(schema, node)
    sections = [o for o in options if "properties" in o]
    if sections:
        section = sections[0]
        for key, prop in section["properties"].items():

            def put_key(data, value, key=key, section=section):
                put(data, {**ITEMS.get(section.get("name"), {}), key: value})

            yield from cases(schema, prop, f"{path}.{key}" if path else key, put_key)
        return
    arrays = [o for o in options if o.get("type") == "array"]
    if arrays and "properties" in arrays[0].get("items", {}) | resolve(schema, arrays[0].get("items", {}))[0][0]:
        item = arrays[0]["items"]

        def put_item(data, value):
            put(data, [value])

        yield from cases(schema, item, f"{path}[0]", put_item)
        return
    maps = [o for o in options if o.get("type") == "object" and isinstance(o.get("additionalProperties"), dict)]
    if maps:

        def put_entry(data, value):
            put(data, {"z1": value})

        yield from cases(schema, maps[0]["additionalProperties"], f"{path}.z1", put_entry)
        return
    types = {t for o in options for t in ([o["type"]] if isinstance(o.get("type"), str) else o.get("type", []))}
    enums = [v for o in options for v in o.get("enum", [])] + [o["const"] for o in options if "const" in o]
    if not types and not enums:
        return  # takes anything (outputs.matting.background: a colour, a path or "blur")
    bad = "x" if "string" not in types and not (enums and "x" in enums) else ([] if "array" not in types else 7.5)
    if types == {"string"} and enums:
        bad = "no-such-choice"
    elif "string" in types and not enums:
        bad = [[1]] if "array" not in types else {"a": [1]}
    yield path, put, bad, "wrong type"
    for o in options:
        for bound, value in (
            ("minimum", o.get("minimum", None)),
            ("exclusiveMinimum", o.get("exclusiveMinimum")),
            ("maximum", o.get("maximum")),
            ("exclusiveMaximum", o.get("exclusiveMaximum")),
        ):
            if value is None:
                continue
            beyond = value - 1 if bound == "minimum" else value if bound.startswith("exclusive") else value + 1
            yield path, put, beyond, bound
        if o.get("minItems"):
            yield path, put, [0] * (o["minItems"] - 1) if o.get("items", {}).get("type") else [], "minItems"


def all_cases():
    schema = json_schema()
    out = []
    for key, prop in schema["properties"].items():

        def put_top(data, value, key=key):
            if key == "sources":
                data.pop("source", None)
            data[key] = value if not isinstance(value, dict) or key not in data else {**data[key], **value}

        for path, put, value, why in cases(schema, prop, key, put_top):
            out.append((path, put, value, why))
    return out


CASES = all_cases()


def test_the_walk_reaches_every_section():
    keys = {path for path, *_ in CASES}
    assert len(keys) > 150
    for key in (
        "detector.conf",
        "sources[0].reconnect.give_up_s",
        "events.zones.z1.max_people",
        "stages[0].after",
        "models.pose.max_batch",
        "runtime.metrics.port",
        "fleet.headroom",
        "threed.offsets_s.z1",
    ):
        assert key in keys, key


@pytest.mark.parametrize("index", range(0, len(CASES)), ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_every_key_refuses_what_it_cannot_take(tmp_path, capsys, index):
    path, put, value, why = CASES[index]
    data = copy.deepcopy(BASE)
    put(data, value)
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(yaml.safe_dump(data))
    code = main(["validate", str(pipeline)])
    err = capsys.readouterr().err
    assert code == 2, (path, value, why, err)
    assert len(err.strip().splitlines()) == 1 and path in err, (path, err)


def test_shipped_pipelines_follow_the_json_schema():
    schema = json_schema()
    committed = json.loads((ROOT / "docs" / "pipeline.schema.json").read_text())
    assert committed == schema  # docs/pipeline.schema.json is `sapiens2-stream schema --output ...` of this code
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    pipelines = sorted((ROOT / "pipelines").glob("*.yaml"))
    assert len(pipelines) >= 12
    for path in pipelines:
        text = path.read_text()
        assert text.splitlines()[0] == "# yaml-language-server: $schema=../docs/pipeline.schema.json", path.name
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(text))]
        assert not errors, (path.name, errors)
    wrong = {**BASE, "detector": {"conf": "high"}}
    assert list(validator.iter_errors(wrong))  # the JSON Schema refuses what `validate` refuses


def test_the_schema_command(tmp_path):
    printed = subprocess.run([sys.executable, "-m", "sapiens2_stream.cli", "schema"], capture_output=True, text=True,
                             timeout=60)  # fmt: skip
    assert printed.returncode == 0 and json.loads(printed.stdout) == json_schema()


@pytest.mark.parametrize("setting,key", [
    ("events.zones.counter.max_people=many", "events.zones.counter.max_people must be an integer"),
    ("events.zones.counter.min_s=soon", "events.zones.counter.min_s must be a number"),
    ("events.poses.falls=on", "unknown key 'events.poses.falls' (did you mean"),
])  # fmt: skip
def test_the_events_section_is_checked_at_validate(capsys, setting, key):
    code = main(["validate", str(ROOT / "pipelines" / "site_events.yaml"), "--set", setting])
    assert code == 2 and key in capsys.readouterr().err


def test_the_api_options_are_the_schema_s_too(tiny_dir):
    from sapiens2_stream.api import options_to_data
    from sapiens2_stream.errors import Sapiens2StreamError
    from sapiens2_stream.runtime.pipeline_config import config_from

    data = options_to_data(["pose", "matting"], "0.4b", None, {"temporal": True})  # documented; failed before
    cfg = config_from(data, source="walk.mp4")
    assert cfg.temporal.alpha == "on" and cfg.temporal.seg == "off"
    assert config_from(options_to_data(None, "0.4b", None, {"temporal": False}), source="w.mp4").temporal.alpha == "off"
    with pytest.raises(Sapiens2StreamError, match="unknown option 'tmporal' \\(did you mean 'temporal'\\?\\)"):
        options_to_data(None, "0.4b", None, {"tmporal": True})
    with pytest.raises(Sapiens2StreamError, match="smoothing must be one of"):
        options_to_data(None, "0.4b", None, {"smoothing": "kalmann"})


def test_the_configuration_classes_are_written_out_for_type_checkers(tmp_path):
    """`cfg.outputs.mqtt.host` for an editor: the classes assembled at import are written out in
    runtime/config_shape.py (what type checkers read), equal to what `schema --stub` makes of the sections now, and
    each of them has the fields, of the section classes, that the assembled one has."""
    import dataclasses
    import typing

    from sapiens2_stream.runtime import config_shape, pipeline_config
    from sapiens2_stream.runtime.task_sections import ModelsConfig, TemporalConfig

    assert main(["schema", "--stub", str(tmp_path / "shape.py")]) == 0
    committed = (ROOT / "sapiens2_stream" / "runtime" / "config_shape.py").read_text()
    assert (tmp_path / "shape.py").read_text() == committed, "run: sapiens2-stream schema --stub " + STUB_PATH
    assembled = {
        c.__name__: c
        for c in (
            pipeline_config.PipelineConfig,
            ModelsConfig,
            TemporalConfig,
            pipeline_config.PipelineConfig.__dataclass_fields__["outputs"].type,
        )
    }
    for name, cls in assembled.items():
        written = getattr(config_shape, name)
        own = written.__annotations__  # (as written: strings)
        inherited = {f.name for b in written.__mro__[1:] if dataclasses.is_dataclass(b) for f in dataclasses.fields(b)}
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        assert set(own) == set(fields) - inherited and inherited <= set(fields), name
        for key, tp in own.items():
            if isinstance(fields[key], type):  # a section: its class
                assert tp == fields[key].__name__, (name, key)
    mqtt = typing.get_type_hints(typing.get_type_hints(config_shape.OutputsConfig)["mqtt"])
    assert mqtt["host"] in (str, str | None)
