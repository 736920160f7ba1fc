"""BDI: bidirectional learning between high-scoring designs and the offline data, with an NTK.

Chen, Zhang, Fu, Liu, Coates. "Bidirectional Learning for Offline Infinite-width Model-based
Optimization", NeurIPS 2022 (code: github.com/GGchen1997/BDI).

The model is an infinitely wide 6-layer ReLU MLP (six Dense layers, five ReLUs, W_std 1, no
bias, NTK parameterization: neural-tangents' default ``Dense``), i.e. kernel regression with its
neural tangent kernel K (:mod:`matchopt.models.ntk`). Read top to bottom:

1. **Forward model** (fit): on the z-scored offline data (X, Y),
   ``d = (K_XX + 1e-6 * tr(K_XX) / N * I)^-1 Y``, in float64 (the code enables JAX's x64).
2. **Bidirectional loss** of a high-scoring design x_h with target label y_h = 10 (z-scored y):
   forward ``1/2 (K(x_h, X) d - y_h)^2`` (the data predict y_h at x_h) plus backward
   ``1/2 sum_i w_i (K(X_i, x_h) K(x_h, x_h)^-1 y_h - Y_i)^2`` (x_h alone, labelled y_h, predicts
   the data), ``w = softmax(gamma * Y)``.
3. **Search**: from the 128 best offline designs, 200 Adam steps on x_h minimizing the loss
   (lr 0.1 on discrete designs, searched as z-scored design-bench logits; 1e-3 on continuous).

High-scoring set. The public code optimizes each of the 128 designs on its own: its x_h is one
design (``K(x_h, x_h)`` is 1 x 1, the forward mean is over one term). The losses of different
designs do not interact and Adam acts elementwise, so here all 128 problems are one (128 x d)
tensor under one Adam, which is the same computation. ``coupling="joint"`` instead treats the
n designs as one set X_h (``K(X, X_h) K(X_h, X_h)^-1 y_h 1``, forward mean over the set), as the
paper's notation reads.

Memory. The N x N float64 Gram matrix is the only large allocation, factorized in place: 8.7 GB
for TF-Bind-8 (N = 32,898); the search computes its n x N kernels tile by tile. Offline sets above
``max_rows`` (40,000 rows: 12.8 GB) are replaced by a seeded uniform random subset for the kernel
regression and the backward loss (the starts still come from all rows); no protocol task reaches
it. The paper reports BDI running out of memory on TF-Bind-10, whose full offline set has
millions of rows; the protocol's TF-Bind-10 keeps 10,000.

Deviations from the public code (listed in docs/baselines.md):
* Adam's bias correction: the code passes steps 1..200 to ``jax.example_libraries`` Adam, which
  corrects with step + 1, so its first step is about 0.74 lr; we use standard Adam (torch).
* gamma: the code's default is 0 (used on TF-Bind-8) and its README runs Ant Morphology with
  0.001; we use 0 on discrete and 0.001 on every continuous task (``gamma=None``).
* ``loss="backward"`` (the code's ``distill`` ablation) divides by ``K(x_h, x_h)`` without the
  code's factor (1 + 1e-6), as its ``both`` mode does.
* ``K(x_h, x_h)`` comes from the NTK's diagonal recursion: the same value as the code's general
  formula at x = x', whose gradient there differs from it only by float round-off.
* Offline sets above ``max_rows`` rows are subsampled (see Memory); the code uses every row.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from matchopt.config_fields import by_design_type, count, learning_rate, optional_count
from matchopt.data import OfflineData
from matchopt.encodings import DesignEncoder
from matchopt.errors import MatchoptError
from matchopt.methods.base import Method, search_starts
from matchopt.methods.wrappers import check_fitted, fit_all_or_nothing, in_default_threads
from matchopt.models.ntk import ntk_regression_coefficients, relu_ntk, relu_ntk_diag
from matchopt.search import gradient_ascent, search_start


@dataclass(frozen=True)
class BDIConfig:
    """BDI hyperparameters; defaults are the public code's (GGchen1997/BDI)."""

    depth: int = count(5, minimum=0)
    """ReLU hidden layers of the infinitely wide MLP (the code's six Dense layers)."""
    weight_std: float = 1.0
    """W_std of every Dense layer (neural-tangents' default, NTK parameterization)."""
    bias_std: float = 0.0
    """b_std of every Dense layer; 0 = no bias (neural-tangents 0.3.9's default)."""
    regularization: float = 1e-6
    """Ridge of the forward kernel regression, relative to the mean diagonal of K_XX."""
    label: float = 10.0
    """Target score y_h of the high-scoring designs, in z-scored y units."""
    gamma: float | None = None
    """Backward weights softmax(gamma * y); None = 0 for discrete, 0.001 for continuous designs."""
    loss: str = field(default="both", metadata={"choices": ("both", "forward", "backward")})
    """Mappings in the loss: both (BDI), forward only or backward only (the paper's ablations)."""
    coupling: str = field(default="independent", metadata={"choices": ("independent", "joint")})
    """independent: each design is its own high-scoring set (code); joint: one set of n designs."""
    search_steps: int = count(200, minimum=0)
    """Adam steps on the designs."""
    search_lr: float | None = learning_rate(None)
    """Adam step size; None = 0.1 for discrete designs (logits), 0.001 for continuous ones."""
    init: str = search_start()
    """Search starts: topk (code), random offline rows, or gaussian N(0, I)."""
    max_rows: int | None = optional_count(40_000)
    """Offline rows in the kernel; larger sets become a seeded random subset (None: all rows)."""


QUICK = {"search_steps": 20, "max_rows": 1000}


# --- 1. Forward model: NTK regression on the offline data -------------------------------------


def kernel_rows(n_rows: int, max_rows: int | None, rng: np.random.Generator) -> np.ndarray:
    """Offline rows used by the kernel: all, or ``max_rows`` of them uniformly, in row order."""
    if max_rows is not None and max_rows < 1:
        raise MatchoptError(f"max_rows must be a positive number of rows or None, got {max_rows}")
    if max_rows is None or n_rows <= max_rows:
        return np.arange(n_rows)
    return np.sort(rng.choice(n_rows, size=max_rows, replace=False))


def backward_weights(y: torch.Tensor, gamma: float) -> torch.Tensor:
    """Weights (N,) of the backward loss: ``softmax(gamma * y)`` (uniform 1/N when gamma = 0)."""
    return torch.softmax(gamma * y, dim=0)


# --- 2. Bidirectional loss ---------------------------------------------------------------------


def forward_loss(k_hx: torch.Tensor, coefficients: torch.Tensor, label: float) -> torch.Tensor:
    """``1/2 (K(x_h, X) d - y_h)^2`` per design (n,): the data's prediction at x_h vs the label.

    Args:
        k_hx: kernel between the designs and the offline rows (n x N).
        coefficients: forward regression coefficients d (N,).
        label: target score y_h.
    """
    return 0.5 * (k_hx @ coefficients - label) ** 2


def backward_loss(
    k_hx: torch.Tensor,
    k_hh: torch.Tensor,
    y: torch.Tensor,
    weights: torch.Tensor,
    label: float,
) -> torch.Tensor:
    """``1/2 sum_i w_i (K(X_i, X_h) K(X_h, X_h)^-1 y_h - Y_i)^2``: the designs predict the data.

    Args:
        k_hx: kernel between the designs and the offline rows (n x N).
        k_hh: ``K(x_j, x_j)`` (n,) when every design is its own set (one loss per design, (n,)),
            or the full ``K(X_h, X_h)`` (n x n) when the n designs form one set (a scalar).
        y: offline scores Y (N,).
        weights: backward weights w (N,).
        label: target score y_h of every design.
    """
    if k_hh.ndim == 1:
        predictions = k_hx * (label / k_hh)[:, None]  # (n x N): design j alone predicts the data
        return 0.5 * ((predictions - y) ** 2 * weights).sum(1)
    alpha = torch.linalg.solve(k_hh, torch.full_like(k_hh[:, :1], label))
    predictions = (k_hx.T @ alpha).reshape(-1)
    return 0.5 * ((predictions - y) ** 2 * weights).sum()


def bidirectional_loss(
    designs: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    coefficients: torch.Tensor,
    weights: torch.Tensor,
    config: BDIConfig,
) -> torch.Tensor:
    """The loss minimized over the designs: one value per design (n,), or one for the set.

    Args:
        designs: current designs x_h (n x d).
        x: offline rows X of the kernel (N x d).
        y: their z-scored scores Y (N,).
        coefficients: forward regression coefficients d (N,).
        weights: backward weights w (N,).
        config: kernel, label, ``loss`` and ``coupling``.
    """
    kernel = functools.partial(
        relu_ntk, depth=config.depth, weight_std=config.weight_std, bias_std=config.bias_std
    )
    k_hx = kernel(designs, x)
    joint = config.coupling == "joint"
    total = torch.zeros(() if joint else len(designs), dtype=designs.dtype, device=designs.device)
    if config.loss in ("both", "forward"):
        forward = forward_loss(k_hx, coefficients, config.label)
        total = total + (forward.mean() if joint else forward)
    if config.loss in ("both", "backward"):
        if joint:
            k_hh = kernel(designs, designs)
        else:
            k_hh = relu_ntk_diag(designs, config.depth, config.weight_std, config.bias_std)
        total = total + backward_loss(k_hx, k_hh, y, weights, config.label)
    return total


# --- 3. The method -----------------------------------------------------------------------------


class BDI(Method):
    """BDI (Chen et al., NeurIPS 2022): bidirectional NTK losses minimized from the top designs.

    Args:
        config: :class:`BDIConfig` (paper defaults when ``None``).
        seed: seeds the row subset (offline sets above ``max_rows``) and random starts.
        progress: show progress bars (kernel rows, search steps) on stderr.

    Attributes:
        encoder_: maps designs to normalized features and back.
        rows_: indices of the offline rows in the kernel (all rows unless above ``max_rows``).
        kernel_x_: their normalized features (N x d, float64).
        kernel_y_: their z-scored scores (N,, float64).
        coefficients_: forward regression coefficients d (N,).
        weights_: backward weights w (N,).
    """

    config_class = BDIConfig
    presets = {"paper": {}, "quick": QUICK}

    @fit_all_or_nothing
    def fit(self, data: OfflineData) -> BDI:
        config = self.config_
        if self.device_.type == "mps":  # checked before the N x N kernel is built
            raise MatchoptError(
                "BDI solves its kernel regression in float64, which MPS devices lack; "
                "use device 'cpu' or 'cuda'"
            )
        self.encoder_ = DesignEncoder(data.space).fit(data.x, data.y)
        rng = np.random.default_rng(self.seed)
        self.rows_ = kernel_rows(len(data), config.max_rows, rng)
        rows = data.x[self.rows_]
        x = torch.from_numpy(self.encoder_.encode_x(rows)).double().to(self.device_)
        y = torch.from_numpy(self.encoder_.encode_y(data.y[self.rows_])).double().to(self.device_)
        bar = tqdm(
            total=len(x), desc="BDI kernel", unit="row", disable=not self.progress, leave=False
        )
        self.coefficients_ = ntk_regression_coefficients(
            x,
            y,
            config.regularization,
            config.depth,
            config.weight_std,
            config.bias_std,
            progress=bar.update,
        )
        bar.close()
        self.kernel_x_, self.kernel_y_ = x, y
        gamma = config.gamma
        if gamma is None:
            gamma = 0.0 if data.space.is_discrete else 0.001
        self.weights_ = backward_weights(y, gamma)
        self.data_ = data
        return self

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs: Adam on the bidirectional loss from ``config.init`` starts."""
        check_fitted(self)
        config = self.config_
        starts = torch.from_numpy(search_starts(self, n, config.init))
        starts = starts.to(self.kernel_x_.device)
        bar = tqdm(
            total=config.search_steps,
            desc="BDI search",
            unit="step",
            disable=not self.progress,
            leave=False,
        )

        def negative_loss(designs: torch.Tensor) -> torch.Tensor:
            bar.update()  # called once per step
            return -bidirectional_loss(
                designs, self.kernel_x_, self.kernel_y_, self.coefficients_, self.weights_, config
            )

        final = gradient_ascent(
            negative_loss,
            starts.double(),
            config.search_steps,
            by_design_type(config.search_lr, self.data_.space.is_discrete, 0.1, 0.001),
        )
        bar.close()
        return self.encoder_.decode_x(final.cpu().numpy())

    def predict(self, designs: np.ndarray) -> np.ndarray:
        """Forward NTK-regression predictions (n,) of designs, in the units of the offline y."""
        check_fitted(self)
        designs = self.data_.space.validate(designs)
        features = torch.from_numpy(self.encoder_.encode_x(designs)).double()
        features = features.to(self.kernel_x_.device)
        config = self.config_
        with torch.no_grad():
            k = relu_ntk(features, self.kernel_x_, config.depth, config.weight_std, config.bias_std)
        return self.encoder_.decode_y((k @ self.coefficients_).cpu().numpy())
