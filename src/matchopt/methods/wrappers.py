"""The decorators every method's ``fit`` and ``propose`` carry (written where they apply, in each
method's file): matchopt's thread default, and a ``fit`` that is all or nothing; and the check
that a method was fitted (:func:`check_fitted`).

    class MyMethod(Method):
        @fit_all_or_nothing
        def fit(self, data): ...

        @in_default_threads
        def propose(self, n=128): ...
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from matchopt.errors import MatchoptError
from matchopt.runtime import default_threads_unless_chosen

M = TypeVar("M")


def forget_learned(method: Any) -> None:
    """Delete what ``fit`` learned (:func:`_learned_names`)."""
    for name in _learned_names(method):
        delattr(method, name)


def check_fitted(method: Any) -> None:
    """Raise unless ``method`` was fitted (it holds its offline data, ``data_``).

    Raises:
        MatchoptError: the method was not fitted (or its last fit failed).
    """
    if not hasattr(method, "data_"):
        raise MatchoptError(f"{type(method).__name__} must be fitted before propose()")


def _learned_names(method: Any) -> list[str]:
    return [k for k in vars(method) if k.endswith("_") and not k.startswith("_")]


def in_default_threads(function: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator of a method's ``propose`` (and, through :func:`fit_all_or_nothing`, ``fit``):
    it runs with matchopt's thread default
    (:func:`~matchopt.runtime.default_threads_unless_chosen`) unless the caller chose threads."""

    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with default_threads_unless_chosen():
            return function(*args, **kwargs)

    return wrapped


def fit_all_or_nothing(fit: Callable[..., M]) -> Callable[..., M]:
    """Decorator of a method's ``fit``: it starts from no learned state and leaves none when it
    fails, and runs with matchopt's thread default (:func:`in_default_threads`).

    Without this a refit that fails midway would leave the old model beside the new data's
    encoder, or an untrained generator that passes the fitted check, and ``propose`` would
    return designs from it. A ``fit`` calling its parent's ``fit`` is wrapped once (depth
    count), so the parent does not erase what the child set before calling it.
    """

    @functools.wraps(fit)
    @in_default_threads
    def wrapped(self: M, *args: Any, **kwargs: Any) -> M:
        outermost = not self.__dict__.get("_fit_depth", 0)
        if outermost:
            forget_learned(self)
        self._fit_depth = self.__dict__.get("_fit_depth", 0) + 1
        try:
            return fit(self, *args, **kwargs)
        except BaseException:
            if outermost:
                forget_learned(self)
            raise
        finally:
            self._fit_depth -= 1
            if not self._fit_depth:
                del self._fit_depth

    return wrapped
