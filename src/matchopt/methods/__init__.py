"""Optimization methods behind one contract (:class:`~matchopt.methods.base.Method`).

``METHODS`` is the registry: name -> :class:`~matchopt.methods.base.MethodEntry`.
"""

from __future__ import annotations

from typing import Any

from matchopt.errors import MatchoptError
from matchopt.methods.base import Method, MethodEntry, build_config
from matchopt.methods.matchopt import MatchOpt, MatchOptConfig

METHODS: dict[str, MethodEntry] = {
    "matchopt": MethodEntry(MatchOpt, "MATCH-OPT: gradient-matching surrogate + gradient ascent"),
    "matchopt-noreg": MethodEntry(
        MatchOpt, "MATCH-OPT without the value regularizer (ablation, alpha = 0)", {"alpha": 0.0}
    ),
}


def get_method_entry(name: str) -> MethodEntry:
    if name not in METHODS:
        raise MatchoptError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}")
    return METHODS[name]


def make_method(
    name: str,
    preset: str = "paper",
    overrides: dict[str, Any] | None = None,
    seed: int = 0,
    progress: bool = False,
) -> Method:
    """Build a registered method with a preset and ``--set``-style overrides."""
    entry = get_method_entry(name)
    config = build_config(entry, preset, overrides or {})
    return entry.cls(config, seed=seed, progress=progress)


__all__ = ["METHODS", "Method", "MethodEntry", "MatchOpt", "MatchOptConfig", "make_method"]
