"""How far to trust a table's predictions: cross-validation by design, conformal intervals and
the extrapolation flag.

Read top to bottom:

1. **Designs.** Rows with equal features are one design (replicated measurements of it):
   :func:`matchopt.data.design_groups`. Every hold-out below keeps a design's rows together, so
   a held-out design is one the predictor has never seen, as a proposal is.
2. **Cross-validation by design** (:func:`design_folds`, :func:`cross_validate`): the predictor
   (an ensemble of Gaussian MLPs) is refitted without each fold of designs and predicts it:
   5 folds (scikit-learn's ``GroupKFold``, shuffled by the seed) up to
   :data:`MANY_DESIGNS` designs; above that, one split holding out :data:`HELD_OUT_DESIGNS`
   designs (``GroupShuffleSplit``), since five refits of a large table cost minutes. Every
   held-out row gets an out-of-fold mean ``mu`` and member spread ``s``.
3. **Intervals** (:class:`Calibration`): normalized split-conformal prediction (crepes'
   ``ConformalRegressor``) on the out-of-fold residuals: the nonconformity of a row is
   ``|y - mu| / (s + beta)``, with ``beta`` the median out-of-fold spread (so that half of a
   typical width is fixed and half follows the ensemble's disagreement), and the interval of a
   new design is ``mu +- q (s + beta)``, ``q`` the conformal quantile at ``confidence``.
   Coverage on held-out designs is measured by cross-fitting: each fold's rows against the
   quantile of the other folds' rows (:func:`held_out_coverage`).
4. **Extrapolation** (:meth:`Calibration.flags`): a prediction is flagged when
   - *value*: it lies beyond the best measured value by more than the interval's half-width at
     a typical design (``q * (median s + beta)``): cross-validation measured errors only inside
     the measured range, so a larger predicted gain is not supported by the table;
   - *design*: it lies farther from its nearest measured row than 95% of the measured designs
     lie from their nearest other design (:func:`far_distance`).

Proposals are off the data's distribution by construction, so their coverage is lower than the
held-out designs' (docs/own-data.md measures both on the suite's tasks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from crepes import ConformalRegressor
from sklearn.model_selection import GroupKFold, GroupShuffleSplit

from matchopt.errors import MatchoptError

#: Share of held-out designs the intervals are meant to cover.
CONFIDENCE = 0.9
#: Folds of the cross-validation.
FOLDS = 5
#: Above this many designs: one split holding out HELD_OUT_DESIGNS of them.
MANY_DESIGNS = 5_000
HELD_OUT_DESIGNS = 1_000
#: Fewest distinct designs that are cross-validated (fewer: no intervals).
MIN_DESIGNS = 10
#: Measured designs whose nearest-neighbour distances set the "far" distance (a sample above).
DISTANCE_SAMPLE = 2_000
#: The "far" distance: this quantile of the measured designs' nearest-other distances.
FAR_QUANTILE = 0.95


def design_folds(groups: np.ndarray, seed: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:
    """Train/test row indices of the cross-validation by design, and how it was split in words.

    Args:
        groups: the design of each row (:func:`matchopt.data.design_groups`).
        seed: seeds the shuffle of the designs.

    Returns:
        (folds, description); no folds (and the reason) below :data:`MIN_DESIGNS` designs.
    """
    groups = np.asarray(groups)
    n_designs, n_rows = len(np.unique(groups)), len(groups)
    together = (
        "replicate rows of one design stay together" if n_designs < n_rows else "one row per design"
    )
    if n_designs < MIN_DESIGNS:
        return [], f"not cross-validated: {n_designs} distinct designs (at least {MIN_DESIGNS})"
    rows = np.arange(n_rows)
    if n_designs <= MANY_DESIGNS:
        splitter = GroupKFold(n_splits=FOLDS, shuffle=True, random_state=seed)
        folds = list(splitter.split(rows, groups=groups))
        held = round(n_designs / FOLDS)
        words = (
            f"{FOLDS} folds by design: each holds out about {held:,} of the {n_designs:,} "
            f"designs and fits on the other {n_designs - held:,} ({n_rows:,} rows; {together})"
        )
        return folds, words
    splitter = GroupShuffleSplit(n_splits=1, test_size=HELD_OUT_DESIGNS, random_state=seed)
    folds = list(splitter.split(rows, groups=groups))
    return folds, (
        f"one split by design: {HELD_OUT_DESIGNS:,} of the {n_designs:,} designs held out, "
        f"fitted on the other {n_designs - HELD_OUT_DESIGNS:,} ({len(folds[0][1]):,} of "
        f"{n_rows:,} rows held out; {together})"
    )


def cross_validate(
    folds: Iterable[tuple[np.ndarray, np.ndarray]],
    n_rows: int,
    fit_predict: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Out-of-fold predictions.

    Args:
        folds: from :func:`design_folds`.
        n_rows: rows of the table.
        fit_predict: ``(train_rows, test_rows) -> (mean, spread)`` of the test rows, fitted on
            the train rows alone.

    Returns:
        (mean, spread, fold) per row; NaN and fold -1 for rows no fold held out.
    """
    mean, spread = np.full(n_rows, np.nan), np.full(n_rows, np.nan)
    fold_of = np.full(n_rows, -1, dtype=np.int64)
    for index, (train, test) in enumerate(folds):
        mean[test], spread[test] = fit_predict(train, test)
        fold_of[test] = index
    return mean, spread, fold_of


def conformal_quantile(
    residuals: np.ndarray, widths: np.ndarray, confidence: float = CONFIDENCE
) -> float:
    """The normalized conformal quantile ``q``: ``|residual| <= q * width`` holds for about
    ``confidence`` of new rows exchangeable with these (crepes' ``ConformalRegressor``; inf when
    too few rows calibrate that confidence)."""
    regressor = ConformalRegressor().fit(residuals=np.asarray(residuals), sigmas=widths)
    interval = regressor.predict_int(y_hat=np.zeros(1), sigmas=np.ones(1), confidence=confidence)
    return float(interval[0, 1])


def held_out_coverage(
    y: np.ndarray,
    mean: np.ndarray,
    widths: np.ndarray,
    fold_of: np.ndarray,
    groups: np.ndarray,
    confidence: float = CONFIDENCE,
) -> float:
    """Share of held-out rows inside their interval when each fold's quantile is calibrated on
    the other folds alone (with one fold: half its designs against the other half and back; a
    design's rows stay in one half)."""
    held = fold_of >= 0
    fold_of = coverage_folds(fold_of, groups)
    folds = np.unique(fold_of[held])
    inside = np.zeros(len(y), dtype=bool)
    for fold in folds:
        test, calibrate = fold_of == fold, held & (fold_of != fold)
        q = conformal_quantile(y[calibrate] - mean[calibrate], widths[calibrate], confidence)
        inside[test] = np.abs(y[test] - mean[test]) <= q * widths[test]
    return float(inside[held].mean())


def coverage_folds(fold_of: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The folds :func:`held_out_coverage` checks: the cross-validation's, or with one split,
    its designs in two halves (alternate designs by first row; a design's rows in one half)."""
    held = fold_of >= 0
    folds = np.unique(fold_of[held])
    if len(folds) != 1:
        return fold_of
    designs, first = np.unique(groups[held], return_index=True)
    second = designs[np.argsort(first, kind="stable")][1::2]
    halves = fold_of.copy()
    halves[held & np.isin(groups, second)] = folds[0] + 1
    return halves


def far_distance(
    distances_to_others: Callable[[np.ndarray], np.ndarray], n_designs: int, seed: int
) -> float:
    """The :data:`FAR_QUANTILE` of the measured designs' distances to their nearest other design
    (a seeded sample of :data:`DISTANCE_SAMPLE` designs in larger tables).

    Args:
        distances_to_others: distinct-design indices -> each one's distance to its nearest
            other distinct design.
        n_designs: distinct designs.
        seed: seeds the sample.
    """
    if n_designs < 2:
        return float("inf")
    return float(np.quantile(distances_to_others(design_sample(n_designs, seed)), FAR_QUANTILE))


def design_sample(n_designs: int, seed: int) -> np.ndarray:
    """Indices of the distinct designs whose nearest-other distances are measured: all of them,
    or a seeded sample of :data:`DISTANCE_SAMPLE` in larger tables."""
    if n_designs <= DISTANCE_SAMPLE:
        return np.arange(n_designs)
    rng = np.random.default_rng([seed, 11])
    return np.sort(rng.choice(n_designs, DISTANCE_SAMPLE, replace=False))


@dataclass(frozen=True)
class Calibration:
    """What a table's cross-validation says of its predictions (module notes, 3-4).

    Scores are in matchopt's units (maximized: the target negated when minimizing).

    Attributes:
        confidence: the intervals' intended coverage.
        quantile: the conformal quantile ``q``.
        beta: the width added to every spread (median out-of-fold spread).
        best: the best measured score.
        half_width: the interval's half-width at a typical design, ``q * (median s + beta)``.
        far: the distance beyond which a design is far from the data.
        coverage: measured coverage on held-out designs (cross-fitted).
    """

    confidence: float
    quantile: float
    beta: float
    best: float
    half_width: float
    far: float
    coverage: float

    def __post_init__(self) -> None:
        if not 0 < self.confidence < 1:
            raise MatchoptError(f"confidence must be in (0, 1), got {self.confidence!r}")
        for name in ("quantile", "beta", "half_width", "far"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value >= 0:  # inf allowed, NaN not
                raise MatchoptError(f"{name} must be a number >= 0, got {value!r}")
        if not isinstance(self.best, (int, float)) or not np.isfinite(self.best):
            raise MatchoptError(f"best must be a finite number, got {self.best!r}")
        if not isinstance(self.coverage, (int, float)) or not 0 <= self.coverage <= 1:
            raise MatchoptError(f"coverage must be in [0, 1], got {self.coverage!r}")

    @classmethod
    def from_cross_validation(
        cls,
        y: np.ndarray,
        mean: np.ndarray,
        spread: np.ndarray,
        fold_of: np.ndarray,
        groups: np.ndarray,
        far: float,
        confidence: float = CONFIDENCE,
    ) -> Calibration:
        """Fit the intervals on the out-of-fold predictions (:func:`cross_validate`; ``groups``:
        the design of each row)."""
        held = fold_of >= 0
        typical = float(np.median(spread[held]))
        # A floor keeps every width positive where the members agree exactly.
        beta = max(typical, 1e-6 * (float(np.max(np.abs(y))) or 1.0))  # no square: no overflow
        widths = spread + beta
        q = conformal_quantile(y[held] - mean[held], widths[held], confidence)
        return cls(
            confidence=confidence,
            quantile=q,
            beta=beta,
            best=float(np.max(y)),
            half_width=q * (typical + beta),
            far=float(far),
            coverage=held_out_coverage(y, mean, widths, fold_of, groups, confidence),
        )

    def interval(self, mean: np.ndarray, spread: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of the predictions ``mean`` with member spread ``spread``."""
        half = self.quantile * (np.asarray(spread) + self.beta)
        return np.asarray(mean) - half, np.asarray(mean) + half

    def flags(self, mean: np.ndarray, distance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(beyond the measured values, far from the measured designs) per prediction."""
        return np.asarray(mean) > self.best + self.half_width, np.asarray(distance) > self.far
