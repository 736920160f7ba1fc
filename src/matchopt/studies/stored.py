"""The resumable unit of the oracle-scored studies: one table per (task, seed), kept on disk.

A study trains once per task and seed and writes that run's table as ``seed<k>.csv`` with the
settings it was made with beside it (``seed<k>.settings.json``), both atomically and without
following a link below the study's folder (:mod:`matchopt.safe_paths`). A rerun of the same study
reads finished tables instead of training again; a table made with other settings is an error, so
that one folder never mixes two studies.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matchopt.errors import MatchoptError
from matchopt.safe_paths import read_below, write_below

#: Largest study table read back (a task and seed's table: kilobytes).
MAX_TABLE_BYTES = 2**30

if TYPE_CHECKING:
    import pandas as pd


def csv_bytes(frame: pd.DataFrame, index: bool = False) -> bytes:
    """A study table as CSV (six significant digits)."""
    return frame.to_csv(index=index, float_format="%.6g").encode()


def stored_or_computed(
    root: Path,
    path: Path,
    settings: str,
    compute: Callable[..., pd.DataFrame],
    *args: Any,
    **kwargs: Any,
) -> tuple[pd.DataFrame, bool]:
    """The table at ``path`` (inside the study's folder ``root``) if a run with ``settings``
    finished it, else ``compute(*args, **kwargs)`` written there. Returns the table and whether
    it was computed now.

    Raises:
        MatchoptError: ``path`` holds a table made with other settings, or a folder on its way
            below ``root`` is a link.
    """
    import pandas as pd

    table = read_below(root, path, MAX_TABLE_BYTES, "study table")
    if table is not None:
        if not same_settings(root, path, settings):
            raise MatchoptError(
                f"{path} was made with other settings than {settings}; use another --out"
            )
        return pd.read_csv(io.BytesIO(table)), False
    frame = compute(*args, **kwargs)
    write_below(root, path.with_suffix(".settings.json"), settings.encode())
    write_below(root, path, csv_bytes(frame))
    return frame, True


def same_settings(root: Path, path: Path, settings: str) -> bool:
    """Whether the table at ``path`` was made with ``settings`` (a finished run of this study)."""
    try:
        saved = read_below(root, path.with_suffix(".settings.json"), 2**20, "study settings")
    except MatchoptError:
        return False
    return saved is not None and saved == settings.encode()
