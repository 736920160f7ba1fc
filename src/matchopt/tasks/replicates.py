"""Tasks whose offline rows are repeated, noisy, saturated measurements of the same designs.

Real assay tables (protein-binding microarrays, reporter assays) measure each design several
times; two replicates of one design often disagree by a quarter of the assay's range, the
design explains a minority of the values' variance, and values pile up at the floor and the
ceiling of the assay's range. A method chosen on noiseless tables can fail there (it trusts the
luckiest replicate). These tasks keep a noiseless function as the oracle and hand methods only
measurements of it, made by :class:`ReplicateAssay`:

* each design of the full set is measured ``r`` times, ``r`` drawn uniformly from
  ``replicates`` (5 to 8: TF-Bind-10's count of measurements per 10-mer);
* a measurement is ``clip(f(x) + e, lo, hi)``, with ``e ~ N(0, (noise_ratio * sd f)^2)``, ``sd f``
  the spread of the noiseless values over the full set; ``noise_ratio = 2.2`` leaves the design
  explaining about a sixth of the measurements' variance;
* ``lo`` and ``hi`` are the ``clip_percentiles`` (5th and 95th) of the unclipped measurements:
  the assay's floor and ceiling, where a tenth of the measurements saturate;
* the offline set keeps the designs whose mean measurement is at or below the median of the
  full set's design means (what a lab would call its weaker half), ``max_designs`` of them drawn
  uniformly, with all their replicates, rows shuffled.

Scores are the noiseless function, normalized with its min and max over the full set (as the
base task's), and the offline best is the noiseless value of the best offline design: a design
beats it only if it is truly better than everything the table measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from matchopt.data import DesignSpace
from matchopt.tasks.base import Task
from matchopt.tasks.design_bench import SequenceLookupOracle, TFBind8
from matchopt.tasks.shards import load_shards
from matchopt.tasks.synthetic import ChainPotts


@dataclass(frozen=True)
class ReplicateAssay:
    """The measurement model of a replicate task (module docstring)."""

    replicates: tuple[int, int] = (5, 8)
    noise_ratio: float = 2.2
    clip_percentiles: tuple[float, float] = (5.0, 95.0)
    max_designs: int = 1_500
    seed: int = 0

    def measure(self, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Measurements of designs with noiseless values f (n,): (design index, value) per row."""
        rng = np.random.default_rng(self.seed)
        lo, hi = self.replicates
        counts = rng.integers(lo, hi + 1, size=len(f))
        design = np.repeat(np.arange(len(f)), counts)
        raw = f[design] + rng.normal(0.0, self.noise_ratio * float(np.std(f)), size=len(design))
        floor, ceiling = np.percentile(raw, self.clip_percentiles)
        return design, np.clip(raw, floor, ceiling)

    def offline_designs(self, design: np.ndarray, measured: np.ndarray) -> np.ndarray:
        """Indices (sorted) of the designs kept offline: mean measurement <= the median mean,
        then ``max_designs`` of them drawn uniformly."""
        n = int(design.max()) + 1
        counts = np.bincount(design, minlength=n)
        means = np.bincount(design, weights=measured, minlength=n) / counts
        weak = np.flatnonzero(means <= np.median(means))
        rng = np.random.default_rng(self.seed + 1)
        return np.sort(rng.choice(weak, size=min(self.max_designs, len(weak)), replace=False))

    def statistics(self, design: np.ndarray, measured: np.ndarray) -> dict[str, float]:
        """What the measurements look like: the share of their variance due to the design (the
        intraclass correlation: the variance of the designs' true means over that plus the
        pooled replicate variance, both estimated by one-way analysis of variance), the median
        absolute difference of two replicates of a design over the range, and the share of
        measurements at the floor or the ceiling."""
        n = int(design.max()) + 1
        counts = np.bincount(design, minlength=n)
        means = np.bincount(design, weights=measured, minlength=n) / counts
        within = np.sum((measured - means[design]) ** 2) / (len(measured) - n)
        design_variance = max(float(np.var(means, ddof=1) - np.mean(within / counts)), 0.0)
        first = np.r_[0, np.cumsum(counts)[:-1]]  # first row of each design, rows sorted by design
        by_design = measured[np.argsort(design, kind="stable")]
        pair = np.abs(by_design[first] - by_design[first + 1])
        span = measured.max() - measured.min()
        at_bounds = (measured <= measured.min()) | (measured >= measured.max())
        return {
            "design_share_of_variance": design_variance / (design_variance + within),
            "replicate_difference_over_range": float(np.median(pair) / span),
            "saturated_share": float(np.mean(at_bounds)),
        }


class ReplicateTask(Task):
    """A noiseless task seen through :class:`ReplicateAssay` (module docstring).

    Subclasses return the full set of designs and their noiseless values from
    :meth:`_noiseless` and score designs with :meth:`_score`.
    """

    assay: ClassVar[ReplicateAssay] = ReplicateAssay()

    def _noiseless(self) -> tuple[np.ndarray, np.ndarray]:
        """The full set of designs (n x shape) and their noiseless values (n,)."""
        raise NotImplementedError

    def _load(self):
        x, f = self._noiseless()
        design, measured = self.assay.measure(f)
        self.assay_statistics = self.assay.statistics(design, measured)
        kept = self.assay.offline_designs(design, measured)
        rows = np.flatnonzero(np.isin(design, kept))
        rows = np.random.default_rng(self.assay.seed + 2).permutation(rows)
        self._offline_true_best = float(f[kept].max())
        return x[design[rows]], measured[rows], f

    def offline_best(self) -> float:
        """The normalized noiseless value of the best design the offline rows measured."""
        return float(self.normalize(self._offline_true_best))


class TFBind8Replicates(ReplicateTask):
    """TF-Bind-8's 65,536 8-mers measured 5 to 8 times each through :class:`ReplicateAssay`;
    scored by TF-Bind-8's exact lookup (the noiseless values)."""

    name = "tfbind8-replicates"
    summary = "TF-Bind-8 seen through a noisy replicated assay (5-8 clipped replicates a design)"
    space = DesignSpace.discrete(8, 4)
    offline_size = 9_780
    required_files = TFBind8.required_files
    folder, prefix, n_shards = TFBind8.folder, TFBind8.prefix, TFBind8.n_shards

    def _noiseless(self):
        paths = self.required_files(Path(self.data_dir))
        x, y = load_shards(paths, self.space.shape, "iu")
        self._oracle = SequenceLookupOracle(x, y, self.space.vocab_size)
        designs = np.unique(x, axis=0)  # each 8-mer once (the data repeat reverse complements)
        return designs, self._oracle(designs).astype(np.float64)

    def _score(self, designs):
        return self._oracle(designs)


class PottsReplicates(ReplicateTask):
    """The chain Potts task's 5,000 full-set sequences measured 5 to 8 times each through
    :class:`ReplicateAssay`; scored by the noiseless Potts energy."""

    name = "potts-replicates"
    summary = "chain Potts model seen through a noisy replicated assay (embedded)"
    space = ChainPotts.space
    offline_size = 9_774
    embedded = True

    def __init__(self, data_dir=None):
        self._potts = ChainPotts()
        super().__init__(data_dir)

    def _noiseless(self):
        rng = np.random.default_rng(ChainPotts.data_seed)
        length, k = self.space.shape[0], self.space.vocab_size
        designs = rng.integers(0, k, size=(ChainPotts.n_full, length))
        return designs, self._potts.function(designs)

    def _score(self, designs):
        return self._potts.function(designs)


REPLICATE_TASKS = (TFBind8Replicates, PottsReplicates)
