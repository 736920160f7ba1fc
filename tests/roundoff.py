"""Round-off bounds for tests that compare float results computed in a different order.

Batching, tiling, the thread count and the processor's instruction set (AVX-512, AVX2 or none:
``ATEN_CPU_CAPABILITY``, ``MKL_ENABLE_INSTRUCTIONS``) change how BLAS and PyTorch's kernels split
and order their sums. Two mathematically equal results then differ by round-off, so tests compare
them with a bound derived from the unit round-off and the length of the reduction, never with a
fixed 1e-12 that holds on one processor only.

Where a property must hold exactly (rows of a batch do not interact, the same seed gives the same
designs), tests check it bitwise with both sides run at the same shapes and thread count instead.
"""

from __future__ import annotations

import math

import torch

#: Safety factor over the first-order bounds below: it covers the few rounding errors of the
#: elementwise operations of each layer and the slow shrinking of the angle between two inputs
#: from layer to layer. Bounds stay 1e-13 (well-conditioned pairs) to 1e-6 (duplicate pairs) of
#: the kernel's scale, far below the O(1) errors of a wrong tile or a coupled batch.
SAFETY = 16


def unit_roundoff(dtype: torch.dtype) -> float:
    """``u = eps / 2``: the relative error of one rounded operation in ``dtype``."""
    return torch.finfo(dtype).eps / 2


def dot_roundoff(length: int, dtype: torch.dtype) -> float:
    """Relative bound ``gamma_n ~ n u`` on a dot product of ``length`` terms in any order.

    Higham, "Accuracy and Stability of Numerical Algorithms", eq. 3.5: ``|fl(x.y) - x.y| <=
    gamma_n |x|.|y|``, whatever order the n products are summed in.
    """
    return length * unit_roundoff(dtype)


def _cancellation_error(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """Relative error (n1 x n2) of ``s = sqrt(q q' - Sigma^2)``, the ReLU kernel's sine term.

    ``Sigma = x.x'/d`` and the norms ``q`` carry ``gamma_d`` relative error, so ``q q' - Sigma^2
    = q q' sin^2`` is off by ``delta ~ 4 gamma_(d+2) q q'``. The root is then off by
    ``min(delta / (2 sin), sqrt(delta))`` relative to ``sqrt(q q')``: tiny for well separated
    inputs, ``sqrt(delta)`` (about 1e-7 in float64) for parallel or duplicate ones.
    """
    delta = 4 * dot_roundoff(x1.shape[1] + 2, x1.dtype)
    cosine = torch.nn.functional.normalize(x1, dim=1) @ torch.nn.functional.normalize(x2, dim=1).T
    sine = (1 - cosine.clamp(-1, 1) ** 2).clamp_min(0).sqrt()
    return torch.minimum(delta / (2 * sine.clamp_min(1e-300)), torch.full_like(sine, delta**0.5))


def ntk_roundoff(x1: torch.Tensor, x2: torch.Tensor, depth: int) -> torch.Tensor:
    """Per-entry bound (n1 x n2) on the round-off of ``relu_ntk(x1, x2)``, relative to its scale.

    The scale of entry (i, j) is ``sqrt(K(x1_i, x1_i) K(x2_j, x2_j))`` (Cauchy-Schwarz bounds
    ``|K_ij|`` by it); each of the ``depth`` ReLU layers repeats the cancellation of
    :func:`_cancellation_error`.
    """
    return SAFETY * depth * _cancellation_error(x1, x2)


def ntk_gradient_roundoff(x1: torch.Tensor, x2: torch.Tensor, depth: int) -> float:
    """Relative bound on the round-off of gradients of ``relu_ntk(x1, x2)`` (no parallel pairs).

    The derivative of the sine term is ``-Sigma / s``: the root's error ``delta / (2 sin)`` is
    divided once more by ``sin``, so the worst pair sets the bound ``delta / sin^2``.
    """
    delta = 4 * dot_roundoff(x1.shape[1] + 2, x1.dtype)
    cosine = torch.nn.functional.normalize(x1, dim=1) @ torch.nn.functional.normalize(x2, dim=1).T
    worst_sine_squared = 1 - cosine.abs().max().item() ** 2
    if worst_sine_squared <= math.sqrt(delta):
        raise ValueError("inputs hold (nearly) parallel pairs: their gradients are round-off")
    return SAFETY * depth * delta / worst_sine_squared


def ntk_scale(k11: torch.Tensor, k22: torch.Tensor) -> torch.Tensor:
    """``sqrt(K(x1_i, x1_i) K(x2_j, x2_j))`` (n1 x n2) from the two diagonals."""
    return (k11[:, None] * k22[None, :]).sqrt()


#: Relative bound on a batched seed's trained parameters, losses and continuous designs against
#: its run alone: 2**10 float32 unit round-offs (about 6e-5).
TRAINING_ROUNDOFF = 2**10 * torch.finfo(torch.float32).eps / 2


def _flat(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in net.parameters()])
