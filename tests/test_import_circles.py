"""No import circle in the package: every import counts, also those under `typing.TYPE_CHECKING` and those inside
functions (a circle there is a dependency the layers hide; the runtime had two, batch_path -> take -> batch_path and
the configuration's, until issue 73)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "sapiens2_stream"


def imports() -> dict[str, set[str]]:
    """Each module of the package (dotted) -> the package's modules it imports, wherever in the file."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def module_of(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                origin = ".".join([*base, *([node.module] if node.module else [])])
                names = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin for a in node.names]
            else:
                continue
            graph[module] |= {t for n in names if n.startswith("sapiens2_stream") and (t := module_of(n)) != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while (member := stack.pop()) != node:
                    part.append(member)
                part.append(node)
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def test_the_package_has_no_import_circle():
    assert circles(imports()) == []


def test_the_circle_finder_finds_one():
    """The check can fail: a circle through a function-local import is found."""
    graph = imports()
    graph["sapiens2_stream.runtime.flow"].add("sapiens2_stream.runtime.frame_path")  # as `from . import frame_path`
    pair = {"sapiens2_stream.runtime.flow", "sapiens2_stream.runtime.frame_path"}
    assert any(pair <= set(circle) for circle in circles(graph)), circles(graph)


def test_imports_inside_functions_and_type_checking_blocks_count():
    graph = imports()
    assert "sapiens2_stream.registry" in graph["sapiens2_stream.runtime.stages.context"]  # inside a function
    assert "sapiens2_stream.runtime.config_shape" in graph["sapiens2_stream.runtime.task_sections"]  # TYPE_CHECKING
