"""Optimization methods behind one contract (:class:`~matchopt.methods.base.Method`).

``METHODS`` is the registry: name -> :class:`~matchopt.methods.base.MethodEntry`.
``RECOMMENDED_METHOD`` is the method the project recommends (README, "Which method should I
use?"): the default of ``matchopt optimize`` and of
:class:`~matchopt.tabular.TableOptimizer`, marked by ``matchopt methods``.
"""

from __future__ import annotations

from typing import Any

from matchopt.methods.auto import AutoChoice
from matchopt.methods.base import Method, MethodEntry, build_config
from matchopt.methods.engine import RunContext
from matchopt.methods.matchopt import MatchOpt, MatchOptConfig
from matchopt.methods.registry import SINGLE_METHODS, build_method, get_entry
from matchopt.names import RECOMMENDED_METHOD

#: Every registered method: the single ones, then the per-table choice among some of them.
METHODS: dict[str, MethodEntry] = {
    **SINGLE_METHODS,
    "auto": MethodEntry(
        AutoChoice,
        "per-table choice among matchopt-ens-mix, cma-es and ens-mean-small, judged on the "
        "table itself (pseudo-offline split)",
        kind="choice",
    ),
}


def get_method_entry(name: str) -> MethodEntry:
    """A registered method's entry (one error naming the known methods if there is none)."""
    return get_entry(name, METHODS)


def make_method(
    name: str,
    preset: str = "paper",
    overrides: dict[str, Any] | None = None,
    seed: int = 0,
    progress: bool = False,
    device: str | None = None,
) -> Method:
    """Build a registered method with a preset and ``--set``-style overrides."""
    return build_method(get_method_entry(name), preset, overrides, seed, progress, device)


__all__ = [
    "METHODS",
    "RECOMMENDED_METHOD",
    "Method",
    "MethodEntry",
    "MatchOpt",
    "MatchOptConfig",
    "RunContext",
    "build_config",
    "get_method_entry",
    "make_method",
]
