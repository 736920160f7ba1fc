"""Fitting on a table (matchopt.tabular.fit): the ensemble's spread, the fit measured on held-out
rows, targets near the float64 limit, auto's candidates' scores on one scale."""

import re
import warnings

import numpy as np
from table_helpers import (
    numeric_frame,
    run_cli,
)

from matchopt.tabular import (
    ProposalWarning,
    TableOptimizer,
)
from matchopt.tabular.known_tables import mixed_table


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


def test_auto_prints_its_candidates_scores_on_one_scale(capsys, tmp_path):
    frame, _ = mixed_table(rows=160)
    path = tmp_path / "mixed.csv"
    frame.to_csv(path, index=False)
    code, _, err = run_cli(
        capsys, "optimize", path, "--target", "score", "--categorical",
        "catalyst,solvent,ligand", "--method", "auto", "--preset", "quick", "--n", "8",
        "--out", tmp_path / "p.csv",
    )  # fmt: skip
    assert code == 0, err
    line = next(line for line in err.splitlines() if "chose" in line)
    assert "0 to 1" in line
    members = r"(?:matchopt-ens-mix|cma-es|ens-mean-small) ([\d.]+)"
    scores = [float(v) for v in re.findall(members, line)]
    assert len(scores) == 3 and all(0 <= s <= 1 for s in scores), line
