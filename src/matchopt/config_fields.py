"""Method configs: fields that state their own check, and the checks that read them.

A field declares what it means in its dataclass metadata: its range (and why) with
:func:`number` and the kinds built on it, a count with :func:`count` (or :func:`optional_count`),
layer widths with :func:`widths`, or its choices (``metadata={"choices": ...}``), so that it keeps
its check whatever it is named or typed. :func:`check_config` and :func:`check_config_types` read
them; :func:`undeclared_fields` names the numeric fields that declare nothing.
:func:`convert_option` and :func:`parse_set_options` turn ``--set key=value`` text into values.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import field
from typing import Any, get_type_hints

import numpy as np

from matchopt.errors import ConfigError, MatchoptError
from matchopt.state_checks import describe, is_int, is_number

#: The metadata keys by which a config field declares what it means.
DECLARATIONS = frozenset({"kind", "range", "choices"})


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


def count(default: Any, minimum: int = 1) -> Any:
    """A count: an integer >= ``minimum``."""
    return field(default=default, metadata={"kind": "count", "minimum": minimum})


def optional_count(default: Any = None, minimum: int = 1) -> Any:
    """A count that may be left unset: None, or an integer >= ``minimum``."""
    return field(default=default, metadata={"kind": "count", "minimum": minimum, "optional": True})


def widths(default: Any) -> Any:
    """Layer widths: a tuple of integers, each >= 1."""
    return field(default=default, metadata={"kind": "widths"})


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


def by_design_type(value: Any, is_discrete: bool, if_discrete: Any, if_continuous: Any) -> Any:
    """``value`` when set, else the default for the design type (config fields left None).

    E.g. search step sizes: logits of tokens take larger steps than z-scored floats.
    """
    if value is not None:
        return value
    return if_discrete if is_discrete else if_continuous


def config_choices(config_class: type) -> dict[str, tuple]:
    """Field name -> allowed values, for fields declared with ``metadata={"choices": ...}``."""
    return {
        f.name: f.metadata["choices"]
        for f in dataclasses.fields(config_class)
        if "choices" in f.metadata
    }


def convert_option(value: Any, hint: Any, key: str) -> Any:
    """Convert a ``--set`` string to the type of config field ``key`` (its type hint ``hint``):
    bool, int, float, a tuple of ints (text separated by commas), each or None (``none``); text
    for other types."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    base, allows_none = _without_none(hint)
    optional = " (or none)" if allows_none else ""
    if text.lower() == "none" and allows_none:
        return None
    if base is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(key, value, f"{value!r} is not true or false")
    readers = (
        (base is tuple or typing.get_origin(base) is tuple,
         lambda: tuple(int(v) for v in text.split(",") if v.strip()),
         "integers separated by commas"),
        (base is int, lambda: int(text), "an integer"),
        (base is float, lambda: float(text), "a number"),
    )  # fmt: skip
    for applies, read, words in readers:
        if applies:
            try:
                return read()
            except ValueError:
                raise ConfigError(key, value, f"{value!r} is not {words}{optional}") from None
    return text


def _without_none(hint: Any) -> tuple[Any, bool]:
    """The type ``hint`` names, None left out (``int | None`` -> int), and whether it allows
    None; a union of several other types stays as it is."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
        others = tuple(a for a in args if a is not type(None))
        return (others[0] if len(others) == 1 else hint), type(None) in args
    return hint, False


def check_config(config: Any, allow_zero_counts: bool = False) -> None:
    """Refuse values no method can run with, naming the field and its allowed range.

    Only what a field declares in its metadata is checked, never what its type or name suggests:
    a :func:`count` (or :func:`optional_count`) is an integer >= its minimum; :func:`widths` are
    >= 1; a field that states its range (:func:`number` and the kinds built on it: learning
    rates, step lengths, trust radii, pessimism, shares, ...) is in it. Every float is finite.
    ``allow_zero_counts`` lowers every count's minimum to 0 (configs built in code, e.g. an
    untrained model for a test); negative counts are always refused.

    Raises:
        ConfigError: the first field out of range.
    """
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if value is None or isinstance(value, (bool, str)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f.name, value, "must be a finite number")
        if "range" in f.metadata:  # a field that states its own range
            low, high = f.metadata["range"]
            above = f.metadata.get("above", False)
            if not ((value > low if above else value >= low) and value <= high):
                shown = f"> {low:g}" if above and high == math.inf else f"in [{low:g}, {high:g}]"
                raise ConfigError(f.name, value, f.metadata.get("words", f"must be {shown}"))
        kind = f.metadata.get("kind")
        if kind == "count" and isinstance(value, int):
            low = 0 if allow_zero_counts else f.metadata.get("minimum", 1)
            if value < low:
                raise ConfigError(f.name, value, f"must be an integer >= {low}")
        elif kind == "widths" and isinstance(value, tuple):
            if all(isinstance(v, int) for v in value) and any(v < 1 for v in value):
                raise ConfigError(f.name, ",".join(map(str, value)), "widths must be >= 1")


def undeclared_fields(config_class: type) -> list[str]:
    """The numeric fields of ``config_class`` (int, int or None, tuples of ints) that declare
    no kind (:func:`count`, :func:`optional_count`, :func:`widths`), range (:func:`number`) or
    choices: the config checks would not check them."""
    hints = get_type_hints(config_class)
    return [
        f.name
        for f in dataclasses.fields(config_class)
        if _is_numeric(hints.get(f.name, Any)) and not DECLARATIONS & f.metadata.keys()
    ]


def _is_numeric(hint: Any) -> bool:
    """Whether a config field type is an int, a tuple of ints, or either or None."""
    base, _ = _without_none(hint)
    if typing.get_origin(base) is tuple:
        return all(arg in (int, Ellipsis) for arg in typing.get_args(base))
    return base is int


def check_config_types(config: Any) -> None:
    """Refuse a config field whose value is not of the field's type (or not among its choices),
    e.g. in a config read from a model file, where no ``--set`` parsing converted it.

    Raises:
        ConfigError: the first such field.
    """
    hints = get_type_hints(type(config))
    choices = config_choices(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if not _of_type(value, hints.get(f.name, Any)):
            hint = hints[f.name]
            expected = hint.__name__ if isinstance(hint, type) else str(hint)
            raise ConfigError(f.name, None, f"is {describe(value)}, expected {expected}")
        if f.name in choices and value not in choices[f.name]:
            raise ConfigError(
                f.name,
                None,
                f"is {describe(value)}; choose one of {', '.join(map(str, choices[f.name]))}",
            )


def _of_type(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the config field type ``hint`` (bool, int, float, str, a tuple of
    ints, and those or None); other types are not checked."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_of_type(value, option) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, (bool, np.bool_))
    if hint is int:
        return is_int(value)
    if hint is float:
        return is_number(value)
    if hint is str:
        return isinstance(value, str)
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return isinstance(value, tuple) and all(_of_type(v, args[0]) for v in value)
        return isinstance(value, tuple)
    return True


def parse_set_options(items: list[str] | None) -> dict[str, str]:
    """``["epochs=10", "lr=1e-3"]`` -> ``{"epochs": "10", "lr": "1e-3"}`` with clear errors."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise MatchoptError(f"malformed --set {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out
