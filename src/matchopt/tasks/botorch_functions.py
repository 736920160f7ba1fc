"""Embedded continuous tasks built from BoTorch's closed-form test functions.

One recipe (:class:`BoTorchFunctionTask`), design-bench's: draw a "full dataset" of ``n_full``
designs uniformly from the function's usual box with a fixed seed (cast to float32, the
design space's dtype), score them with the BoTorch function negated (so it is maximized) in
float64, and keep the rows at or below the ``max_percentile``-th percentile as the offline set.
Normalized scores use the full sample's min and max (:class:`~matchopt.tasks.base.Task`), so a
design better than every sampled one scores above 1; each task's :meth:`optimum` gives the
known maximum to measure that headroom.

The oracle is BoTorch's own ``_evaluate_true`` formula, built with bounds ``(-inf, inf)`` in
every coordinate: BoTorch refuses designs outside a test problem's bounds, but a search may
leave the box and the oracle must still score it (every function here is defined everywhere,
and none of their formulas uses the bounds; the box only sets where the data are drawn).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import ClassVar

import numpy as np
import torch

from matchopt.data import DesignSpace
from matchopt.tasks.base import Task
from matchopt.tasks.shards import offline_mask


@lru_cache(maxsize=16)
def botorch_function(name: str, dim: int, kwargs: tuple[tuple[str, object], ...] = ()):
    """BoTorch's test function ``name`` in ``dim`` dimensions, negated (to be maximized).

    Unbounded (bounds ``(-inf, inf)`` per coordinate), so it scores designs outside the usual
    box instead of raising. ``kwargs``: further constructor arguments as sorted (key, value)
    pairs (hashable, for the cache).
    """
    from botorch import test_functions

    cls = getattr(test_functions, name)
    return cls(dim=dim, negate=True, bounds=[(-math.inf, math.inf)] * dim, **dict(kwargs))


class BoTorchFunctionTask(Task):
    """A negated BoTorch test function as an embedded continuous task (the recipe above).

    Subclasses set :attr:`name`, :attr:`summary`, :attr:`space`, :attr:`offline_size`, the
    BoTorch class (:attr:`botorch_name`, :attr:`botorch_kwargs`), the box :attr:`bounds`, the
    sample (:attr:`n_full`, :attr:`max_percentile`, :attr:`data_seed`) and the known optimum
    (:attr:`optimum_x`, :attr:`optimum_value`).

    :meth:`function` and :meth:`gradient` take designs of any dimension the BoTorch class
    accepts (the task's own is ``space.shape[0]``).
    """

    embedded = True
    #: Class in ``botorch.test_functions`` and extra constructor arguments (besides ``dim``,
    #: ``negate`` and ``bounds``).
    botorch_name: ClassVar[str]
    botorch_kwargs: ClassVar[dict[str, object]] = {}
    #: (low, high) of every coordinate: where the full data are drawn.
    bounds: ClassVar[tuple[float, float]]
    n_full: ClassVar[int]
    max_percentile: ClassVar[float] = 50.0
    data_seed: ClassVar[int]
    #: A maximizer (one number: the same in every coordinate) and the maximum of
    #: :meth:`function`.
    optimum_x: ClassVar[float | tuple[float, ...]]
    optimum_value: ClassVar[float]

    @classmethod
    def _botorch(cls, dim: int):
        return botorch_function(cls.botorch_name, dim, tuple(sorted(cls.botorch_kwargs.items())))

    def _load(self):
        rng = np.random.default_rng(self.data_seed)
        x = rng.uniform(*self.bounds, size=(self.n_full, self.space.shape[0])).astype(np.float32)
        y = self.function(x)
        keep = offline_mask(y, self.max_percentile)
        return x[keep], y[keep], y

    @classmethod
    def function(cls, x: np.ndarray) -> np.ndarray:
        """Values (n,) in float64: BoTorch's ``<botorch_name>(negate=True)``."""
        x = torch.as_tensor(np.asarray(x, dtype=np.float64))
        with torch.no_grad():
            return cls._botorch(x.shape[-1])(x).numpy()

    @classmethod
    def gradient(cls, x: np.ndarray) -> np.ndarray:
        """Gradient of :meth:`function` (n x d), by autograd through BoTorch's function."""
        x = torch.as_tensor(np.asarray(x, dtype=np.float64)).requires_grad_(True)
        (grad,) = torch.autograd.grad(cls._botorch(x.shape[-1])(x).sum(), x)
        return grad.numpy()

    @classmethod
    def optimum(cls) -> tuple[np.ndarray, float]:
        """A maximizer (d,) in float64 and the maximum of :meth:`function`."""
        x = np.broadcast_to(np.asarray(cls.optimum_x, dtype=np.float64), cls.space.shape)
        return x.copy(), float(cls.optimum_value)

    def _score(self, designs: np.ndarray) -> np.ndarray:
        return self.function(designs)


class Hartmann6(BoTorchFunctionTask):
    """Negated Hartmann function in 6 dimensions: four Gaussian-like bumps, multimodal.

    ``f(x) = sum_i alpha_i exp(-sum_j A_ij (x_j - P_ij)^2)`` on ``[0, 1]^6``; maximum
    3.3223680044 at ``(0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)`` (BoTorch's
    optimizer, 2.4e-11 below the maximum). BoTorch stores A and alpha as float32 and casts them
    to float64, so its maximum is 7e-9 below the textbook 3.32236801; the oracle is BoTorch's.
    Most of the cube is flat near 0: the offline set (y <= the median, about 0.1) holds only
    the bumps' tails.
    Full data: 4,000 uniform draws (seed 6); offline set: y <= their 50th percentile (2,000).
    """

    name = "hartmann6"
    summary = "negated Hartmann, 6-d continuous, multimodal bumps (embedded, BoTorch)"
    space = DesignSpace.continuous(6)
    offline_size = 2_000
    botorch_name = "Hartmann"
    bounds = (0.0, 1.0)
    n_full, data_seed = 4_000, 6
    optimum_x = (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)
    optimum_value = 3.3223680044401855  # BoTorch's formula, refined from its optimizer


class Rosenbrock20(BoTorchFunctionTask):
    """Negated Rosenbrock function in 20 dimensions: a narrow curved valley, unimodal-ish.

    ``f(x) = -sum_{i<d} (100 (x_{i+1} - x_i^2)^2 + (x_i - 1)^2)`` on ``[-5, 10]^20``; maximum 0
    at ``x_i = 1``. Values span about 6e6 over the box.
    Full data: 4,000 uniform draws (seed 20); offline set: y <= their 50th percentile (2,000).
    """

    name = "rosenbrock20"
    summary = "negated Rosenbrock, 20-d continuous, curved valley (embedded, BoTorch)"
    space = DesignSpace.continuous(20)
    offline_size = 2_000
    botorch_name = "Rosenbrock"
    bounds = (-5.0, 10.0)
    n_full, data_seed = 4_000, 20
    optimum_x = 1.0
    optimum_value = 0.0


class Levy40(BoTorchFunctionTask):
    """Negated Levy function in 40 dimensions: a bowl with many local optima (sin^2 ripples).

    With ``w = 1 + (x - 1) / 4``: ``f(x) = -(sin^2(pi w_1) + sum_{i<d} (w_i - 1)^2
    (1 + 10 sin^2(pi w_i + 1)) + (w_d - 1)^2 (1 + sin^2(2 pi w_d)))`` on ``[-10, 10]^40``;
    maximum 0 at ``x_i = 1``.
    Full data: 5,000 uniform draws (seed 40); offline set: y <= their 50th percentile (2,500).
    """

    name = "levy40"
    summary = "negated Levy, 40-d continuous, many local optima (embedded, BoTorch)"
    space = DesignSpace.continuous(40)
    offline_size = 2_500
    botorch_name = "Levy"
    bounds = (-10.0, 10.0)
    n_full, data_seed = 5_000, 40
    optimum_x = 1.0
    optimum_value = 0.0


#: The tasks of this module, to be registered in :data:`matchopt.tasks.TASKS`.
BOTORCH_TASKS = (Hartmann6, Rosenbrock20, Levy40)
