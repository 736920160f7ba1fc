"""Gradient error of MATCH-OPT vs plain regression on the Shekel function (the paper's Fig. 1).

Hoang et al., ICML 2024, Fig. 1: "Comparison of gradient estimation error incurred by MATCH-OPT
and standard regression while learning the gradient field of the Shekel function on 4-dimensional
input space at different out-of-distribution settings where test inputs were drawn from
N(0, alpha I)". Theorem 1 bounds the optimization gap by ``max_x ||grad g(x) - grad g_phi(x)||``;
this study measures that quantity directly.

Read top to bottom:

1. **Target**: the negated 4-d Shekel function (m = 10, the standard centers and widths), so
   that higher is better as everywhere in matchopt, with its analytic gradient.
2. **Data**: ``n_train`` inputs from N(0, I), scored exactly.
3. **Surrogates**, both the paper's MLP (Appendix C: 512 -> 128 -> 32, LeakyReLU 0.3), the same
   initial weights (same seed), Adam with the paper's lr 1e-4, 200 epochs, batch 128, on z-scored
   x and y (:class:`~matchopt.encodings.DesignEncoder`):
   (a) :class:`~matchopt.methods.matchopt.MatchOpt` (gradient matching + value regularizer);
   (b) regression: the mean squared error on minibatches of 128 shuffled rows.
4. **Error**: for each alpha, ``n_test`` inputs ``sqrt(alpha) * z`` with z ~ N(0, I) (covariance
   ``alpha I``; the same z for every alpha, so panels differ only by the scale), and per point
   ``||grad g(x) - grad g_phi(x)||_2`` in the raw units of x and y.

Outputs (each written atomically): ``gradient_error.csv`` (alpha, model, rank, error: every
model's per-point errors sorted ascending, rank 0 = smallest), ``gradient_error_summary.csv``
and ``gradient_error.png`` (one panel per alpha, sorted errors of both models, as in the paper).

pandas and matplotlib are needed here only; they are imported when the study runs.
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from matchopt.data import DesignSpace, OfflineData
from matchopt.encodings import DesignEncoder
from matchopt.errors import MatchoptError
from matchopt.io import atomic_write_bytes, check_output_folder
from matchopt.methods.matchopt import MatchOpt, MatchOptConfig
from matchopt.models.mlp import MLP

if TYPE_CHECKING:
    import pandas as pd

ERRORS_FILE = "gradient_error.csv"
SUMMARY_FILE = "gradient_error_summary.csv"
FIGURE_FILE = "gradient_error.png"
MODELS = ("match-opt", "regression")
#: Colors of the paper's Fig. 1 (MATCH-OPT orange, regression blue).
COLORS = {"match-opt": "tab:orange", "regression": "tab:blue"}

# --- 1. Target: the negated Shekel function ---------------------------------------------------

#: Dimension of the Shekel function (BoTorch's ``Shekel`` is 4-d).
SHEKEL_DIM = 4


@lru_cache(maxsize=1)
def _shekel_function():
    """BoTorch's ``Shekel(m=10)``, negated: ``sum_i 1 / (||x - c_i||^2 + beta_i)``.

    The library of record (the standard centers and widths, 3.6 in the last center). BoTorch
    keeps the constants in float32, so values differ from the float64 formula by up to about
    4e-8 (on values up to 10.54); ``tests/studies/test_gradient_error.py`` checks both.
    """
    from botorch.test_functions import Shekel

    # Unbounded: BoTorch refuses points outside the usual [0, 10]^4 box, where the study also
    # measures gradients; the function is defined everywhere.
    return Shekel(m=10, negate=True, bounds=[(-math.inf, math.inf)] * SHEKEL_DIM)


def _check_shekel_inputs(x: np.ndarray) -> torch.Tensor:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != SHEKEL_DIM:
        raise MatchoptError(f"Shekel inputs must have shape (n, {SHEKEL_DIM}), got {x.shape}")
    return torch.from_numpy(x)


def shekel(x: np.ndarray) -> np.ndarray:
    """Negated Shekel function (to be maximized; the usual Shekel minimum is about -10.536
    at x = (4, 4, 4, 4)).

    Args:
        x: inputs (n x 4).

    Returns:
        Values (n,), float64.
    """
    with torch.no_grad():
        return _shekel_function()(_check_shekel_inputs(x)).double().numpy()


def shekel_gradient(x: np.ndarray) -> np.ndarray:
    """Gradient of :func:`shekel` by autograd (n x 4, float64).

    Args:
        x: inputs (n x 4).
    """
    inputs = _check_shekel_inputs(x).requires_grad_(True)
    (grad,) = torch.autograd.grad(_shekel_function()(inputs).sum(), inputs)
    return grad.double().numpy()


# --- 2. Surrogates ------------------------------------------------------------------------------


def fit_regression(
    features: torch.Tensor,
    scores: torch.Tensor,
    hidden: Sequence[int],
    negative_slope: float,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    progress: bool = False,
) -> tuple[MLP, list[float]]:
    """Plain regression: an :class:`MLP` trained by mean squared error with Adam.

    The MLP is initialized exactly as :class:`MatchOpt` does for the same seed (same weights), so
    the two surrogates differ only in their training loss.

    Args:
        features: normalized inputs (n x d), float32.
        scores: normalized targets (n,), float32.
        hidden: hidden layer widths.
        negative_slope: LeakyReLU slope.
        epochs: passes over the shuffled data.
        lr: Adam learning rate.
        batch_size: rows per optimizer step (the last batch of an epoch may be smaller).
        seed: seeds the initial weights and the shuffling.
        progress: show a progress bar on stderr.

    Returns:
        The trained model (in eval mode) and the mean training loss of every epoch.
    """
    rng = np.random.default_rng(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MLP(features.shape[1], hidden, negative_slope)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True)
    n = features.shape[0]
    losses: list[float] = []
    bar = tqdm(
        range(epochs), desc="regression training", unit="epoch", disable=not progress, leave=False
    )
    for _ in bar:
        order = torch.from_numpy(rng.permutation(n))
        total = 0.0
        for start in range(0, n, batch_size):
            rows = order[start : start + batch_size]
            optimizer.zero_grad()
            loss = (model(features[rows]) - scores[rows]).pow(2).mean()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(rows)
        losses.append(total / n)
        bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
    bar.close()
    model.eval()
    return model, losses


def surrogate_gradient(model: torch.nn.Module, encoder: DesignEncoder, x: np.ndarray) -> np.ndarray:
    """Input gradient of a surrogate in the raw units of x and y.

    The surrogate maps normalized features ``u = (x - mean_x) / std_x`` to a normalized score
    ``v``, and the raw prediction is ``mean_y + std_y * v``, so by the chain rule
    ``d y_raw / d x_j = (std_y / std_x[j]) * d v / d u_j`` for each feature j.

    Args:
        model: surrogate on normalized features (n x d -> n); rows must not interact.
        encoder: the fitted encoder of a continuous design space.
        x: raw inputs (n x d).

    Returns:
        Gradients (n x d), float64.
    """
    if encoder.space.is_discrete:
        raise MatchoptError("raw-unit gradients need a continuous design space")
    params = list(model.parameters())
    dtype = params[0].dtype if params else torch.float32
    features = torch.from_numpy(encoder.encode_x(x)).to(dtype).requires_grad_(True)
    # Rows are independent, so one backward pass of the sum gives every row's gradient.
    (grad,) = torch.autograd.grad(model(features).sum(), features)
    x_std = encoder.x_scaler_.std if encoder.x_scaler_ is not None else 1.0
    y_std = encoder.y_scaler_.std if encoder.y_scaler_ is not None else 1.0
    return grad.detach().numpy().astype(np.float64) * (np.asarray(y_std) / np.asarray(x_std))


def gradient_errors(model: torch.nn.Module, encoder: DesignEncoder, x: np.ndarray) -> np.ndarray:
    """Per-point ``||grad g(x) - grad g_phi(x)||_2`` against the Shekel gradient (n,)."""
    return np.linalg.norm(shekel_gradient(x) - surrogate_gradient(model, encoder, x), axis=1)


# --- 3. The study -------------------------------------------------------------------------------


#: Largest test covariance scale: inputs of std sqrt(1e6) = 1,000 keep the 4-d test function and
#: its gradient finite in float32, where the surrogate is evaluated.
MAX_ALPHA = 1e6
#: Most training or test points.
MAX_POINTS = 10_000_000


def _validate(
    n_train: int, alphas: Sequence[float], n_test: int, epochs: int, lr: float, batch_size: int
) -> tuple[float, ...]:
    if batch_size < 2:
        raise MatchoptError(f"batch_size must be >= 2, got {batch_size}")
    if n_train < batch_size:
        raise MatchoptError(
            f"n_train={n_train} is below batch_size={batch_size} (MATCH-OPT needs one training "
            "point per rank bucket)"
        )
    if n_train > MAX_POINTS or n_test > MAX_POINTS:
        raise MatchoptError(
            f"n_train={n_train:,} and n_test={n_test:,} must be at most {MAX_POINTS:,} each "
            f"(4-d points: {MAX_POINTS:,} take {MAX_POINTS * 4 * 8 / 2**30:.1f} GiB in float64)"
        )
    if n_test < 1:
        raise MatchoptError(f"n_test must be >= 1, got {n_test}")
    if epochs < 1:
        raise MatchoptError(f"epochs must be >= 1, got {epochs}")
    if not lr > 0:
        raise MatchoptError(f"lr must be > 0, got {lr}")
    values = tuple(float(a) for a in alphas)
    if not values:
        raise MatchoptError("alphas must hold at least one value")
    bad = [a for a in values if not (np.isfinite(a) and 0 < a <= MAX_ALPHA)]
    if bad:
        raise MatchoptError(
            f"alphas must be in (0, {MAX_ALPHA:g}] (test inputs from N(0, alpha I) beyond it "
            f"overflow the test function), got {bad[0]:g}"
        )
    if len(set(values)) != len(values):
        raise MatchoptError(f"alphas must be distinct, got {list(values)}")
    return values


def _import_pandas():
    try:
        import pandas as pd
    except ImportError:
        raise MatchoptError(
            "the gradient-error study needs pandas and matplotlib: pip install pandas matplotlib"
        ) from None
    return pd


def _figure_png(errors: pd.DataFrame, alphas: tuple[float, ...]) -> bytes:
    """One panel per alpha with both models' sorted per-point errors, as PNG bytes."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MatchoptError(
            "the gradient-error study needs matplotlib for its figure: pip install matplotlib"
        ) from None
    # A bare Figure renders with Agg and leaves pyplot's global backend alone.
    fig = Figure(figsize=(3.2 * len(alphas), 3.0), layout="constrained")
    axes = fig.subplots(1, len(alphas), squeeze=False)[0]
    for ax, alpha in zip(axes, alphas):
        for model in MODELS:
            rows = errors[(errors["alpha"] == alpha) & (errors["model"] == model)]
            label = "MATCH-OPT" if model == "match-opt" else "regression"
            ax.plot(rows["rank"], rows["error"], color=COLORS[model], label=label, lw=1.5)
        ax.set_title(f"alpha = {alpha:g}")
        # Log scale: the few points near the steep Shekel peak would otherwise flatten the rest.
        ax.set_yscale("log")
        ax.set_xlabel("test point (sorted by error)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("||grad g - grad g_phi||")
    axes[0].legend(loc="lower right")
    buffer = io.BytesIO()
    # No software/date metadata, so the same errors give the same bytes.
    fig.savefig(buffer, format="png", dpi=120, metadata={"Software": None})
    return buffer.getvalue()


def summarize(errors: pd.DataFrame, x_test: dict[float, np.ndarray]) -> pd.DataFrame:
    """Median, mean and max error per (alpha, model), with the median true gradient norm.

    Args:
        errors: the per-point table (alpha, model, rank, error).
        x_test: alpha -> test inputs (n_test x 4), for the scale of the true gradient.
    """
    pd = _import_pandas()
    rows = []
    for (alpha, model), group in errors.groupby(["alpha", "model"], sort=False):
        rows.append(
            {
                "alpha": alpha,
                "model": model,
                "median": float(group["error"].median()),
                "mean": float(group["error"].mean()),
                "max": float(group["error"].max()),
                "true_grad_median": float(
                    np.median(np.linalg.norm(shekel_gradient(x_test[alpha]), axis=1))
                ),
            }
        )
    return pd.DataFrame(rows)


def format_summary(summary: pd.DataFrame) -> str:
    """A plain-text table of :func:`summarize` output, one row per (alpha, model)."""
    lines = [f"{'alpha':>6} {'model':<11} {'median':>9} {'mean':>9} {'max':>9} {'|grad g|':>9}"]
    for row in summary.itertuples(index=False):
        lines.append(
            f"{row.alpha:>6g} {row.model:<11} {row.median:>9.4f} {row.mean:>9.4f} "
            f"{row.max:>9.4f} {row.true_grad_median:>9.4f}"
        )
    return "\n".join(lines)


def _error_table(surrogates: dict, x_test: dict) -> Any:
    """Each surrogate's gradient errors at the test inputs of each alpha, sorted: columns
    alpha, model, rank, error."""
    pd = _import_pandas()
    tables = []
    for alpha, x in x_test.items():
        for name, (model, model_encoder) in surrogates.items():
            errors = np.sort(gradient_errors(model, model_encoder, x))
            tables.append(
                pd.DataFrame(
                    {"alpha": alpha, "model": name, "rank": np.arange(len(x)), "error": errors}
                )
            )
    return pd.concat(tables, ignore_index=True)


def _shekel_data(
    n_train: int, alphas: Sequence[float], n_test: int, seed: int
) -> tuple[OfflineData, dict[float, np.ndarray]]:
    """Training rows drawn from N(0, I) with their Shekel values, and test inputs per alpha
    drawn from N(0, alpha I) (one draw, scaled)."""
    dim = SHEKEL_DIM
    x_train = np.random.default_rng([seed, 0]).standard_normal((n_train, dim))
    data = OfflineData(x_train, shekel(x_train), DesignSpace.continuous(dim))
    z_test = np.random.default_rng([seed, 1]).standard_normal((n_test, dim))
    return data, {alpha: np.sqrt(alpha) * z_test for alpha in alphas}


def _train_surrogates(
    data: OfflineData, config: MatchOptConfig, seed: int, progress: bool
) -> dict[str, tuple[torch.nn.Module, DesignEncoder]]:
    """MATCH-OPT and regression trained on ``data`` with the same network, epochs, learning rate
    and batch size (MATCH-OPT's trajectory length): name -> (model, its encoder)."""
    matchopt = MatchOpt(config, seed=seed, progress=progress).fit(data)
    encoder = DesignEncoder(data.space).fit(data.x, data.y)
    regression, _ = fit_regression(
        torch.from_numpy(encoder.encode_x(data.x)),
        torch.from_numpy(encoder.encode_y(data.y)),
        hidden=config.hidden,
        negative_slope=config.negative_slope,
        epochs=config.epochs,
        lr=config.lr,
        batch_size=config.trajectory_length,
        seed=seed,
        progress=progress,
    )
    return {
        "match-opt": (matchopt.model_, matchopt.encoder_),
        "regression": (regression, encoder),
    }


def run_gradient_error_study(
    out_dir: str | Path,
    n_train: int = 1_000,
    alphas: Sequence[float] = (0.1, 0.2, 0.5, 1.0),
    n_test: int = 1_000,
    seed: int = 0,
    epochs: int = 200,
    lr: float = 1e-4,
    batch_size: int = 128,
    hidden: Sequence[int] = MatchOptConfig.hidden,
    progress: bool = False,
) -> pd.DataFrame:
    """Train MATCH-OPT and regression on Shekel data; write per-point gradient errors and a figure.

    Defaults follow the paper's MATCH-OPT configuration (Appendix C) for both surrogates; every
    other MATCH-OPT setting (trapezoid quadrature, kappa 5, value regularizer 1) is the paper's.

    Args:
        out_dir: folder for ``gradient_error.csv``, ``gradient_error_summary.csv`` and
            ``gradient_error.png`` (created if missing; existing files are replaced).
        n_train: training inputs drawn from N(0, I) in 4-d.
        alphas: test covariance scales: test inputs are drawn from N(0, alpha I).
        n_test: test inputs per alpha.
        seed: seeds the data, the test inputs, the initial weights and the training order.
        epochs: training epochs of both surrogates.
        lr: Adam learning rate of both surrogates.
        batch_size: MATCH-OPT's trajectory length (rank buckets) and regression's batch size.
        hidden: hidden layer widths of both MLPs.
        progress: show progress bars on stderr.

    Returns:
        The summary: one row per (alpha, model) with median, mean and max error, and the median
        norm of the true gradient at the test inputs.
    """
    _import_pandas()  # without pandas, fail before training
    alphas = _validate(n_train, alphas, n_test, epochs, lr, batch_size)
    out_dir = check_output_folder(out_dir, "study folder")  # before training, as the others
    data, x_test = _shekel_data(n_train, alphas, n_test, seed)
    config = dataclasses.replace(
        MatchOptConfig(), epochs=epochs, lr=lr, trajectory_length=batch_size, hidden=tuple(hidden)
    )
    surrogates = _train_surrogates(data, config, seed, progress)
    errors = _error_table(surrogates, x_test)
    summary = summarize(errors, x_test)

    atomic_write_bytes(out_dir / ERRORS_FILE, errors.to_csv(index=False).encode())
    atomic_write_bytes(out_dir / SUMMARY_FILE, summary.to_csv(index=False).encode())
    atomic_write_bytes(out_dir / FIGURE_FILE, _figure_png(errors, alphas))
    return summary
