"""Embedded synthetic tasks: built deterministically in memory, no files needed.

Both follow design-bench's recipe: draw a "full dataset" of designs uniformly from the design
space with a fixed seed, score it with the closed-form function, and keep the rows at or below
a percentile as the offline set. Normalized scores use the full sample's min and max, so a
design better than every sampled one scores above 1. Styblinski-Tang is one of the BoTorch
function tasks (:class:`~matchopt.tasks.botorch_functions.BoTorchFunctionTask` holds its recipe).
"""

from __future__ import annotations

import numpy as np

from matchopt.data import DesignSpace
from matchopt.tasks.base import Task
from matchopt.tasks.botorch_functions import BoTorchFunctionTask
from matchopt.tasks.shards import offline_mask


class StyblinskiTang(BoTorchFunctionTask):
    """Negated Styblinski-Tang function in 10 dimensions (continuous, the CLI's default task).

    ``f(x) = -1/2 * sum_i (x_i^4 - 16 x_i^2 + 5 x_i)`` on ``[-5, 5]^10``; maximum
    ``39.16617 * 10`` at ``x_i = -2.903534``; many local maxima (each coordinate has two).
    Full data: 5,000 uniform draws (seed 0); offline set: y <= their 50th percentile (2,500 rows).
    The recipe (data, oracle, gradient) is :class:`BoTorchFunctionTask`'s.
    """

    name = "styblinski-tang"
    summary = "negated Styblinski-Tang, 10-d continuous, known gradient (embedded)"
    space = DesignSpace.continuous(10)
    offline_size = 2_500
    botorch_name = "StyblinskiTang"
    bounds = (-5.0, 5.0)
    n_full, max_percentile, data_seed = 5_000, 50.0, 0
    optimum_x = -2.903534
    optimum_value = 39.16616570377142 * 10


class ChainPotts(Task):
    """A chain Potts model on 12 tokens of 4 (discrete): field + nearest-neighbour couplings.

    ``f(s) = sum_i h[i, s_i] + sum_i J[i, s_i, s_{i+1}]`` with h, J drawn once from N(0, 1)
    (seed 2024), so the landscape has epistasis but an exactly computable optimum
    (:meth:`optimum`, by dynamic programming along the chain).
    Full data: 5,000 uniform sequences (seed 1); offline set: y <= their 50th percentile.
    """

    name = "potts"
    summary = "chain Potts model, 12 tokens of 4, closed form with epistasis (embedded)"
    space = DesignSpace.discrete(12, 4)
    offline_size = 2_500
    embedded = True
    n_full, max_percentile, data_seed, landscape_seed = 5_000, 50.0, 1, 2024

    def __init__(self, data_dir=None):
        length, k = self.space.shape[0], self.space.vocab_size
        rng = np.random.default_rng(self.landscape_seed)
        self.fields = rng.standard_normal((length, k))
        self.couplings = rng.standard_normal((length - 1, k, k))
        super().__init__(data_dir)

    def _load(self):
        rng = np.random.default_rng(self.data_seed)
        length, k = self.space.shape[0], self.space.vocab_size
        x = rng.integers(0, k, size=(self.n_full, length))
        y = self.function(x)
        keep = offline_mask(y, self.max_percentile)
        return x[keep], y[keep], y

    def function(self, tokens: np.ndarray) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        positions = np.arange(tokens.shape[1])
        field = self.fields[positions, tokens].sum(axis=1)
        pairs = self.couplings[positions[:-1], tokens[:, :-1], tokens[:, 1:]].sum(axis=1)
        return field + pairs

    def optimum(self) -> tuple[np.ndarray, float]:
        """The best sequence and its value (Viterbi over the chain)."""
        best = self.fields[0].copy()  # best value of a prefix ending in each token
        back = []
        for i in range(1, self.space.shape[0]):
            total = best[:, None] + self.couplings[i - 1] + self.fields[i][None, :]
            back.append(total.argmax(axis=0))
            best = total.max(axis=0)
        seq = [int(best.argmax())]
        for pointers in reversed(back):
            seq.append(int(pointers[seq[-1]]))
        return np.array(seq[::-1]), float(best.max())

    def _score(self, designs: np.ndarray) -> np.ndarray:
        return self.function(designs)
