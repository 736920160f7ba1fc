"""Fitting on a table (matchopt.tabular.fit): the ensemble's spread, the fit measured on held-out
rows, targets near the float64 limit."""

import warnings

import numpy as np
from table_helpers import (
    numeric_frame,
)

from matchopt.tabular import (
    ProposalWarning,
    TableOptimizer,
)


def test_targets_near_the_float64_limit_give_finite_predictions():
    frame = numeric_frame(n=200)
    frame["y"] = frame["y"] / frame["y"].abs().max() * 1e300
    opt = TableOptimizer(target="y", method="matchopt", preset="quick", seed=0).fit(frame)
    proposals = opt.propose(8)
    assert len(proposals) == 8 and np.isfinite(proposals["predicted_y"]).all()
    assert proposals["predicted_y"].abs().max() > 1e297  # in the user's units, not rescaled
    # The ensemble's spread too (the std of the decoded members would square 1e300).
    spread = proposals["predicted_y_std"]
    assert np.isfinite(spread).all() and (spread >= 0).all() and spread.max() > 1e290


def test_proposals_carry_an_ensemble_spread_and_the_fit_is_measured_on_held_out_rows():
    opt = TableOptimizer(target="y", method="ga", preset="quick", seed=0).fit(numeric_frame(80))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProposalWarning)
        proposals = opt.propose(8)
    spread = proposals["predicted_y_std"]
    assert np.isfinite(spread).all() and (spread >= 0).all() and (spread > 0).any()
    quality = opt.fit_quality_
    # Every row is held out once by the cross-validation by design.
    assert quality["n_test"] == 80 and -1 <= quality["spearman"] <= 1 and quality["r2"] <= 1
    assert "5 folds by design" in quality["what"] and 0 <= quality["coverage"] <= 1
