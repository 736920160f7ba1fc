"""Surrogate models: networks that map normalized features (n x d) to predicted scores (n,)."""

from matchopt.models.mlp import MLP

__all__ = ["MLP"]
