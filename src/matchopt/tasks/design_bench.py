"""Tasks read from design-bench data files (layout in docs: ``<folder>/<prefix>-{x,y}-<k>.npy``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from matchopt.data import DesignSpace
from matchopt.errors import MatchoptError
from matchopt.tasks.base import Task


def shard_paths(data_dir: Path | None, folder: str, prefix: str, n_shards: int) -> list[Path]:
    """x and y shard paths, in shard order: [x-0, y-0, x-1, y-1, ...]."""
    base = Path(data_dir or ".") / folder
    return [base / f"{prefix}-{axis}-{k}.npy" for k in range(n_shards) for axis in ("x", "y")]


def load_shards(paths: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate x and y shards (paths as from :func:`shard_paths`) into (x, y of shape (N,))."""
    try:
        xs = [np.load(p) for p in paths[0::2]]
        ys = [np.load(p) for p in paths[1::2]]
    except (OSError, ValueError) as err:
        raise MatchoptError(f"cannot read design-bench file: {err}") from None
    for px, x, py, y in zip(paths[0::2], xs, paths[1::2], ys):
        if len(x) != len(y):
            raise MatchoptError(f"{px} has {len(x)} rows but {py} has {len(y)}")
    return np.concatenate(xs), np.concatenate(ys).reshape(-1)


def offline_mask(y_full: np.ndarray, max_percentile: float) -> np.ndarray:
    """Rows kept in the offline set: ``y <= percentile(y_full, max_percentile)`` (design-bench)."""
    return y_full <= np.percentile(y_full, max_percentile)


class SequenceLookupOracle:
    """Exact oracle of a table of token sequences: the y of the sequence's LAST occurrence.

    A sequence of L tokens of K values is the base-K integer ``sum_i s_i K^(L-1-i)``, so scoring
    is one vectorized index into a table.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, vocab_size: int):
        self.vocab_size = vocab_size
        self.length = x.shape[1]
        self.weights = vocab_size ** np.arange(self.length - 1, -1, -1, dtype=np.int64)
        codes = self.encode(x)
        # np.unique on the reversed codes gives each code's first index there = last in x.
        unique, first_in_reversed = np.unique(codes[::-1], return_index=True)
        self.codes = unique
        self.values = y[::-1][first_in_reversed]

    def encode(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.int64) @ self.weights

    def __call__(self, designs: np.ndarray) -> np.ndarray:
        codes = self.encode(designs)
        pos = np.searchsorted(self.codes, codes)
        pos = np.minimum(pos, len(self.codes) - 1)
        found = self.codes[pos] == codes
        if not found.all():
            row = int(np.argwhere(~found)[0][0])
            raise MatchoptError(f"design {designs[row].tolist()} is not in the oracle's table")
        return self.values[pos]


class TFBind8(Task):
    """TF-Bind-8 (design-bench TFBind8-Exact-v0): 8-mers of DNA binding SIX6_REF_R1.

    Offline set: rows with y <= the 50th percentile of the full data (32,898 of 65,792).
    Oracle: exact lookup over the full data.
    """

    name = "tfbind8"
    summary = "DNA 8-mers, transcription-factor binding (SIX6_REF_R1); exact lookup oracle"
    space = DesignSpace.discrete(8, 4)
    offline_size = 32_898
    folder, prefix, n_shards, max_percentile = "tf_bind_8-SIX6_REF_R1", "tf_bind_8", 1, 50.0

    @classmethod
    def required_files(cls, data_dir: Path | None) -> list[Path]:
        return shard_paths(data_dir, cls.folder, cls.prefix, cls.n_shards)

    def _load(self):
        x, y = load_shards(self.required_files(self.data_dir))
        self._oracle = SequenceLookupOracle(x, y, self.space.vocab_size)
        keep = offline_mask(y, self.max_percentile)
        return x[keep].astype(np.int64), y[keep], y

    def _score(self, designs: np.ndarray) -> np.ndarray:
        return self._oracle(designs)
