"""How far a table's predictions can be trusted (matchopt.tabular.calibration): cross-validation
by design, conformal intervals, coverage, the extrapolation flag.

The tables of :mod:`matchopt.tabular.known_tables` (true functions known) are the cases."""

import re
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from table_helpers import run_cli

from matchopt.data import OfflineData
from matchopt.errors import MatchoptError
from matchopt.tabular import ProposalWarning, TableOptimizer
from matchopt.tabular.calibration import (
    CONFIDENCE,
    Calibration,
    conformal_quantile,
    design_folds,
)
from matchopt.tabular.known_tables import noise_table, smooth_table


def test_noise_table_shows_no_skill_when_designs_are_held_out(capsys, tmp_path):
    frame, _ = noise_table(sequences=150, replicates=3)
    path = tmp_path / "dna_noise.csv"
    frame.to_csv(path, index=False)
    code, _, err = run_cli(
        capsys, "optimize", path, "--target", "activity", "--sequence", "seq",
        "--method", "random", "--n", "8", "--out", tmp_path / "x.csv",
    )  # fmt: skip
    assert code == 0, err
    line = next(line for line in err.splitlines() if "held-out fit" in line)
    spearman = float(re.search(r"Spearman (-?[\d.]+)", line).group(1))
    assert abs(spearman) <= 0.2, line
    assert "150 designs" in line and "450 rows" in line and "stay together" in line
    # The same ensemble on a split of rows (replicates on both sides) reports skill that is
    # not there: the test above can fail.
    opt = TableOptimizer(target="activity", sequence="seq", method="random", seed=0).fit(frame)
    test = np.random.default_rng(0).permutation(len(frame))[:90]
    train = np.setdiff1d(np.arange(len(frame)), test)
    data = opt.data_
    encoder, ensemble = opt._fit_ensemble(
        OfflineData(data.x[train], data.y[train], data.space), progress=False
    )
    leaky, _ = opt._ensemble_prediction(data.x[test], encoder, ensemble)
    assert stats.spearmanr(leaky, data.y[test]).statistic > 0.4


def test_design_folds_keep_designs_together_and_say_how():
    groups = np.repeat(np.arange(40), 2)
    folds, words = design_folds(groups, seed=0)
    assert len(folds) == 5
    for train, test in folds:
        assert not set(groups[train]) & set(groups[test])
    assert "5 folds by design" in words and "about 8 of the 40 designs" in words
    assert "stay together" in words
    none, why = design_folds(np.arange(6), seed=0)
    assert none == [] and "6 distinct designs" in why


def test_conformal_intervals_cover_new_exchangeable_rows():
    rng = np.random.default_rng(0)
    spread = rng.uniform(0.5, 2.0, 4000)
    residual = rng.normal(size=4000) * spread
    q = conformal_quantile(residual[:2000], spread[:2000], CONFIDENCE)
    coverage = np.mean(np.abs(residual[2000:]) <= q * spread[2000:])
    assert abs(coverage - CONFIDENCE) < 0.03
    with pytest.raises(MatchoptError, match="coverage must be in"):
        Calibration(0.9, 1.0, 1.0, 0.0, 1.0, 1.0, coverage=1.5)


def test_smooth_table_top_prediction_is_flagged_or_covered():
    frame, truth = smooth_table()
    # The paper preset's predictor (5 members, 100 epochs): the quick one is too weak to
    # calibrate (benchmarks/trust_tables.py runs the recommended method).
    opt = TableOptimizer(target="y", method="random", seed=0).fit(frame)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ProposalWarning)
        proposals = opt.propose(16)
    top = proposals.iloc[0]
    true_top = truth(proposals.iloc[:1])[0]
    assert top["extrapolated"] or top["predicted_y_low"] <= true_top <= top["predicted_y_high"]
    assert (proposals["predicted_y_low"] <= proposals["predicted_y_high"]).all()
    flagged = proposals["extrapolated"].sum()
    said = [str(w.message) for w in caught if "extrapolations" in str(w.message)]
    assert bool(flagged) == bool(said)
    if said:
        assert f"{flagged} of the 16 predictions are extrapolations" in said[0]
    # Coverage on held-out designs is measured and near the confidence asked for.
    assert 0.8 <= opt.calibration_.coverage <= 1.0


def test_a_design_far_from_the_data_is_flagged():
    frame, _ = smooth_table(rows=120)
    opt = TableOptimizer(target="y", method="random", preset="quick", seed=0).fit(frame)
    near = frame.drop(columns="y").iloc[:3] + 0.01
    far = pd.DataFrame([[9.0] * 6], columns=near.columns)  # outside the box, far from all rows
    with pytest.warns(ProposalWarning, match="farther than .* from every measured row"):
        ranked = opt.rank(pd.concat([near, far], ignore_index=True))
    flags = dict(zip(ranked["x1"], ranked["extrapolated"]))
    assert flags[9.0] and not any(flags[v] for v in near["x1"])


def test_one_split_coverage_keeps_each_design_in_one_half():
    from matchopt.tabular.calibration import coverage_folds

    rng = np.random.default_rng(2)
    groups = rng.permutation(np.repeat(np.arange(200), 3))  # replicates not adjacent
    fold_of = np.where(groups < 100, 0, -1)  # one split: designs 0-99 held out
    halves = coverage_folds(fold_of, groups)
    held = fold_of >= 0
    assert set(halves[held]) == {0, 1} and (halves[~held] == -1).all()
    for design in range(100):
        assert len(set(halves[groups == design])) == 1
    assert abs((halves[held] == 0).sum() - 150) <= 3  # about half the rows each
    five = np.where(held, groups % 5, -1)  # several folds: unchanged
    assert np.array_equal(coverage_folds(five, groups), five)
