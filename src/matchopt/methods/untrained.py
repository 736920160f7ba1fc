"""Untrained surrogate: MATCH-OPT's search on its MLP left at the random initialization.

A sanity baseline for the gradient-matching training: the same network class
(:class:`~matchopt.models.MLP`, d -> 512 -> 128 -> 32 -> 1, LeakyReLU 0.3), built with the same
seed as :class:`~matchopt.methods.matchopt.MatchOpt` (so it is exactly MATCH-OPT's network
before its first step), and the same search: 150 Adam steps on the z-scored features (logits for
tokens; lr 0.01 for discrete designs, 0.001 for continuous ones) from the 128 best offline
designs, then decoding (argmax for tokens). Whatever MATCH-OPT gains over this comes from
training.

Not in the MATCH-OPT paper; no deviations to list.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from matchopt.config_fields import by_design_type, count, learning_rate, widths
from matchopt.data import OfflineData
from matchopt.encodings import DesignEncoder
from matchopt.methods.base import Method, search_starts
from matchopt.methods.wrappers import check_fitted, fit_all_or_nothing, in_default_threads
from matchopt.models import MLP
from matchopt.runtime import seeded_torch_rng
from matchopt.search import gradient_ascent, search_start


@dataclass(frozen=True)
class UntrainedConfig:
    """Network and search of MATCH-OPT (its defaults); there is no training."""

    hidden: tuple[int, ...] = widths((512, 128, 32))
    """Hidden layer widths of the MLP."""
    negative_slope: float = 0.3
    """LeakyReLU slope."""
    search_steps: int = count(150, minimum=0)
    """Adam steps on the designs."""
    search_lr: float | None = learning_rate(None)
    """Search step size; None = 0.01 for discrete designs (logits), 0.001 for continuous ones."""
    init: str = search_start()
    """Search starts: topk (as MATCH-OPT), random offline rows, or gaussian N(0, I)."""


QUICK = {"hidden": (64, 32, 16), "search_steps": 20}


class Untrained(Method):
    """Gradient ascent on a randomly initialized MLP (MATCH-OPT without training).

    Args:
        config: :class:`UntrainedConfig` (MATCH-OPT's defaults when ``None``).
        seed: seeds the initialization (as MATCH-OPT's) and random starts.
        progress: unused (nothing to train).

    Attributes:
        model_: the untrained :class:`~matchopt.models.MLP` (frozen).
        encoder_: maps designs to normalized features and back.
    """

    config_class = UntrainedConfig
    presets = {"paper": {}, "quick": QUICK}

    @fit_all_or_nothing
    def fit(self, data: OfflineData) -> Untrained:
        config = self.config_
        self.encoder_ = DesignEncoder(data.space).fit(data.x, data.y)
        with seeded_torch_rng(self.seed):
            model = MLP(self.encoder_.n_features, config.hidden, config.negative_slope)
        self.model_ = model.to(self.device_).eval().requires_grad_(False)
        self.data_ = data
        return self

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs: Adam ascent on the untrained MLP from ``config.init`` starts."""
        check_fitted(self)
        config = self.config_
        lr = by_design_type(config.search_lr, self.data_.space.is_discrete, 0.01, 0.001)
        device = next(self.model_.parameters()).device
        starts = torch.from_numpy(search_starts(self, n, config.init)).to(device)
        final = gradient_ascent(self.model_, starts, config.search_steps, lr)
        return self.encoder_.decode_x(final.cpu().numpy())
