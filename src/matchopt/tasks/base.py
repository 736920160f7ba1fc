"""Tasks: an offline dataset plus an exact oracle. Every task maximizes its score.

A task keeps the data a method may see (:attr:`Task.offline`) apart from the oracle
(:meth:`Task.score`), which is only called on designs a method has already returned.
Normalized scores use the min and max of the task's FULL dataset (protocol.md).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

import numpy as np

from matchopt.data import DesignSpace, OfflineData
from matchopt.errors import MatchoptError
from matchopt.names import DATA_DIR_ENV
from matchopt.safe_paths import as_path


def default_data_dir() -> Path:
    """The user cache folder: ``$XDG_CACHE_HOME/matchopt/design_bench``, else
    ``~/.cache/matchopt/design_bench`` (where ``matchopt data fetch`` puts files by default)."""
    cache = os.environ.get("XDG_CACHE_HOME")
    base = Path(cache).expanduser() if cache else Path.home() / ".cache"
    return base / "matchopt" / "design_bench"


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path:
    """``data_dir`` if given, else ``$MATCHOPT_DATA_DIR``, else :func:`default_data_dir`.

    Raises:
        TypeError: ``data_dir`` is not None, a str or an os.PathLike.
    """
    if data_dir is not None:
        return as_path(data_dir, "data_dir").expanduser()
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env).expanduser() if env else default_data_dir()


def describe_files(paths: list[Path], data_dir: Path | None = None, limit: int = 6) -> str:
    """Paths (relative to ``data_dir`` where inside it) for a one-line message; past ``limit``
    names, the rest are counted by folder so a message stays readable for 168 shards."""
    rel = []
    for p in paths:
        p = Path(p)
        if data_dir is not None and p.is_relative_to(data_dir):
            p = p.relative_to(data_dir)
        rel.append(p.as_posix())
    if len(rel) <= limit:
        return ", ".join(rel)
    rest: dict[str, int] = {}
    for name in rel[limit:]:
        folder = name.rsplit("/", 1)[0] + "/" if "/" in name else "./"
        rest[folder] = rest.get(folder, 0) + 1
    more = ", ".join(f"{n} more in {folder}" for folder, n in rest.items())
    return f"{', '.join(rel[:limit])} and {more}"


#: How far (in spans of the offline data) a continuous design may lie from the data and still
#: be scored (:meth:`Task.domain`).
DOMAIN_SPANS = 1e4


class Task(ABC):
    """Base class of tasks.

    Subclasses set the class attributes and implement :meth:`_load` (returning the full x and
    y, and the offline x and y) and :meth:`_score`.

    Args:
        data_dir: folder with design-bench files (tasks that need files); defaults to
            ``$MATCHOPT_DATA_DIR``, else the user cache folder (:func:`default_data_dir`).

    Attributes:
        offline: the offline dataset methods are fitted on.
        y_min, y_max: min and max of y over the full dataset, for normalized scores.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    space: ClassVar[DesignSpace]
    #: Rows in the offline set (documented size; checked by the tests).
    offline_size: ClassVar[int]
    #: True for tasks built in memory that need no files.
    embedded: ClassVar[bool] = False
    #: The task's name in design-bench (``TFBind8-Exact-v0``), where it has one: commands and
    #: :func:`matchopt.design_bench.make` accept it for :attr:`name`. Declared by the class
    #: itself (a subclass that is another task does not inherit it).
    design_bench_name: ClassVar[str | None] = None

    def __init__(self, data_dir: str | os.PathLike | None = None):
        self.data_dir = resolve_data_dir(data_dir)
        if not self.embedded:
            missing = self.missing_files(self.data_dir)
            if missing:
                raise MatchoptError(self.missing_message(self.data_dir, missing))
        x_offline, y_offline, y_full = self._load()
        self.offline = OfflineData(x_offline, y_offline, self.space)
        self.y_min = float(np.min(y_full))
        self.y_max = float(np.max(y_full))

    @classmethod
    def required_files(cls, data_dir: Path | None) -> list[Path]:
        """Files the task reads (relative to ``data_dir`` when it is ``None``)."""
        return []

    @classmethod
    def missing_files(cls, data_dir: str | os.PathLike | None) -> list[Path]:
        """Required files absent from ``data_dir`` (resolved as :func:`resolve_data_dir`)."""
        if cls.embedded:
            return []
        return [p for p in cls.required_files(resolve_data_dir(data_dir)) if not p.is_file()]

    @classmethod
    def data_status(cls, data_dir: str | os.PathLike | None = None) -> str:
        """``"embedded"``, ``"present"`` or ``"missing"``."""
        if cls.embedded:
            return "embedded"
        return "missing" if cls.missing_files(data_dir) else "present"

    @classmethod
    def missing_message(
        cls, data_dir: str | os.PathLike | None, missing: list[Path] | None = None
    ) -> str:
        """One line naming the missing files (default: all missing ones) and how to get them."""
        folder = resolve_data_dir(data_dir)
        if missing is None:
            missing = cls.missing_files(folder)
        # The fetch command reaches the same folder only if it is the one it resolves to itself.
        option = "" if folder == resolve_data_dir(None) else f" --data-dir {folder}"
        hint = cls._nearby_data_hint(folder)
        return (
            f"task {cls.name!r}: {len(missing)} data file(s) not found in {folder}: "
            f"{describe_files(missing, folder)}; run `matchopt data fetch {cls.name}{option}` "
            f"or place the files by hand in {folder}{hint}"
        )

    @classmethod
    def _nearby_data_hint(cls, folder: Path) -> str:
        """Where the files are, if the data folder given is one level off (its parent, or the
        task's own subfolder): a hint for the message, else ''."""
        wanted = cls.required_files(None)
        if not wanted:
            return ""
        candidates = [p for p in folder.glob("*/") if p.is_dir()] if folder.is_dir() else []
        candidates.append(folder.parent)
        for place in candidates:
            if all((place / f).is_file() for f in wanted):
                return f" (they are in {place}: set --data-dir or ${DATA_DIR_ENV} to that folder)"
        return ""

    @abstractmethod
    def _load(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return (offline x, offline y, full y)."""

    @abstractmethod
    def _score(self, designs: np.ndarray) -> np.ndarray:
        """Oracle values (n,) of validated designs."""

    def score(self, designs: np.ndarray) -> np.ndarray:
        """Exact oracle values (n,) of designs (n x shape) in the task's format.

        The one place the oracle is called: designs outside the task's space (tokens outside
        the vocabulary; continuous values outside :meth:`domain`) are refused, whatever made
        them, and never scored.

        Raises:
            MatchoptError: naming the first design, coordinate and value outside the space.
        """
        designs = self.space.validate(designs)
        if not self.space.is_discrete:
            low, high = self.domain()
            outside = (designs < low) | (designs > high)
            if outside.any():
                row, col = np.argwhere(outside.reshape(len(designs), -1))[0]
                value = float(designs.reshape(len(designs), -1)[row, col])
                raise MatchoptError(
                    f"design {row}, coordinate {col} is {value:g}, outside the space of task "
                    f"{self.name!r} ([{low.flat[col]:g}, {high.flat[col]:g}]: the offline data's "
                    f"range widened by {DOMAIN_SPANS:g} times its span); not scored"
                )
        return np.asarray(self._score(designs), dtype=np.float64).reshape(-1)

    def measured(self, designs: np.ndarray) -> np.ndarray | None:
        """True (n,) where the oracle measured the design, for tasks whose oracle is a table with
        gaps (a gap scores the table's minimum); ``None``: the oracle scores every design."""
        return None

    def domain(self) -> tuple[np.ndarray, np.ndarray]:
        """The bounds (low, high, each of one design's shape) of a continuous task's space: the
        offline data's range of each coordinate widened by :data:`DOMAIN_SPANS` times its span
        (at least 1) on each side. A search may leave the data's box, and the oracle scores
        such designs; a design thousands of spans away is no design of the task (the farthest
        any method went in the recorded runs: about 1,100 spans, CMA-ES on hartmann6)."""
        x = self.offline.x
        low, high = x.min(axis=0).astype(np.float64), x.max(axis=0).astype(np.float64)
        span = np.maximum(high - low, 1.0)
        return low - DOMAIN_SPANS * span, high + DOMAIN_SPANS * span

    def offline_best(self) -> float:
        """The normalized score of the best offline design (what a method's designs must beat).

        The best offline row's; tasks whose offline rows are noisy measurements override it with
        the noiseless value of the best design measured."""
        return float(self.normalize(self.offline.y.max()))

    def normalize(self, y: np.ndarray) -> np.ndarray:
        """Normalized scores ``(y - y_min) / (y_max - y_min)`` with the full-data min and max."""
        return (np.asarray(y, dtype=np.float64) - self.y_min) / (self.y_max - self.y_min)
