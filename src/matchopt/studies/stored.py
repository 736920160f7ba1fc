"""The resumable unit of the oracle-scored studies: one table per (task, seed), kept on disk.

A study trains once per task and seed and writes that run's table as ``seed<k>.csv`` with the
settings it was made with beside it (``seed<k>.settings.json``), both atomically. A rerun of the
same study reads finished tables instead of training again; a table made with other settings is
an error, so that one folder never mixes two studies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matchopt.errors import MatchoptError
from matchopt.io import atomic_write_bytes

if TYPE_CHECKING:
    import pandas as pd


def csv_bytes(frame: pd.DataFrame, index: bool = False) -> bytes:
    """A study table as CSV (six significant digits)."""
    return frame.to_csv(index=index, float_format="%.6g").encode()


def stored_or_computed(
    path: Path, settings: str, compute: Callable[..., pd.DataFrame], *args: Any, **kwargs: Any
) -> tuple[pd.DataFrame, bool]:
    """The table at ``path`` if a run with ``settings`` finished it, else
    ``compute(*args, **kwargs)`` written there. Returns the table and whether it was computed
    now.

    Raises:
        MatchoptError: ``path`` holds a table made with other settings.
    """
    import pandas as pd

    settings_path = path.with_suffix(".settings.json")
    if path.is_file():
        if not settings_path.is_file() or settings_path.read_text() != settings:
            raise MatchoptError(
                f"{path} was made with other settings than {settings}; use another --out"
            )
        return pd.read_csv(path), False
    frame = compute(*args, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(settings_path, settings.encode())
    atomic_write_bytes(path, csv_bytes(frame))
    return frame, True


def same_settings(path: Path, settings: str) -> bool:
    """Whether the table at ``path`` was made with ``settings`` (a finished run of this study)."""
    settings_path = path.with_suffix(".settings.json")
    return settings_path.is_file() and settings_path.read_text() == settings
