"""Checks of objects read from model files (:mod:`matchopt.state`), for the classes' own
``__matchopt_check__`` methods.

A model file is data from outside: after :mod:`matchopt.state` rebuilds an object of one of
matchopt's classes it calls the class's ``__matchopt_check__(self)``, which checks that every
attribute the class relies on is there, of the type it expects and in range (with these
helpers), so that a crafted or damaged file is refused with one line naming the attribute,
instead of a traceback later. Each helper raises :class:`~matchopt.errors.MatchoptError` with
the attribute's name and what was expected; the loader adds the file and where in the object
the attribute sits. This module imports neither torch nor the rest of matchopt.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from matchopt.errors import MatchoptError

_MISSING = object()


def describe(value: Any) -> str:
    """What ``value`` is, in a few words (never its whole text: it comes from a file)."""
    if value is None:
        return "None"
    if isinstance(value, (bool, int, float, np.integer, np.floating)):
        text = repr(value)
        return text if len(text) <= 40 else f"a number of {len(text)} characters"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a text of {len(value)} characters"
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} ({value.dtype})"
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def attribute(obj: Any, name: str) -> Any:
    """``obj.name``; a missing attribute is an error (e.g. a file of an older matchopt)."""
    value = vars(obj).get(name, _MISSING) if hasattr(obj, "__dict__") else _MISSING
    if value is _MISSING:
        raise MatchoptError(f"no attribute {name!r} (a file of another matchopt version?)")
    return value


def check_type(obj: Any, name: str, kinds: type | tuple[type, ...], *, none: bool = False) -> Any:
    """``obj.name``, an instance of ``kinds`` (or None when ``none``)."""
    value = attribute(obj, name)
    if value is None and none:
        return value
    if not isinstance(value, kinds):
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        expected = " or ".join(describe_class(k) for k in kinds) + (" or None" if none else "")
        raise MatchoptError(f"{name} is {describe(value)}, expected {expected}")
    return value


def describe_class(cls: type) -> str:
    name = cls.__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def is_int(value: Any) -> bool:
    """A whole number (Python or numpy), never a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """A real number (Python or numpy), never a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def check_int(
    obj: Any, name: str, low: int | None = None, high: int | None = None, *, none: bool = False
) -> int | None:
    """``obj.name``, a whole number in ``[low, high]`` (or None when ``none``)."""
    value = attribute(obj, name)
    if value is None and none:
        return None
    if (
        not is_int(value)
        or (low is not None and value < low)
        or (high is not None and value > high)
    ):
        span = (
            f"from {low} to {high}"
            if low is not None and high is not None
            else f">= {low}"
            if low is not None
            else ""
        )
        raise MatchoptError(
            f"{name} is {describe(value)}, expected a whole number {span}".rstrip()
            + (" or None" if none else "")
        )
    return int(value)


def check_number(
    obj: Any,
    name: str,
    low: float | None = None,
    high: float | None = None,
    *,
    above: bool = False,
    none: bool = False,
) -> float | None:
    """``obj.name``, a finite number in ``[low, high]`` (``> low`` when ``above``), or None
    when ``none``."""
    value = attribute(obj, name)
    if value is None and none:
        return None
    ok = is_number(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if above else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        span = "" if low is None else f" {'>' if above else '>='} {low}"
        span += "" if high is None else f" and <= {high}"
        raise MatchoptError(
            f"{name} is {describe(value)}, expected a finite number{span}"
            + (" or None" if none else "")
        )
    return float(value)


def check_bool(obj: Any, name: str) -> bool:
    """``obj.name``, True or False."""
    value = attribute(obj, name)
    if not isinstance(value, (bool, np.bool_)):
        raise MatchoptError(f"{name} is {describe(value)}, expected True or False")
    return bool(value)


def check_str(
    obj: Any, name: str, *, none: bool = False, choices: Collection[str] | None = None
) -> str | None:
    """``obj.name``, a text (one of ``choices`` when given; None when ``none``)."""
    value = attribute(obj, name)
    if value is None and none:
        return None
    if not isinstance(value, str) or (choices is not None and value not in choices):
        expected = "a text" if choices is None else "one of " + ", ".join(map(repr, choices))
        raise MatchoptError(
            f"{name} is {describe(value)}, expected {expected}" + (" or None" if none else "")
        )
    return value


def check_items(
    obj: Any,
    name: str,
    test: Callable[[Any], bool],
    what: str,
    *,
    kinds: tuple[type, ...] = (tuple, list),
    none: bool = False,
) -> Any:
    """``obj.name``, a tuple or list (``kinds``) whose every item passes ``test`` (``what``
    says which items are expected)."""
    value = attribute(obj, name)
    if value is None and none:
        return None
    if not isinstance(value, kinds) or not all(test(item) for item in value):
        raise MatchoptError(
            f"{name} is {describe(value)}, expected a sequence of {what}"
            + (" or None" if none else "")
        )
    return value


def check_array(
    value: Any,
    name: str,
    *,
    shape: tuple[int, ...] | None = None,
    ndim: int | None = None,
    kinds: str = "fiu",
    finite: bool = True,
) -> np.ndarray:
    """``value``, a numpy array (a number counts as a 0-d one) of a dtype kind in ``kinds``,
    with ``shape`` or ``ndim`` when given, and no NaN or infinity when ``finite``."""
    if is_number(value):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds:
        raise MatchoptError(f"{name} is {describe(value)}, expected a numeric array")
    if shape is not None and value.shape != tuple(shape):
        raise MatchoptError(f"{name} has shape {value.shape}, expected {tuple(shape)}")
    if ndim is not None and value.ndim != ndim:
        raise MatchoptError(f"{name} has shape {value.shape}, expected {ndim} dimension(s)")
    if finite and value.dtype.kind == "f" and not np.isfinite(value).all():
        raise MatchoptError(f"{name} holds NaN or infinite values")
    return value
