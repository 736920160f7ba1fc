"""How far `matchopt optimize` can be trusted: hold-outs by design, calibrated intervals, the
extrapolation flag, distinct proposals, candidates, the report, and outputs never overwritten.

The three tables of :mod:`matchopt.tabular.known_tables` (true functions known) are the cases."""

import re
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from matchopt.cli import main
from matchopt.data import OfflineData, design_groups
from matchopt.errors import MatchoptError
from matchopt.tabular import ProposalWarning, TableOptimizer
from matchopt.tabular.calibration import (
    CONFIDENCE,
    Calibration,
    conformal_quantile,
    design_folds,
)
from matchopt.tabular.known_tables import mixed_table, noise_table, smooth_table
from matchopt.validation import holdout_rows


def run_cli(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- Hold-outs by design --------------------------------------------------------------------------


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


def test_holdout_rows_keep_the_rows_of_one_design_together():
    rng = np.random.default_rng(1)
    x = np.repeat(rng.integers(0, 4, (60, 5)), 3, axis=0)[rng.permutation(180)]
    groups = design_groups(x)
    y = rng.normal(size=180)
    for kind in ("random", "top"):
        train, held = holdout_rows(y, 0.2, kind, seed=0, groups=groups)
        assert not set(groups[train]) & set(groups[held])
        assert len(set(groups[held])) == round(0.2 * len(set(groups)))
    # One design per row: the split of the rows themselves, unchanged.
    y = rng.normal(size=50)
    for kind in ("random", "top"):
        plain = holdout_rows(y, 0.1, kind, seed=3)
        grouped = holdout_rows(y, 0.1, kind, seed=3, groups=np.arange(50))
        assert all(np.array_equal(a, b) for a, b in zip(plain, grouped))


def test_the_validated_preset_holds_out_whole_designs():
    frame, _ = noise_table(sequences=60, replicates=3)
    opt = TableOptimizer(
        target="activity", sequence="seq", method="matchopt", preset="validated-quick",
        overrides={"trajectory_length": 8}, seed=0,
    ).fit(frame)  # fmt: skip
    data, validator = opt.data_, opt.method_.validator_
    scores = opt.method_.encoder_.encode_y(data.y).astype(validator.y.dtype)
    held = np.isin(scores, validator.y)
    held_designs = {tuple(row) for row in data.x[held]}
    counts = pd.Series([tuple(row) for row in data.x]).value_counts()
    assert held_designs and all(counts[d] == 3 for d in held_designs)
    # Every replicate of a held-out design is held out (its three scores are among the held).
    for design in held_designs:
        rows = np.flatnonzero((data.x == np.array(design)).all(1))
        assert held[rows].all()


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


# --- Intervals and the extrapolation flag ---------------------------------------------------------


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


# --- Distinct proposals ---------------------------------------------------------------------------


def test_proposals_of_a_table_of_columns_are_distinct_experiments():
    frame, _ = smooth_table(rows=150)
    opt = TableOptimizer(target="y", method="ga", preset="quick", seed=0).fit(frame)
    assert opt.diversity_ == 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProposalWarning)
        proposals = opt.propose(24)
    designs = opt.schema_.encode(proposals)
    for i in range(1, len(designs)):
        assert opt.schema_.nearest_distances(designs[i : i + 1], designs[:i])[0] >= 0.5
    sequences, _ = noise_table(sequences=40, replicates=1)
    seq = TableOptimizer(target="activity", sequence="seq", method="random", preset="quick")
    assert seq.fit(sequences).diversity_ == 0.0  # two different sequences are distinct


# --- Candidates -----------------------------------------------------------------------------------


def test_predict_and_rank_a_library_of_candidates(capsys, tmp_path):
    frame, _ = mixed_table(rows=120)
    settings = dict(target="score", categorical=["catalyst", "solvent", "ligand"], seed=0)
    opt = TableOptimizer(**settings, method="ga", preset="quick").fit(frame)
    library = mixed_table(rows=60, seed=1)[0].drop(columns="score")
    predicted = opt.predict(library)
    assert list(predicted.columns[:6]) == list(library.columns)
    pd.testing.assert_frame_equal(predicted[library.columns], library)  # the given order
    for column in ("predicted_score_low", "predicted_score_high", "extrapolated"):
        assert column in predicted
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProposalWarning)
        ranked = opt.rank(library)
    assert ranked["ranking_score"].is_monotonic_decreasing
    # Bad candidates: one line naming the file, column and row.
    odd = library.copy()
    odd.loc[3, "ligand"] = "DavePhos"
    with pytest.raises(MatchoptError, match=r"ligand.* row 4.*'DavePhos' was not in the measured"):
        opt.predict(odd, source="lib.csv")
    with pytest.raises(MatchoptError, match=r"lib.csv: no column time"):
        opt.predict(library.drop(columns="time"), source="lib.csv")
    # The CLI: optimize --candidates, and propose --model --candidates, rank alike.
    data, lib = tmp_path / "data.csv", tmp_path / "lib.csv"
    frame.to_csv(data, index=False)
    library.to_csv(lib, index=False)
    common = ["--target", "score", "--categorical", "catalyst,solvent,ligand", "--method", "ga",
              "--preset", "quick"]  # fmt: skip
    code, out, err = run_cli(
        capsys, "optimize", data, *common, "--candidates", lib, "--out", tmp_path / "a.csv",
        "--save-model", tmp_path / "m.pt",
    )  # fmt: skip
    assert code == 0, err
    assert "60 ranked candidates ->" in out and "a.report.html" in out
    code, out, err = run_cli(
        capsys, "propose", "--model", tmp_path / "m.pt", "--candidates", lib,
        "--out", tmp_path / "b.csv",
    )  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    code, _, err = run_cli(
        capsys, "propose", "--model", tmp_path / "m.pt", "--candidates", tmp_path / "none.csv",
        "--out", tmp_path / "c.csv",
    )  # fmt: skip
    assert code == 2 and "none.csv" in err and len(err.strip().splitlines()) == 1


# --- A per-table choice on one scale --------------------------------------------------------------


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


# --- Outputs --------------------------------------------------------------------------------------


def test_outputs_that_exist_are_refused_unless_forced(capsys, tmp_path):
    frame, _ = smooth_table(rows=60)
    data = tmp_path / "data.csv"
    frame.to_csv(data, index=False)
    common = ["optimize", data, "--target", "y", "--method", "random", "--preset", "quick",
              "--n", "4"]  # fmt: skip
    for option, name in (("--out", "p.csv"), ("--report", "r.html"), ("--save-model", "m.pt")):
        path = tmp_path / name
        path.write_text("mine\n")
        extra = [] if option == "--out" else ["--out", tmp_path / f"o{name}.csv"]
        code, _, err = run_cli(capsys, *common, *extra, option, path)
        assert code == 2 and f"{option} {path} exists; add --force" in err, err
        assert path.read_text() == "mine\n"
        code, _, err = run_cli(capsys, *common, *extra, option, path, "--force")
        assert code == 0, err and path.read_text() != "mine\n"
    # The default report beside the proposals is never replaced unasked.
    (tmp_path / "q.report.html").write_text("mine\n")
    code, _, err = run_cli(capsys, *common, "--out", tmp_path / "q.csv")
    assert code == 2 and "the default of --report" in err
    assert not (tmp_path / "q.csv").exists()


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
