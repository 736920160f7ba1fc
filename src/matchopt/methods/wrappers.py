"""The decorators every method's ``fit`` and ``propose`` carry (written where they apply, in each
method's file): matchopt's thread default, and a ``fit`` that is all or nothing; and the check
that a method was fitted (:func:`is_fitted`, :func:`check_fitted`).

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


#: The learned attribute that marks a method fitted: every ``fit`` keeps the offline data it
#: learned from (searches start from its rows), and :func:`fit_all_or_nothing` removes it with
#: the rest of what was learned when a fit fails. Read only through :func:`is_fitted`.
FITTED_ATTRIBUTE = "data_"


def is_fitted(method: Any) -> bool:
    """Whether ``method`` was fitted (and its last fit did not fail)."""
    return hasattr(method, FITTED_ATTRIBUTE)


def check_fitted(method: Any) -> None:
    """Raise unless ``method`` was fitted (:func:`is_fitted`).

    Raises:
        MatchoptError: the method was not fitted (or its last fit failed).
    """
    if not is_fitted(method):
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
