"""Proposing on a fitted table (matchopt.tabular.propose): categories, top-ups, neighbours,
diversity (distinct experiments), ranking a library of candidates, and the warnings a scientist
needs."""

import warnings

import numpy as np
import pandas as pd
import pytest
from table_helpers import (
    SOLVENTS,
    assert_new_and_unique,
    mixed_frame,
    numeric_frame,
    run_cli,
    sequence_frame,
)

from matchopt.errors import MatchoptError
from matchopt.tabular import (
    ProposalWarning,
    TableOptimizer,
)
from matchopt.tabular.known_tables import mixed_table, noise_table, smooth_table


def solvent_effect_frame(n: int = 200) -> pd.DataFrame:
    """Ethanol adds 0.3 anywhere, but was measured only at poor values of a (a < 0.3): the best
    rows hold all three solvents, and the best designs are ethanol at a = 0.7, b = 0.5."""
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    poor = rng.choice(["ethanol", "water"], n)
    solvent = np.where(a < 0.3, poor, rng.choice(["water", "dmso"], n))
    y = -((a - 0.7) ** 2) - (b - 0.5) ** 2 + 0.3 * (solvent == "ethanol")
    return pd.DataFrame({"a": a, "b": b, "solvent": solvent, "y": y})


@pytest.mark.parametrize("method", ["ga", "random"])
def test_categories_are_searched_by_default_and_kept_on_request(method):
    frame = solvent_effect_frame()
    top = frame.nlargest(32, "y")["solvent"]
    assert (top == "ethanol").mean() < 0.5
    settings = dict(
        target="y", categorical=["solvent"], method=method, preset="quick", seed=0, diversity=0
    )  # the categories as searched, none dropped for lying near another proposal
    searched = TableOptimizer(**settings).fit(frame)
    proposals = searched.propose(32)
    assert (proposals["solvent"] == "ethanol").mean() > 0.9
    # Each proposal's solvent is the one its ranking surrogate predicts best for the rest of it.
    designs = searched.schema_.encode(proposals)
    (_, block), *_ = searched.schema_.category_blocks()
    width = block.stop - block.start
    tried = []
    for category in range(width):
        trial = designs.copy()
        trial[:, block] = np.eye(width)[category]
        tried.append(searched._predict(trial))
    best = np.max(tried, axis=0)
    np.testing.assert_allclose(searched._predict(designs), best, rtol=1e-6)
    kept = TableOptimizer(**settings, categories="keep").fit(frame).propose(32)
    if method == "ga":  # paths from the 32 best rows: their solvents, unchanged
        assert sorted(kept["solvent"]) == sorted(top)
    assert (kept["solvent"] == "ethanol").mean() < 0.5
    with pytest.raises(MatchoptError, match="categories must be one of search, keep"):
        TableOptimizer(**settings, categories="all").fit(frame)


def test_categorical_only_table_and_shortfall_warning():
    # 3 x 2 possible designs, 4 measured: at most 2 new ones exist.
    frame = pd.DataFrame(
        {"s": ["x", "y", "z", "x"], "t": ["p", "p", "p", "q"], "y": [1.0, 2.0, 3.0, 4.0]}
    )
    opt = TableOptimizer(
        target="y", categorical=["s", "t"], method="random", preset="quick", seed=0
    ).fit(frame)
    with pytest.warns(ProposalWarning, match=r"only 2 new designs \(asked for 10\)"):
        proposals = opt.propose(10)
    assert {tuple(r) for r in proposals[["s", "t"]].itertuples(index=False)} == {
        ("y", "q"),
        ("z", "q"),
    }
    # One differing category = distance 1.
    np.testing.assert_allclose(proposals["nearest_euclidean"], 1.0)


def test_method_designs_come_first_and_duplicates_are_topped_up():
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({c: rng.choice(["p", "q", "r"], 12) for c in "stu"})
    frame["y"] = rng.normal(size=12)
    opt = TableOptimizer(
        target="y", categorical=["s", "t", "u"], method="random", preset="quick", seed=1
    ).fit(frame)
    own = opt.schema_.decode(opt.method_.propose(8))
    measured = {tuple(r) for r in frame[["s", "t", "u"]].itertuples(index=False)}
    own_new = {tuple(r) for r in own.itertuples(index=False)} - measured
    assert len(own_new) < 8  # the method's own 8 designs hold repeats: a top-up is needed
    proposals = opt.propose(8)
    keys = {tuple(r) for r in proposals[["s", "t", "u"]].itertuples(index=False)}
    assert len(proposals) == 8 and own_new <= keys
    assert_new_and_unique(proposals, frame, ["s", "t", "u"])
    assert opt.n_candidates_ == 8 + 32  # own 8, then oversample 4 x 8


def test_given_alphabet_may_hold_unseen_letters():
    frame = sequence_frame()
    opt = TableOptimizer(
        target="y", sequence="seq", alphabet="TGCAN", method="random", preset="quick"
    ).fit(frame)
    assert opt.schema_.space.vocab_size == 5
    with pytest.warns(ProposalWarning, match="letters 'N' appear in no row"):
        proposals = opt.propose(30)
    # Uniform random letters use the whole alphabet; those with N are left out (nothing in
    # the table speaks for them).
    assert set("".join(proposals["seq"])) == set("TGCA") and len(proposals) == 30


def test_min_distance_and_diversity_hold_in_the_proposals():
    frame = sequence_frame(n=120, length=8)
    opt = TableOptimizer(
        target="y", sequence="seq", method="random", preset="quick", seed=1,
        min_distance=3, diversity=4,
    ).fit(frame)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProposalWarning)
        proposals = opt.propose(12)
    assert len(proposals) >= 1 and (proposals["nearest_hamming"] >= 3).all()
    seqs = [np.array(list(s)) for s in proposals["seq"]]
    for i in range(len(seqs)):
        for j in range(i):
            assert (seqs[i] != seqs[j]).sum() >= 4
    with pytest.raises(MatchoptError, match="min_distance must be a number >= 0"):
        TableOptimizer(target="y", method="random", min_distance=-1).fit(numeric_frame())


def dna_frame(n: int = 300) -> pd.DataFrame:
    """``n`` distinct DNA 8-mers (4**8 = 65,536 possible), activity rising with G and C."""
    rng = np.random.default_rng(5)
    tokens = np.unique(rng.integers(0, 4, (2 * n, 8)), axis=0)[:n]
    rng.shuffle(tokens)
    activity = (tokens == 2).sum(1) + 0.5 * (tokens == 1).sum(1) + rng.normal(0, 0.3, n)
    return pd.DataFrame({"seq": ["".join("ACGT"[t] for t in row) for row in tokens],
                         "activity": activity})  # fmt: skip


@pytest.mark.parametrize("method", ["ga", "ens-mean"])
def test_a_search_that_converges_is_continued_until_n_new_sequences_exist(method):
    # GA's ascent on 300 DNA 8-mers returns one new design; the search goes on around it and
    # around the best rows until 128 distinct, unmeasured sequences exist.
    frame = dna_frame()
    settings = dict(target="activity", sequence="seq", alphabet="ACGT", preset="quick", seed=3)
    opt = TableOptimizer(**settings, method=method).fit(frame)
    with pytest.warns(ProposalWarning, match=r"of the 128 proposals come from .*neighbours"):
        proposals = opt.propose(128)
    assert len(proposals) == 128 and proposals["seq"].is_unique
    assert not set(proposals["seq"]) & set(frame["seq"])
    assert (proposals["nearest_hamming"] >= 1).all()
    assert "neighbour" in set(proposals["origin"]) <= {"search", "neighbour"}
    ranked = proposals["ranking_score"].to_numpy()
    assert (np.diff(ranked) <= 0).all()  # best ranked first, neighbours included
    again = TableOptimizer(**settings, method=method).fit(frame).propose(128)
    pd.testing.assert_frame_equal(again, proposals)  # same seed, same designs


def test_diversity_searches_on_instead_of_shrinking_the_output():
    frame = numeric_frame(120)
    opt = TableOptimizer(target="y", method="ga", preset="quick", seed=0, diversity=0.5)
    with pytest.warns(ProposalWarning, match="neighbours"):
        proposals = opt.fit(frame).propose(32)
    assert len(proposals) == 32
    designs = opt.schema_.encode(proposals)
    for i in range(1, len(designs)):
        nearest = opt.schema_.nearest_distances(designs[i : i + 1], designs[:i])[0]
        assert nearest >= 0.5
    assert (proposals["a"].between(0, 1) & proposals["b"].between(2, 9)).all()


def test_neighbours_change_the_stated_number_of_letters_and_stay_in_range():
    rng = np.random.default_rng(0)
    sequences = TableOptimizer(target="y", sequence="seq", method="random").fit(
        sequence_frame()
    ).schema_  # fmt: skip
    parents = rng.integers(0, 4, (5, 6))
    for radius in (1, 3, 6, 9):
        moved = sequences.neighbours(parents, radius, 40, rng)
        changed = (moved != parents[np.arange(40) % 5]).sum(1)
        assert (changed == min(radius, 6)).all() and moved.max() < 4 and moved.min() >= 0
    table = TableOptimizer(target="y", categorical=["solvent"], method="random")
    table = table.fit(mixed_frame()).schema_
    parents = table.encode(mixed_frame().head(4))
    moved = table.neighbours(parents, 16, 200, rng)
    rows = table.decode(moved)
    assert rows["a"].between(0, 1).all() and rows["b"].between(2, 9).all()
    assert set(rows["solvent"]) == set(SOLVENTS)  # other categories are tried


def test_a_warning_when_predictions_fall_below_the_best_measured_value():
    opt = TableOptimizer(target="y", method="ga", preset="quick", seed=0).fit(numeric_frame(80))
    best = numeric_frame(80)["y"].max()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ProposalWarning)
        proposals = opt.propose(8)
    shrunk = [w for w in caught if "below the best measured value" in str(w.message)]
    assert bool(shrunk) == (proposals["predicted_y"].max() < best)


def test_the_below_the_best_warning_follows_the_direction():
    for minimize, words in (
        (False, "at most .* below the best"),
        (True, "at least .* above the best"),
    ):
        frame = numeric_frame(40)
        opt = TableOptimizer(
            target="y", method="random", preset="quick", seed=0, minimize=minimize
        ).fit(frame)
        worst = opt.data_.y.min()  # in matchopt's units: below every measured row
        opt._ensemble_prediction = lambda designs, worst=worst: (
            np.full(len(designs), worst),
            np.zeros(len(designs)),
        )
        with pytest.warns(ProposalWarning, match=words) as caught:
            proposals = opt.propose(4)
        message = next(str(w.message) for w in caught if "best measured" in str(w.message))
        best = frame["y"].min() if minimize else frame["y"].max()
        assert f"{proposals['predicted_y'].iloc[0]:.4g}" in message and f"{best:.4g}" in message


def dna_table(n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    sequences = ["".join(rng.choice(list("ACGT"), 8)) for _ in range(n)]
    return pd.DataFrame(
        {"seq": sequences, "y": [s.count("G") + 0.1 * i / n for i, s in enumerate(sequences)]}
    )


def test_alphabet_letters_the_table_never_shows_are_not_proposed_and_said_so(capsys, tmp_path):
    """``--alphabet ACGTN`` on a table without N: the model knows nothing of N, which was
    proposed at rank 2 with half the spread of rank 1."""
    path = tmp_path / "dna.csv"
    dna_table().to_csv(path, index=False)
    out = tmp_path / "p.csv"
    args = ["optimize", path, "--target", "y", "--sequence", "seq", "--alphabet", "ACGTN"]
    code, _, err = run_cli(capsys, *args, "--method", "random", "--n", "16", "--out", out)
    assert code == 0, err
    proposals = pd.read_csv(out)
    assert len(proposals) == 16 and not proposals["seq"].str.contains("N").any()
    said = [line for line in err.splitlines() if "appear in no row" in line]
    assert len(said) == 1 and said[0].startswith(
        "matchopt: warning: alphabet letters 'N' appear in no row of the table"
    )
    # A candidate with the letter is ranked, flagged: nothing supports its prediction.
    optimizer = TableOptimizer(
        target="y", sequence="seq", alphabet="ACGTN", method="random", preset="quick"
    ).fit(dna_table())
    candidates = pd.DataFrame({"seq": ["GGGGGGGG", "GGGGNGGG"]})
    with pytest.warns(ProposalWarning):
        ranked = optimizer.rank(candidates).set_index("seq")
    assert not ranked.loc["GGGGGGGG", "extrapolated"] and ranked.loc["GGGGNGGG", "extrapolated"]


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
