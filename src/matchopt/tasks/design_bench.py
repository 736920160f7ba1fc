"""Tasks read from design-bench data files (layout in docs: ``<folder>/<prefix>-{x,y}-<k>.npy``).

Every task here follows design-bench's recipe (protocol.md): load the full dataset from its
shards, keep the rows with ``y <= percentile(y_full, max_percentile)``, optionally draw a uniform
subsample of ``max_samples`` of them, and score designs with an oracle over the full data.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np

from matchopt.data import DesignSpace
from matchopt.errors import MatchoptError
from matchopt.evaluation import fit_accuracy
from matchopt.tasks.base import Task
from matchopt.tasks.shards import load_shards, offline_rows, shard_paths


class SequenceLookupOracle:
    """Exact oracle of a table of token sequences: the y of the sequence's LAST occurrence.

    A sequence of L tokens of K values is the base-K integer ``sum_i s_i K^(L-1-i)``, so the
    table is dense (K^L entries: 65,536 for TF-Bind-8, 1,048,576 for TF-Bind-10) and scoring is
    one vectorized index into it.

    Args:
        x: sequences (N x L), tokens in ``0..vocab_size-1``.
        y: their values (N,).
        vocab_size: K.
        fill: the value of a sequence the table does not hold; ``None``: such a sequence is an
            error (the table is complete, or a design outside it cannot be scored).
    """

    #: Largest table built (entries); beyond it a dense table stops being the simple choice.
    max_table_size: ClassVar[int] = 1 << 26
    #: Rows per chunk while building, to bound the temporaries for millions of rows.
    chunk_rows: ClassVar[int] = 1 << 20

    def __init__(self, x: np.ndarray, y: np.ndarray, vocab_size: int, fill: float | None = None):
        self.vocab_size = vocab_size
        self.fill = fill
        self.length = x.shape[1]
        size = vocab_size**self.length
        if size > self.max_table_size:
            raise MatchoptError(
                f"a lookup table of {vocab_size}^{self.length} sequences is too large"
            )
        lo, hi = int(x.min()), int(x.max())
        if lo < 0 or hi >= vocab_size:
            raise MatchoptError(
                f"oracle table has token {lo if lo < 0 else hi}, outside 0..{vocab_size - 1}"
            )
        y = np.asarray(y).reshape(-1)
        # Last row index of each code. max is order-free, so unlike a fancy assignment with
        # repeated indices (whose write order numpy does not specify) the result is exact.
        last = np.full(size, -1, dtype=np.int64)
        for start in range(0, len(x), self.chunk_rows):
            stop = min(start + self.chunk_rows, len(x))
            rows = np.arange(start, stop, dtype=np.int64)
            np.maximum.at(last, self.encode(x[start:stop]), rows)
        self.present = last >= 0
        self.values = np.zeros(size, dtype=y.dtype)
        self.values[self.present] = y[last[self.present]]

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Base-K codes (n,) of sequences (n x L)."""
        codes = np.zeros(len(x), dtype=np.int64)
        for i in range(self.length):  # column by column: no (n x L) int64 copy
            codes *= self.vocab_size
            codes += x[:, i]
        return codes

    def measured(self, designs: np.ndarray) -> np.ndarray:
        """True (n,) where the table holds the design."""
        return self.present[self.encode(designs)]

    def __call__(self, designs: np.ndarray) -> np.ndarray:
        codes = self.encode(designs)
        found = self.present[codes]
        if self.fill is not None:
            return np.where(found, self.values[codes], self.fill)
        if not found.all():
            row = int(np.argwhere(~found)[0][0])
            raise MatchoptError(f"design {designs[row].tolist()} is not in the oracle's table")
        return self.values[codes]


class RandomForestOracle:
    """Design-bench's approximate oracle for continuous tasks: a random forest.

    ``fit`` draws ``n_rows`` rows of the full data uniformly without replacement (all of them if
    there are fewer), holds out the last ``val_fraction`` of the draw for validation, z-scores x
    and y with the drawn rows' mean and population std (a zero std becomes 1) and fits
    ``RandomForestRegressor(n_estimators=100, max_depth=100, max_features=1.0)`` on the rest.
    Predictions are de-normalized. Everything random comes from ``seed``.

    Args:
        seed: seed of the row draw and of the forest.
        n_rows: rows drawn from the full data (design-bench: 2,000).
        val_fraction: fraction of them held out (design-bench: 0.5).

    Attributes:
        val_r2_: R^2 on the held-out rows.
        val_spearman_: Spearman's rank correlation on them.
    """

    def __init__(self, seed: int = 0, n_rows: int = 2_000, val_fraction: float = 0.5):
        self.seed = seed
        self.n_rows = n_rows
        self.val_fraction = val_fraction

    def draw(self, n_full: int) -> np.ndarray:
        """Indices of the rows the forest is built from (train first, then validation)."""
        rng = np.random.default_rng(self.seed)
        return rng.choice(n_full, size=min(self.n_rows, n_full), replace=False)

    def split(self, n_full: int) -> tuple[np.ndarray, np.ndarray]:
        """The drawn rows the forest is trained on and those it is validated on (indices into
        the full data), so that accuracy can also be measured on every row it never saw."""
        rows = self.draw(n_full)
        n_train = len(rows) - int(round(len(rows) * self.val_fraction))
        return rows[:n_train], rows[n_train:]

    def fit(self, x: np.ndarray, y: np.ndarray) -> RandomForestOracle:
        """Fit on the full data x (N x d), y (N,)."""
        from sklearn.ensemble import RandomForestRegressor

        train, val = self.split(len(y))
        rows = np.concatenate([train, val])
        x_rows, y_rows = x[rows].astype(np.float64), y[rows].astype(np.float64)
        self.x_mean_, self.x_std_ = x_rows.mean(0), _nonzero(x_rows.std(0))
        self.y_mean_, self.y_std_ = float(y_rows.mean()), float(_nonzero(y_rows.std()))
        n_train = len(train)
        self.forest_ = RandomForestRegressor(
            n_estimators=100, max_depth=100, max_features=1.0, random_state=self.seed, n_jobs=1
        )
        self.forest_.fit(
            (x_rows[:n_train] - self.x_mean_) / self.x_std_,
            (y_rows[:n_train] - self.y_mean_) / self.y_std_,
        )
        measured = fit_accuracy(y_rows[n_train:], self(x_rows[n_train:]))
        self.val_r2_, self.val_spearman_ = measured["r2"], measured["spearman"]
        return self

    def __call__(self, designs: np.ndarray) -> np.ndarray:
        """Predicted y (n,) of designs (n x d)."""
        x_norm = (np.asarray(designs, dtype=np.float64) - self.x_mean_) / self.x_std_
        # sklearn casts to float32: a finite design in a column of small std could overflow
        # there. Clipping to float32's range changes no split (thresholds are data values).
        limit = float(np.finfo(np.float32).max)
        return self.forest_.predict(np.clip(x_norm, -limit, limit)) * self.y_std_ + self.y_mean_


def _nonzero(std):
    """A standard deviation with zeros replaced by 1 (constant columns stay unscaled)."""
    return np.where(std > 0, std, 1.0)


class DesignBenchTask(Task):
    """A task read from design-bench shards.

    Subclasses set the class attributes below and return their oracle (a callable from designs
    (n x shape) to values (n,)) from :meth:`_build_oracle`.
    """

    #: Folder of the shards inside the data folder.
    folder: ClassVar[str]
    #: File name prefix of the shards.
    prefix: ClassVar[str]
    #: Number of x (and y) shards.
    n_shards: ClassVar[int]
    #: Offline rows have ``y <= percentile(y_full, max_percentile)``.
    max_percentile: ClassVar[float]
    #: Offline rows drawn (uniformly, without replacement) from those; ``None`` keeps them all.
    max_samples: ClassVar[int | None] = None
    #: Seed of that draw.
    subsample_seed: ClassVar[int] = 0
    #: Other files of the task in its folder (e.g. a pretrained policy), after the shards.
    extra_files: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def required_files(cls, data_dir: Path | None) -> list[Path]:
        shards = shard_paths(data_dir, cls.folder, cls.prefix, cls.n_shards)
        return shards + [Path(data_dir or ".") / cls.folder / name for name in cls.extra_files]

    def _load(self):
        paths = self.required_files(self.data_dir)
        kinds = "iu" if self.space.is_discrete else "biuf"  # checked before the oracle reads x
        x, y = load_shards(paths[: 2 * self.n_shards], self.space.shape, kinds)
        self._oracle = self._build_oracle(x, y)
        rows = offline_rows(y, self.max_percentile, self.max_samples, self.subsample_seed)
        return x[rows], y[rows], y

    @abstractmethod
    def _build_oracle(self, x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """The oracle of the full data x (N x shape), y (N,) (and of :attr:`extra_files`)."""

    def _score(self, designs: np.ndarray) -> np.ndarray:
        return self._oracle(designs)


class TFBind8(DesignBenchTask):
    """TF-Bind-8 (design-bench TFBind8-Exact-v0): 8-mers of DNA binding SIX6_REF_R1.

    Offline set: rows with y <= the 50th percentile of the full data (32,898 of 65,792).
    Oracle: exact lookup over the full data.
    """

    name = "tfbind8"
    design_bench_name = "TFBind8-Exact-v0"
    summary = "DNA 8-mers, transcription-factor binding (SIX6_REF_R1); exact lookup oracle"
    space = DesignSpace.discrete(8, 4)
    offline_size = 32_898
    folder, prefix, n_shards, max_percentile = "tf_bind_8-SIX6_REF_R1", "tf_bind_8", 1, 50.0

    def _build_oracle(self, x, y):
        return SequenceLookupOracle(x, y, self.space.vocab_size)


class TFBind10(DesignBenchTask):
    """TF-Bind-10 (design-bench TFBind10-Exact-v0): 10-mers of DNA binding PHO4.

    Full data: 84 shards, 8,321,066 rows. Every 10-mer appears 5 to 8 times with different y;
    the exact oracle, like design-bench's, takes a sequence's LAST occurrence in shard order.
    Offline set: rows with y <= the median of the full data, then 10,000 of them drawn uniformly
    without replacement with ``subsample_seed``. Design-bench draws them with numpy's global
    random state, whose seed is not recorded, so its rows cannot be reproduced; the seed here is
    matchopt's own. Normalized scores use the full data's min and max y.
    """

    name = "tfbind10"
    design_bench_name = "TFBind10-Exact-v0"
    summary = "DNA 10-mers, transcription-factor binding (PHO4); exact lookup oracle"
    space = DesignSpace.discrete(10, 4)
    offline_size = 10_000
    folder, prefix, n_shards, max_percentile = "tf_bind_10-pho4", "tf_bind_10", 84, 50.0
    max_samples = 10_000
    #: matchopt's seed of the 10,000-row draw (design-bench's is unknown).
    subsample_seed = 0

    def _build_oracle(self, x, y):
        return SequenceLookupOracle(x, y, self.space.vocab_size)


class Superconductor(DesignBenchTask):
    """Superconductor (design-bench Superconductor-RandomForest-v0): critical temperature of a
    material from its 86 element counts (UCI "Superconductivity", 21,263 rows, shards of 5,000).

    Offline set: rows with y <= the 80th percentile of the full data (design-bench reports
    17,014 rows). Oracle: a :class:`RandomForestOracle` fitted as design-bench's (2,000 rows,
    half held out). Design-bench ships its pretrained forest; this one is refitted with the
    recorded ``oracle_seed``, so its values differ a little from design-bench's. With fewer than
    2,000 rows (test fixtures) all rows are drawn.

    The forest is refitted on every load (about a second: 100 trees on 1,000 rows): the same
    recorded seed gives the same forest, and nothing is ever read back from a cache file, which
    a crafted pickle in a data folder could turn into code execution.

    Attributes:
        oracle_val_r2: R^2 of the forest on its held-out rows.
        oracle_val_spearman: Spearman's rank correlation there (design-bench reports 0.9155
            for its forest, on its own split). On the real data: R^2 0.8567, Spearman 0.9106
            (``benchmarks/superconductor_oracle.py``; docs/tasks.md compares the forests).
    """

    name = "superconductor"
    design_bench_name = "Superconductor-RandomForest-v0"
    summary = "superconductor critical temperature from 86 element counts; random-forest oracle"
    space = DesignSpace.continuous(86)
    offline_size = 17_014
    folder, prefix, n_shards, max_percentile = "superconductor", "superconductor", 5, 80.0
    #: Seed of the oracle's row draw and of its forest.
    oracle_seed: ClassVar[int] = 0

    def _build_oracle(self, x, y):
        try:
            import sklearn  # noqa: F401
        except ImportError:
            raise MatchoptError(
                "task 'superconductor' needs scikit-learn for its oracle: pip install scikit-learn"
            ) from None
        oracle = RandomForestOracle(seed=self.oracle_seed).fit(x, y)
        self.oracle_val_r2 = oracle.val_r2_
        self.oracle_val_spearman = oracle.val_spearman_
        return oracle


class UTR(DesignBenchTask):
    """UTR (design-bench UTR-ResNet-v0): 50-nt 5' UTRs and their mean ribosome load.

    Full data: 280,000 random 5' UTRs measured by a massively parallel reporter assay (Sample et
    al. 2019), 14 shards; y is the mean ribosome load as design-bench stores it (0 to 12).
    Offline set (design-bench's recipe): rows with y <= the 50th percentile of the full data
    (140,000), then, as design-bench's ``max_samples`` does for large sets, 10,000 of them drawn
    uniformly without replacement with ``subsample_seed`` (a cap matchopt sets so that the
    development suite runs in hours on a CPU; design-bench keeps all 140,000). Normalized
    scores use the full data's min and max y.

    Oracle: design-bench's UTR-ResNet-v0 weights are not distributed, so the oracle is a
    network fitted here on all rows by a fixed recipe and seed (:mod:`matchopt.tasks.utr_oracle`,
    Optimus 5-Prime's architecture), shipped with matchopt and read without pickle; its
    accuracy on a held-out 10% is in its header (:attr:`oracle_accuracy`).
    """

    name = "utr"
    design_bench_name = "UTR-ResNet-v0"
    summary = "50-nt 5' UTRs, mean ribosome load (Sample et al. 2019); CNN oracle fitted here"
    space = DesignSpace.discrete(50, 4)
    offline_size = 10_000
    folder, prefix, n_shards, max_percentile = "utr", "utr", 14, 50.0
    max_samples = 10_000
    #: matchopt's seed of the 10,000-row draw.
    subsample_seed = 0

    def _build_oracle(self, x, y):
        from matchopt.tasks.utr_oracle import UTROracle

        oracle = UTROracle()
        self.oracle_accuracy = dict(oracle.header.get("held_out", {}))
        return oracle
