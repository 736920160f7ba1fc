"""Surrogate models: networks that map normalized features (n x d) to predicted scores (n,)."""

from matchopt.models.gaussian import (
    EnsembleConfig,
    GaussianEnsemble,
    GaussianMLP,
    bootstrap_weights,
    fit_gaussian,
)
from matchopt.models.mlp import MLP, mlp_layers
from matchopt.models.optim import LossTotal, adam

__all__ = [
    "LossTotal",
    "MLP",
    "adam",
    "EnsembleConfig",
    "GaussianEnsemble",
    "GaussianMLP",
    "bootstrap_weights",
    "fit_gaussian",
    "mlp_layers",
]
