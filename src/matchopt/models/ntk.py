"""Closed-form neural tangent kernel (NTK) of an infinitely wide ReLU MLP.

The kernel of ``stax.serial(Dense(1, W_std, b_std), Relu(), ..., Relu(), Dense(1, W_std, b_std))``
in the JAX neural-tangents library (NTK parameterization, the library's default), reproduced in
PyTorch: Jacot, Gabriel, Hongler, "Neural Tangent Kernel", NeurIPS 2018; ReLU expectations from
Cho & Saul, "Kernel Methods for Deep Learning", NeurIPS 2009. ``depth`` counts the ReLU hidden
layers, so BDI's 6-layer network (six Dense layers) is ``depth=5``.

Recursion (neural-tangents' ``Dense`` and ``ABRelu(0, 1)`` kernel rules), for inputs x, x' in R^d:

* input: ``Sigma = x.x' / d``, variances ``q = |x|^2 / d`` and ``q' = |x'|^2 / d``, ``Theta = 0``;
* Dense: ``Sigma <- W^2 Sigma + b^2`` (same for q, q'), then ``Theta <- Sigma + W^2 Theta``;
* ReLU: ``s = sqrt(q q' - Sigma^2)``, ``angle = atan2(s, Sigma)``, ``dot = 1/2 - angle / (2 pi)``,
  ``Sigma <- s / (2 pi) + dot * Sigma``, ``Theta <- dot * Theta``, ``q <- q / 2``.

The result is ``Theta`` after the last Dense layer. ``b_std = 0`` is the library's ``b_std=None``
(no bias): a bias of zero variance adds nothing to either kernel.

Gradients follow the library too: its square root has a custom derivative that is zero where the
argument is at most 1e-30, so the kernel is differentiable (with a finite, one-sided convention)
where x and x' are parallel, e.g. at x = x'. :func:`relu_ntk_diag` gives ``K(x, x)`` through the
diagonal recursion (angle 0), which is smooth. Everything runs in the dtype of the inputs; pass
float64 where the kernel feeds a linear solve.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from matchopt.errors import MatchoptError

#: Below this value the square root's derivative is taken as zero (neural-tangents' ``_sqrt``).
SQRT_TOLERANCE = 1e-30


def _safe_sqrt(x: torch.Tensor) -> torch.Tensor:
    """``sqrt(max(x, 0))`` with derivative ``1 / (2 sqrt(x))`` where x > 1e-30 and 0 elsewhere.

    With gradients, values at most 1e-30 give 0 instead of at most 1e-15.
    """
    if not (torch.is_grad_enabled() and x.requires_grad):
        return x.clamp_min(0.0).sqrt_()
    active = x > SQRT_TOLERANCE
    return torch.where(active, torch.sqrt(torch.where(active, x, 1.0)), 0.0)


def relu_ntk(
    x1: torch.Tensor,
    x2: torch.Tensor,
    depth: int = 5,
    weight_std: float = 1.0,
    bias_std: float = 0.0,
) -> torch.Tensor:
    """NTK ``Theta(x1_i, x2_j)`` of a ReLU MLP with ``depth`` hidden layers, infinitely wide.

    Computed tile by tile (:data:`TILE_ROWS` x :data:`TILE_COLUMNS`) so that the recursion's
    temporaries stay in cache; differentiable (first order) with respect to both inputs, each
    tile being recomputed during the backward pass instead of keeping its graph.

    Args:
        x1: first inputs (n1 x d).
        x2: second inputs (n2 x d).
        depth: number of ReLU hidden layers (Dense layers = depth + 1).
        weight_std: ``W_std`` of every Dense layer.
        bias_std: ``b_std`` of every Dense layer (0 = no bias).

    Returns:
        The kernel matrix (n1 x n2).
    """
    _check_inputs(x1, x2, depth)
    return _TiledKernel.apply(x1, x2, (depth, weight_std, bias_std))


#: Tile shape of :func:`relu_ntk` and :func:`relu_ntk_gram` (1 MB per float64 temporary). On a
#: loaded 2-core machine, tiles made a 128 x 32,898 kernel about 4 times faster than one pass.
TILE_ROWS, TILE_COLUMNS = 128, 1024


def _tiles(n1: int, n2: int):
    for row in range(0, n1, TILE_ROWS):
        for column in range(0, n2, TILE_COLUMNS):
            yield slice(row, row + TILE_ROWS), slice(column, column + TILE_COLUMNS)


class _TiledKernel(torch.autograd.Function):
    """:func:`_relu_ntk_tile` over all tiles; backward recomputes each tile with its graph."""

    @staticmethod
    def forward(ctx, x1, x2, params):
        ctx.save_for_backward(x1, x2)
        ctx.params = params
        out = x1.new_empty(len(x1), len(x2))
        for rows, columns in _tiles(len(x1), len(x2)):
            out[rows, columns] = _relu_ntk_tile(x1[rows], x2[columns], *params)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x1, x2 = ctx.saved_tensors
        needs1, needs2 = ctx.needs_input_grad[:2]
        grad1 = torch.zeros_like(x1) if needs1 else None
        grad2 = torch.zeros_like(x2) if needs2 else None
        with torch.enable_grad():
            for rows, columns in _tiles(len(x1), len(x2)):
                a = x1[rows].detach().requires_grad_(needs1)
                b = x2[columns].detach().requires_grad_(needs2)
                inputs = [t for t in (a, b) if t.requires_grad]
                tile = _relu_ntk_tile(a, b, *ctx.params)
                grads = iter(torch.autograd.grad(tile, inputs, grad_out[rows, columns]))
                if needs1:
                    grad1[rows] += next(grads)
                if needs2:
                    grad2[columns] += next(grads)
        return grad1, grad2, None


def _relu_ntk_tile(
    x1: torch.Tensor, x2: torch.Tensor, depth: int, weight_std: float, bias_std: float
) -> torch.Tensor:
    """The recursion of the module docstring on one tile (n1 x n2), plain autograd."""
    w2, b2 = weight_std**2, bias_std**2
    n_features = x1.shape[1]
    nngp = x1 @ x2.T / n_features
    var1 = (x1 * x1).sum(1) / n_features
    var2 = (x2 * x2).sum(1) / n_features
    nngp, var1, var2 = w2 * nngp + b2, w2 * var1 + b2, w2 * var2 + b2
    ntk = nngp
    for _ in range(depth):
        root = _safe_sqrt(var1[:, None] * var2[None, :] - nngp * nngp)
        dot = 0.5 - torch.atan2(root, nngp) / (2 * math.pi)
        nngp = root / (2 * math.pi) + dot * nngp
        ntk = ntk * dot
        var1, var2 = var1 / 2, var2 / 2
        nngp, var1, var2 = w2 * nngp + b2, w2 * var1 + b2, w2 * var2 + b2
        ntk = nngp + w2 * ntk
    return ntk


def relu_ntk_diag(
    x: torch.Tensor, depth: int = 5, weight_std: float = 1.0, bias_std: float = 0.0
) -> torch.Tensor:
    """The diagonal ``Theta(x_i, x_i)`` (n,) of :func:`relu_ntk`, through the smooth recursion."""
    _check_inputs(x, x, depth)
    w2, b2 = weight_std**2, bias_std**2
    var = w2 * (x * x).sum(1) / x.shape[1] + b2
    ntk = var
    for _ in range(depth):
        var = w2 * (var / 2) + b2
        ntk = var + w2 * (ntk / 2)
    return ntk


@torch.no_grad()
def relu_ntk_gram(
    x: torch.Tensor,
    depth: int = 5,
    weight_std: float = 1.0,
    bias_std: float = 0.0,
    progress: Callable[[int], object] | None = None,
) -> torch.Tensor:
    """The Gram matrix ``Theta(x, x)`` on and above the diagonal, tile by tile.

    Each band of :data:`TILE_ROWS` rows is computed from its first row's column on (the upper
    triangle plus the lower half of the diagonal tiles); the rest stays zero. The N x N matrix
    is the only large allocation; :func:`ntk_regression_coefficients` factorizes it in place.

    Args:
        x: inputs (N x d), in the dtype the matrix should have.
        depth, weight_std, bias_std: as :func:`relu_ntk`.
        progress: called with the number of rows finished after each band.

    Returns:
        (N x N) matrix holding ``Theta`` at least on and above the diagonal.
    """
    _check_inputs(x, x, depth)
    n = x.shape[0]
    gram = torch.zeros(n, n, dtype=x.dtype, device=x.device)
    for start in range(0, n, TILE_ROWS):
        rows = slice(start, start + TILE_ROWS)
        for column in range(start, n, TILE_COLUMNS):
            columns = slice(column, column + TILE_COLUMNS)
            gram[rows, columns] = _relu_ntk_tile(x[rows], x[columns], depth, weight_std, bias_std)
        if progress is not None:
            progress(len(x[rows]))
    return gram


def ntk_regression_coefficients(
    x: torch.Tensor,
    y: torch.Tensor,
    regularization: float = 1e-6,
    depth: int = 5,
    weight_std: float = 1.0,
    bias_std: float = 0.0,
    progress: Callable[[int], object] | None = None,
) -> torch.Tensor:
    """Kernel regression coefficients ``(K + regularization * tr(K) / N * I)^-1 y``, K = NTK(x, x).

    The prediction at new inputs x* is then ``relu_ntk(x*, x) @ coefficients`` (the mean of the
    infinitely wide network trained to convergence on (x, y) by gradient flow, neural-tangents'
    ``predict`` with the same diagonal ridge). Memory: one N x N matrix in the dtype of ``x``
    (8.7 GB for N = 32,898 in float64), factorized in place by Cholesky.

    Args:
        x: inputs (N x d); use float64, the ridge is tiny.
        y: targets (N,).
        regularization: ridge relative to the mean diagonal of K.
        depth, weight_std, bias_std: as :func:`relu_ntk`.
        progress: called with the number of Gram rows finished after each block.

    Returns:
        The coefficients (N,), dtype of ``x``.

    Raises:
        MatchoptError: the regularized matrix is not positive definite (e.g. regularization 0).
    """
    gram = relu_ntk_gram(x, depth, weight_std, bias_std, progress=progress)
    diagonal = gram.diagonal()
    diagonal += abs(regularization) * diagonal.sum() / len(diagonal)
    # ``gram.mT`` is a column-major view whose lower triangle is the upper triangle computed
    # above: LAPACK factorizes it where it lies, without a second N x N copy.
    factor = gram.mT
    info = torch.empty((), dtype=torch.int32, device=x.device)
    torch.linalg.cholesky_ex(factor, out=(factor, info))
    if info.item() != 0:
        raise MatchoptError(
            f"the NTK Gram matrix is not positive definite (Cholesky failed at row {info.item()}); "
            "increase the regularization"
        )
    rhs = y.reshape(-1, 1).to(x.dtype)
    half = torch.linalg.solve_triangular(factor, rhs, upper=False)
    return torch.linalg.solve_triangular(factor.mT, half, upper=True).reshape(-1)


def _check_inputs(x1: torch.Tensor, x2: torch.Tensor, depth: int) -> None:
    if x1.ndim != 2 or x2.ndim != 2 or x1.shape[1] != x2.shape[1]:
        raise ValueError(
            f"inputs must be (n1 x d) and (n2 x d), got {tuple(x1.shape)} and {tuple(x2.shape)}"
        )
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
