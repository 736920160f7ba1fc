"""Load a script of ``benchmarks/`` as a module, for the tests of its functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str, module_name: str | None = None) -> ModuleType:
    """``benchmarks/<name>.py`` as a fresh module (``module_name``: its ``__name__``, default
    ``name``), not registered in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(module_name or name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
