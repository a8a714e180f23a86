"""The documentation: the README leads a newcomer to the MkDocs site, every link resolves, the site builds with
`--strict` (a broken link or anchor fails it), and the YAML reference is the schema itself."""

import dataclasses
import re
import subprocess
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def yaml_reference() -> str:
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import yaml_reference as hook
    finally:
        sys.path.pop(0)
    return hook.reference()


def leaf_keys(cls, prefix=""):
    """Every key of the pipeline YAML's schema that holds a value (not a section), dotted."""

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f.metadata.get("alias", f.name)  # as the YAML spells it (events.lines.NAME.in)
        inner = [a for a in (hints[f.name], *typing.get_args(hints[f.name])) if dataclasses.is_dataclass(a)]
        if inner:  # a section; a mapping of sections by name (events.zones.NAME.polygon)
            each = ".NAME." if typing.get_origin(hints[f.name]) is dict else "."
            yield from leaf_keys(inner[0], f"{prefix}{key}{each}")
        else:
            yield f"{prefix}{key}", f


def test_the_yaml_reference_lists_every_key_with_its_type_default_and_meaning():
    from sapiens2_stream.runtime.pipeline_config import PipelineConfig

    rows = {}
    for line in yaml_reference().splitlines():
        m = re.match(r"^\| `([^`]+)` \| (.+?) \| (.+?) \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = m.groups()[1:]
    keys = dict(leaf_keys(PipelineConfig))
    assert set(rows) == set(keys)  # nothing missing, nothing made up
    assert "models.pose.flip" in rows and "temporal.alpha" in rows  # the sections made from the task table
    for key, (kind, default, meaning) in rows.items():
        assert kind and default and meaning.strip(), key  # every key says what it is
    assert rows["runtime.max_frame_age_s"][1] == "`1.0`" and "one of 'auto', 'block'" in rows["runtime.policy"][0]


def test_the_readme_is_short_and_every_link_resolves():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 15 and all((ROOT / link).exists() for link in local), local
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in readme  # the README's test command is exactly what CI runs
    cuda = (ROOT / "tests" / "test_cuda.py").read_text()  # every test of it marked `cuda`, none parametrized
    assert "parametrize" not in cuda and f"as the {len(re.findall(r'^def test_', cuda, re.M))} CUDA tests" in readme


def test_the_site_builds_strictly(tmp_path):
    run = subprocess.run([str(Path(sys.executable).with_name("mkdocs")), "build", "--strict", "--site-dir",
                          str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    pages = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    assert {"reference/yaml/index.html", "console/index.html", "python-api/index.html"} <= pages


def test_the_layer_table_and_the_stage_order_told_in_prose_are_the_checked_ones():
    """how-it-runs.md's layer table is import-linter's contract, row for row, and the order the stages package
    tells is `ORDER`: prose that drifted from the code once (a layer and a stage missing)."""
    import tomllib

    import sapiens2_stream.runtime.stages as stages
    from sapiens2_stream.runtime.stages.base import ORDER

    (contract,) = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    names = [{part.strip().removeprefix("sapiens2_stream.") for part in row.split("|")} for row in contract["layers"]]
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", (ROOT / "docs" / "how-it-runs.md").read_text(), re.M)
    told = {int(n): {re.match(r"\s*`([a-z_]+)(?:\.py|/)`", part)[1] for part in row.split("\\|")} for n, row in rows}
    assert [told[n] for n in sorted(told, reverse=True)] == names
    arrows = "".join(re.findall(r"->[^\n]*", stages.__doc__))
    chain = re.findall(r"-> ([a-z_0-9]+)", re.sub(r"\([^)]*\) ", "", arrows))
    assert ["take", *chain] == list(ORDER)
