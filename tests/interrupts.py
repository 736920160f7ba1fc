"""A Ctrl-C at a chosen call, shared by the tests of runs that resume from their snapshots."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def counted(real: Callable, calls: list, kill_at: int | None = None) -> Callable:
    """``real``, wrapped: each call appends to ``calls``, and call number ``kill_at`` (never when
    None) raises KeyboardInterrupt, as a Ctrl-C there would.

    A plain function, so that it binds as a method where it replaces one on a class.
    """

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == kill_at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    return wrapper
