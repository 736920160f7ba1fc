"""Per-sample weights that tilt the offline data toward high scores (MINs and DDOM).

Kumar & Levine, "Model Inversion Networks for Model-Based Optimization", NeurIPS 2020 (Sec. 3.3,
"reweighting"), as implemented in design-baselines (``design_baselines/mins/utils.py``,
``get_weights``); Krishnamoorthy, Mashkaria & Grover, "Diffusion Models for Black-Box
Optimization", ICML 2023 (DDOM), reuse the same function (``design_baselines/diff/util.py`` of
github.com/siddarthk97/ddom), with an adaptive temperature.

The scheme, with N scores cut into ``n_bins`` equal-width bins (``numpy.histogram``):

1. ``p_b = n_b / N``: the fraction of the data in bin b (a fraction, not a count: the
   ``p_b / (p_b + eps)`` factor below uses it, as both public codes do).
2. ``q_b = softmax(upper_edge_b / temperature)_b * p_b / (p_b + eps)``, then normalized:
   ``q_b <- q_b / (sum_b q_b + 1e-7)``. The softmax favours bins with high scores; the second
   factor vanishes for empty bins (so they get no mass) and is ~1 elsewhere.
3. A sample in bin b gets ``w = q_b / (p_b + 1e-7)``, clipped to ``[0, clip]``, so that the
   weighted data follow ``q`` over the bins instead of ``p``.

A sample is in bin b when ``upper_edge_{b-1} <= y < upper_edge_b`` (``numpy.digitize`` on the
upper edges, the last bin closed on the right), which agrees with ``numpy.histogram``.

Temperatures: MINs uses a fixed 0.1 on z-scored scores (design-baselines' ``base_temp``);
DDOM uses :func:`adaptive_temperature`, ``|quantile_0.9(y - max y)|`` (at least 1e-3).
"""

from __future__ import annotations

import numpy as np

from matchopt.errors import MatchoptError


def adaptive_temperature(y: np.ndarray, quantile: float = 0.9) -> float:
    """``max(|quantile_q(y - max(y))|, 1e-3)``: design-baselines' / DDOM's ``adaptive_temp_v2``.

    Args:
        y: scores (N,).
        quantile: which quantile of ``y - max(y)`` (DDOM's default 0.9; numpy's linear rule).
    """
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    return float(max(abs(np.quantile(y - y.max(), quantile)), 1e-3))


def score_bin_weights(
    y: np.ndarray,
    temperature: float,
    n_bins: int = 20,
    eps: float = 1e-3,
    clip: float = 5.0,
) -> np.ndarray:
    """Per-sample weights (N,) favouring high scores, as MINs' and DDOM's ``get_weights``.

    Args:
        y: scores (N,), higher is better (both methods pass z-scored scores).
        temperature: softmax temperature over the bins' upper edges (MINs: 0.1; DDOM:
            :func:`adaptive_temperature`).
        n_bins: number of equal-width histogram bins (20 in both codes).
        eps: smoothing of the occupancy factor ``p_b / (p_b + eps)``, p_b = fraction in bin b.
        clip: upper bound of a weight.

    Returns:
        float32 weights (N,) in ``[0, clip]``.
    """
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if len(y) == 0:
        raise MatchoptError("cannot weight an empty set of scores")
    if temperature <= 0:
        raise MatchoptError(f"the weighting temperature must be positive, got {temperature}")
    counts, edges = np.histogram(y, bins=n_bins)
    fraction = counts / counts.sum()
    upper = edges[1:]
    softmax = np.exp((upper - upper.max()) / temperature)
    softmax /= softmax.sum()
    bin_weight = softmax * fraction / (fraction + eps)
    bin_weight /= bin_weight.sum() + 1e-7
    index = np.minimum(np.digitize(y, upper), n_bins - 1)
    weights = bin_weight[index] / (fraction[index] + 1e-7)
    return np.clip(weights, 0.0, clip).astype(np.float32)
