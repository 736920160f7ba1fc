"""Random designs: a sanity baseline that learns nothing from the scores.

Draws n designs uniformly from the design space: every token uniform over the vocabulary for
discrete designs; every coordinate uniform between its smallest and largest offline value for
continuous ones (the offline bounding box; the task's true bounds are not part of the data). A
method that does not beat this, or the best offline design, has learned nothing useful.

Not in the MATCH-OPT paper; no deviations to list.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from matchopt.data import OfflineData
from matchopt.methods.base import Method
from matchopt.methods.wrappers import check_fitted, fit_all_or_nothing, in_default_threads


@dataclass(frozen=True)
class RandomDesignsConfig:
    """Random designs have no hyperparameters."""


class RandomDesigns(Method):
    """Uniform random designs: tokens for discrete spaces, the offline bounding box otherwise.

    Args:
        config: :class:`RandomDesignsConfig` (empty).
        seed: seeds the draws (same seed, same designs).
        progress: unused (nothing to train).

    Attributes:
        low_, high_: per-coordinate min and max of the offline designs (continuous spaces).
    """

    config_class = RandomDesignsConfig
    presets = {"paper": {}, "quick": {}}

    @fit_all_or_nothing
    def fit(self, data: OfflineData) -> RandomDesigns:
        if not data.space.is_discrete:
            self.low_, self.high_ = data.x.min(axis=0), data.x.max(axis=0)
        self.data_ = data
        return self

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs drawn uniformly, in the data's own format."""
        check_fitted(self)
        space = self.data_.space
        rng = np.random.default_rng(self.seed)
        if space.is_discrete:
            return rng.integers(0, space.vocab_size, size=(n, *space.shape), dtype=np.int64)
        designs = rng.uniform(self.low_, self.high_, size=(n, *space.shape))
        return designs.astype(np.float32)
