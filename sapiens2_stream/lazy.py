"""A package's names imported when first used: the light modules (the YAML's sections in each package's `options`)
load without pulling the package's heavy code (torch, SciPy's optimisers, OpenCV) in with them."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(package: str, table: dict[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` for `package`: each name of `table` from its module (relative, ".tracker") on first
    use."""

    def attribute(name: str) -> object:
        if name in table:
            return getattr(importlib.import_module(table[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return attribute
