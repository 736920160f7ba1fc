"""Config fields that state their own check, read by
:func:`~matchopt.methods.base.check_config`: a number's range (and why) in the field's metadata,
so that a field keeps its check whatever it is named."""

from __future__ import annotations

import math
from dataclasses import field
from typing import Any


def number(
    default: Any,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    above: bool = False,
    words: str | None = None,
) -> Any:
    """A number field in ``[low, high]`` (``> low`` when ``above``); ``words`` say why, in the
    error of a value outside (default: the range). None, where the field allows it, passes."""
    metadata: dict[str, Any] = {"range": (low, high), "above": above}
    if words:
        metadata["words"] = words
    return field(default=default, metadata=metadata)


def learning_rate(default: Any) -> Any:
    """A learning rate: > 0."""
    return number(default, 0.0, above=True, words="a learning rate must be > 0")


def scale(default: Any) -> Any:
    """A multiplier of a step size: > 0."""
    return number(default, 0.0, above=True, words="a scale must be > 0")


def step_length(default: Any) -> Any:
    """The length of a search step: > 0."""
    return number(default, 0.0, above=True, words="a step length must be > 0")


def trust_radius(default: Any) -> Any:
    """A bound on a search path's distance from its start: > 0 (None: no bound)."""
    return number(default, 0.0, above=True, words="a trust radius must be > 0 (none: no bound)")


def pessimism(default: Any) -> Any:
    """How many ensemble spreads a score subtracts: >= 0."""
    return number(default, 0.0, 10.0, words="must be in [0, 10] (0: the ensemble mean)")


def share(default: Any, high: float = 1.0) -> Any:
    """A share of the rows: in [0, high]."""
    return number(default, 0.0, high, words=f"must be in [0, {high:g}]")
