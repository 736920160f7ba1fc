"""Offline datasets: the only thing a method ever sees.

A method is fitted on an :class:`OfflineData` (designs ``x``, scores ``y``, and the
:class:`DesignSpace` they live in). It never sees a task or an oracle, so the same method runs on
a registered benchmark task and on a user's own table. Scores are always maximized.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from matchopt.errors import MatchoptError
from matchopt.state_checks import check_int, check_items, is_int


@dataclass(frozen=True)
class DesignSpace:
    """What a design is.

    Attributes:
        kind: ``"continuous"`` (a vector of floats) or ``"discrete"`` (a sequence of tokens).
        shape: shape of one design: ``(d,)`` floats or ``(length,)`` tokens.
        vocab_size: number of token values for discrete designs (tokens are ``0..vocab_size-1``).
    """

    kind: str
    shape: tuple[int, ...]
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("continuous", "discrete"):
            raise MatchoptError(f"design kind must be continuous or discrete, got {self.kind!r}")
        if self.kind == "discrete" and (self.vocab_size is None or self.vocab_size < 2):
            raise MatchoptError("a discrete design space needs vocab_size >= 2")

    def __matchopt_check__(self) -> None:
        """Checks of a space read from a model file (:mod:`matchopt.state`)."""
        check_items(
            self, "shape", lambda s: is_int(s) and s >= 1, "whole numbers >= 1", kinds=(tuple,)
        )
        if len(self.shape) != 1:
            raise MatchoptError(f"shape is {self.shape}, expected one dimension")
        check_int(self, "vocab_size", 2, none=not self.is_discrete)

    @classmethod
    def continuous(cls, dim: int) -> DesignSpace:
        return cls("continuous", (int(dim),))

    @classmethod
    def discrete(cls, length: int, vocab_size: int) -> DesignSpace:
        return cls("discrete", (int(length),), int(vocab_size))

    @property
    def is_discrete(self) -> bool:
        return self.kind == "discrete"

    @property
    def dtype(self) -> np.dtype:
        """The dtype designs of this space are returned in."""
        return np.dtype(np.int64) if self.is_discrete else np.dtype(np.float32)

    def describe(self) -> str:
        if self.is_discrete:
            return f"{self.shape[0]} tokens of {self.vocab_size}"
        return f"{self.shape[0]} floats"

    def validate(self, designs: np.ndarray, what: str = "designs") -> np.ndarray:
        """Check that ``designs`` (n x shape) belong to this space; return them in its dtype."""
        designs = np.asarray(designs)
        if designs.ndim != 1 + len(self.shape) or designs.shape[1:] != self.shape:
            raise MatchoptError(
                f"{what} must have shape (n, {', '.join(map(str, self.shape))}), "
                f"got {designs.shape}"
            )
        if self.is_discrete:
            if not np.issubdtype(designs.dtype, np.integer):
                raise MatchoptError(f"{what} must be integer tokens, got dtype {designs.dtype}")
            bad = (designs < 0) | (designs >= self.vocab_size)
            if bad.any():
                row, col = np.argwhere(bad)[0]
                raise MatchoptError(
                    f"{what}: token {designs[row, col]} at row {row}, position {col} is outside "
                    f"0..{self.vocab_size - 1}"
                )
            return designs.astype(self.dtype, copy=False)
        if designs.dtype.kind not in "biuf":
            raise MatchoptError(f"{what} must be real numbers, got dtype {designs.dtype}")
        # Checked after the cast: a float64 beyond float32's range would become inf there.
        with np.errstate(over="ignore"):
            cast = designs.astype(self.dtype, copy=False)
        finite = np.isfinite(cast)
        if not finite.all():
            row, col = np.argwhere(~finite)[0]
            raise MatchoptError(
                f"{what}: row {row}, column {col} is {float(designs[row, col])}: NaN, infinite or "
                f"beyond float32's range"
            )
        return cast


@dataclass(frozen=True)
class OfflineData:
    """Designs measured once, offline: ``x`` (n x shape) and their scores ``y`` (n,).

    Higher ``y`` is better everywhere in matchopt.
    """

    x: np.ndarray
    y: np.ndarray
    space: DesignSpace

    def __post_init__(self) -> None:
        x = self.space.validate(self.x, "offline designs x")
        y = np.asarray(self.y, dtype=np.float64).reshape(-1)
        if len(y) != len(x):
            raise MatchoptError(f"x has {len(x)} rows but y has {len(y)}")
        if not np.isfinite(y).all():
            raise MatchoptError(f"y row {int(np.argwhere(~np.isfinite(y))[0][0])} is NaN or inf")
        # Owned, read-only arrays: one task's data serves every cell of a bench worker, so a
        # method writing into it would change what the next cells see; now it raises instead.
        # The caller's arrays are copied, never frozen.
        for name, array in (("x", x), ("y", y)):
            if np.shares_memory(array, getattr(self, name)) or not array.flags.owndata:
                array = array.copy()
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    def __len__(self) -> int:
        return len(self.y)

    def top_k(self, k: int) -> np.ndarray:
        """Indices of the ``k`` highest-scoring rows, best first (ties broken by row order)."""
        return top_rows(self.y, k)

    def replicates_averaged(self) -> OfflineData:
        """One row per distinct design, its score the mean of its rows (a table of replicated
        measurements: the mean of r replicates has 1/r of one measurement's noise variance).
        Designs keep the order of their first row; a table of distinct designs is returned
        as it is."""
        flat = self.x.reshape(len(self.x), -1)
        _, first, inverse = np.unique(flat, axis=0, return_index=True, return_inverse=True)
        if len(first) == len(self.y):
            return self
        inverse = inverse.reshape(-1)
        means = np.bincount(inverse, weights=self.y) / np.bincount(inverse)
        order = np.argsort(first, kind="stable")  # designs in the order they first appear
        return OfflineData(self.x[first[order]], means[order], self.space)


def top_rows(y: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values of ``y``, largest first (ties broken by row order).

    The one definition of "the top k": RoMA pairs starts and targets chosen by it."""
    return np.argsort(-np.asarray(y), kind="stable")[:k]


def design_groups(x: np.ndarray) -> np.ndarray:
    """Group ids (n,) of the rows of ``x`` (n x shape): rows equal after flattening (replicates
    of one design) share an id; ids are numbered 0, 1, ... in the order the designs first
    appear, so a table without repeats gets ``arange(n)``."""
    x = np.asarray(x)
    if len(x) == 0:
        return np.zeros(0, dtype=np.int64)
    flat = x.reshape(len(x), -1)
    _, first, inverse = np.unique(flat, axis=0, return_index=True, return_inverse=True)
    renumber = np.empty(len(first), dtype=np.int64)
    renumber[np.argsort(first, kind="stable")] = np.arange(len(first))
    return renumber[inverse.reshape(-1)]
