"""The paper's published numbers, to put beside measured ones (never in place of them).

The data file ``published_data/matchopt_icml2024.csv`` holds the normalized scores of Hoang et
al., "Learning Surrogates for Offline Black-Box Optimization via Gradient Matching" (ICML 2024),
Tables 1-8 (100th and 50th percentiles; mean and std over 4 runs where the paper gives a std),
with matchopt's task and method names. ``matchopt report`` shows them as "published" columns.
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources

import pandas as pd

from matchopt.errors import MatchoptError, printable

#: Where the numbers come from, in words (printed under every table that shows them).
SOURCE = "Hoang et al., ICML 2024, Tables 1-8; mean and std over 4 runs"
DATA_FILE = "published_data/matchopt_icml2024.csv"


#: The data file's columns.
COLUMNS = ("table", "percentile", "method", "task", "mean", "std", "note")


@lru_cache(maxsize=1)
def published_scores() -> pd.DataFrame:
    """Columns table, percentile, method, task, mean, std (NaN where not given), note.

    Raises:
        MatchoptError: the data file is missing or malformed (an edited or broken install),
            naming the file.
    """
    path = resources.files("matchopt").joinpath(DATA_FILE)
    try:
        with path.open("r", encoding="utf-8") as handle:
            frame = pd.read_csv(handle, comment="#")
        missing = [c for c in COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"no column {', '.join(missing)}")
        frame = frame.astype({"percentile": "float64", "mean": "float64", "std": "float64"})
    except (OSError, ValueError) as err:  # pandas' parser errors and UTF-8 errors included
        lines = str(err).strip().splitlines()
        reason = printable(lines[0] if lines else type(err).__name__)
        raise MatchoptError(
            f"{path}: not a readable table of published numbers ({reason}); reinstall matchopt"
        ) from None
    return frame


def published_cell(q: float, method: str, task: str) -> str | None:
    """The published score of ``method`` on ``task`` at percentile ``q`` as text
    (``0.977 ± 0.004``, ``0.941`` without a std, ``OOM``), or None where the paper has none."""
    frame = published_scores()
    rows = frame[
        (frame["percentile"] == float(q)) & (frame["method"] == method) & (frame["task"] == task)
    ]
    if rows.empty:
        return None
    row = rows.iloc[0]
    if isinstance(row["note"], str) and row["note"]:
        return "OOM" if row["note"] == "out of memory" else row["note"]
    if math.isnan(row["std"]):
        return f"{row['mean']:.3f}"
    return f"{row['mean']:.3f} ± {row['std']:.3f}"


def published_tasks(q: float) -> set[str]:
    """Tasks with published numbers at percentile ``q``."""
    frame = published_scores()
    return set(frame.loc[frame["percentile"] == float(q), "task"])
