"""Optimizing a user's own table: formats, bad inputs, save/load, atomic output, the CLI."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from table_helpers import (
    SOLVENTS,
    assert_one_line_error,
    mixed_frame,
    numeric_frame,
    run_cli,
    sequence_frame,
)

from matchopt.errors import MatchoptError
from matchopt.methods import METHODS
from matchopt.tabular import (
    ProposalWarning,
    TableOptimizer,
    TableSchema,
    parse_bounds,
    read_table,
)


def assert_new_and_unique(proposals: pd.DataFrame, frame: pd.DataFrame, features) -> None:
    keys = [tuple(row) for row in proposals[features].itertuples(index=False)]
    assert len(set(keys)) == len(keys)
    measured = {tuple(row) for row in frame[features].itertuples(index=False)}
    assert not measured & set(keys)


# --- Input formats, end to end --------------------------------------------------------------------


PREDICTION_COLUMNS = [
    "predicted_y", "predicted_y_std", "predicted_y_low", "predicted_y_high", "extrapolated"
]  # fmt: skip
NUMERIC_PROPOSAL_COLUMNS = ["a", "b", *PREDICTION_COLUMNS, "nearest_euclidean"]


def test_numeric_table_proposals_in_range_ranked_new(tmp_path):
    frame = numeric_frame()
    opt = TableOptimizer(target="y", method="random", preset="quick", seed=0).fit(frame)
    proposals = opt.propose(20)
    assert [c for c in proposals.columns if c != "origin"] == NUMERIC_PROPOSAL_COLUMNS
    assert len(proposals) == 20
    assert proposals["a"].between(frame["a"].min(), frame["a"].max()).all()
    assert proposals["b"].dtype == np.int64  # every observed b is a whole number
    assert proposals["b"].between(2, 9).all()
    assert proposals["predicted_y"].is_monotonic_decreasing
    assert (proposals["nearest_euclidean"] > 0).all()
    assert_new_and_unique(proposals, frame, ["a", "b"])
    assert "ensemble" in opt.ranking_  # random has no surrogate of its own


def test_categorical_table_uses_method_surrogate_and_observed_categories():
    frame = mixed_frame()
    opt = TableOptimizer(
        target="y", categorical=["solvent"], method="matchopt", preset="quick", seed=0
    ).fit(frame)
    assert opt.ranker_ is None and "matchopt" in opt.ranking_
    assert opt.schema_.space.describe() == "5 floats"  # a, b, one-hot block of 3
    proposals = opt.propose(16)
    assert set(proposals["solvent"]) <= set(SOLVENTS)
    # The ranking score is the surrogate's prediction of the decoded row, and ranks the rows.
    designs = opt.schema_.encode(proposals)
    np.testing.assert_allclose(
        proposals["ranking_score"], opt.method_.predict(designs.astype(np.float32)), rtol=1e-6
    )
    assert proposals["ranking_score"].is_monotonic_decreasing
    # The prediction is the calibrated ensemble's, inside its interval.
    assert (proposals["predicted_y_low"] <= proposals["predicted_y"]).all()
    assert (proposals["predicted_y"] <= proposals["predicted_y_high"]).all()
    assert_new_and_unique(proposals, frame, ["a", "b", "solvent"])


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


def test_sequence_table_letters_lengths_hamming():
    frame = sequence_frame()
    opt = TableOptimizer(
        target="y", sequence="seq", method="random", preset="quick", seed=3, minimize=True
    ).fit(frame)
    assert opt.schema_.ignored == ("id",)
    proposals = opt.propose(12)
    assert list(proposals.columns) == ["seq", *PREDICTION_COLUMNS, "nearest_hamming"]
    assert all(len(s) == 6 and set(s) <= set("ACGT") for s in proposals["seq"])
    assert proposals["nearest_hamming"].dtype == np.int64
    assert (proposals["nearest_hamming"] >= 1).all()
    measured = set(frame["seq"])
    for seq, distance in zip(proposals["seq"], proposals["nearest_hamming"]):
        assert distance == min(sum(a != b for a, b in zip(seq, m)) for m in measured)
    assert_new_and_unique(proposals, frame, ["seq"])
    # Minimizing: the best (lowest) predicted y first, in the user's sign.
    assert proposals["predicted_y"].is_monotonic_increasing
    assert (proposals["predicted_y"] >= 0).all()


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


def test_bounds_clip_numeric_proposals():
    frame = numeric_frame()
    opt = TableOptimizer(
        target="y",
        bounds={"a": (0.2, 0.4), "b": (3.5, 5.5)},
        method="random",
        preset="quick",
    ).fit(frame)
    proposals = opt.propose(20)
    assert proposals["a"].between(0.2, 0.4).all()
    assert proposals["b"].isin([4, 5]).all()


def test_parquet_and_csv_give_the_same_proposals(tmp_path):
    pytest.importorskip("pyarrow")
    frame = mixed_frame()
    frame.to_csv(tmp_path / "d.csv", index=False)
    frame.to_parquet(tmp_path / "d.parquet", index=False)
    results = []
    for name in ("d.csv", "d.parquet"):
        opt = TableOptimizer(
            target="y", categorical=["solvent"], method="matchopt", preset="quick", seed=1
        )
        results.append(opt.fit(tmp_path / name).propose(10))
    pd.testing.assert_frame_equal(results[0], results[1], check_dtype=False)


def test_parquet_output_round_trips(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    numeric_frame().to_csv(tmp_path / "d.csv", index=False)
    out = tmp_path / "p.parquet"
    code, stdout, _ = run_cli(
        capsys, "optimize", tmp_path / "d.csv", "--target", "y", "--method", "random",
        "--preset", "quick", "--n", "5", "--out", out,
    )  # fmt: skip
    assert code == 0
    back = pd.read_parquet(out)
    assert len(back) == 5 and back["b"].dtype == np.int64
    assert f"5 proposals -> {out}" in stdout


def test_true_false_columns_come_back_as_true_false(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    frame = numeric_frame()
    frame["coated"] = frame["a"] > frame["a"].median()
    frame.to_parquet(tmp_path / "d.parquet", index=False)
    frame.to_csv(tmp_path / "d.csv", index=False)
    for name in ("d.parquet", "d.csv"):
        out = tmp_path / f"p-{name.replace('.', '-')}{Path(name).suffix}"  # own report names
        code, stdout, stderr = run_cli(
            capsys, "optimize", tmp_path / name, "--target", "y", "--method", "random",
            "--preset", "quick", "--n", "8", "--out", out,
        )  # fmt: skip
        assert code == 0 and "categorical column(s): coated (2)" in stdout + stderr
        back = pd.read_parquet(out) if name.endswith("parquet") else pd.read_csv(out)
        assert back["coated"].dtype == bool and back["coated"].nunique() == 2
    frame["coated"] = frame["coated"].map({True: "TRUE", False: "FALSE"})  # a spreadsheet's
    frame.to_csv(tmp_path / "sheet.csv", index=False)
    proposals = TableOptimizer(target="y", method="random", preset="quick").fit(
        tmp_path / "sheet.csv"
    )
    assert set(proposals.propose(8)["coated"]) == {"TRUE", "FALSE"}
    with pytest.raises(MatchoptError, match="'coated' is not a numeric feature"):
        TableOptimizer(target="y", bounds={"coated": (0, 1)}).fit(frame)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_runs_on_a_table_and_reloads_identically(name):
    frame = mixed_frame(n=40)
    overrides = {"trajectory_length": 16} if name.startswith("matchopt") else {}
    opt = TableOptimizer(
        target="y",
        categorical=["solvent"],
        method=name,
        preset="quick",
        overrides=overrides,
        seed=0,
    ).fit(frame)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProposalWarning)  # a method may find few new rows
        first = opt.propose(6)
        again = TableOptimizer.load_bytes(opt.to_bytes()).propose(6)
    assert 1 <= len(first) <= 6
    assert set(first["solvent"]) <= set(SOLVENTS)
    pd.testing.assert_frame_equal(first, again)


def test_save_and_load_give_identical_proposals(tmp_path):
    frame = sequence_frame(n=80)
    opt = TableOptimizer(target="y", sequence="seq", method="ddom", preset="quick", seed=2)
    proposals = opt.fit(frame).propose(10)
    path = opt.save(tmp_path / "model.pt")
    loaded = TableOptimizer.load(path)
    pd.testing.assert_frame_equal(loaded.propose(10), proposals)
    assert loaded.ranker_ is not None  # ddom has no predict: the ranking ensemble was saved


# --- Bad inputs: one clear line, exit status 2, no traceback --------------------------------------


@pytest.fixture
def csv_file(tmp_path):
    def write(text: str, name: str = "data.csv"):
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def optimize(capsys, data, *extra):
    return run_cli(
        capsys, "optimize", data, "--method", "random", "--preset", "quick",
        "--out", os.path.join(os.path.dirname(str(data)), "out.csv"), *extra,
    )  # fmt: skip


def test_missing_file(capsys, tmp_path):
    code, _, err = optimize(capsys, tmp_path / "nope.csv", "--target", "y")
    assert_one_line_error(code, err, "nope.csv", "no such file")


def test_unknown_format(capsys, csv_file):
    path = csv_file("a,y\n1,2\n", "data.xlsx")
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(code, err, "data.xlsx", "unknown file format", ".xlsx")


def test_unreadable_parquet(capsys, csv_file):
    pytest.importorskip("pyarrow")
    path = csv_file("this is not parquet", "data.parquet")
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(code, err, "data.parquet", "cannot read as Parquet")


def test_csv_that_is_not_text(capsys, tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"a,y\n\xff\xfe\x81,1\n")
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(code, err, "data.csv", "not UTF-8")


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_a_table_larger_than_memory_allows_is_refused_before_reading(
    capsys, tmp_path, monkeypatch, suffix
):
    path = tmp_path / f"data.{suffix}"
    frame = numeric_frame(2000)
    frame.to_csv(path, index=False) if suffix == "csv" else frame.to_parquet(path)
    monkeypatch.setenv("MATCHOPT_MEMORY_GIB", "0.00001")  # about 10 kB
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(code, err, f"data.{suffix}", "needs about", "GiB available")
    monkeypatch.setenv("MATCHOPT_MEMORY_GIB", "lots")
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(code, err, "$MATCHOPT_MEMORY_GIB='lots': expected a number of GiB")


@pytest.mark.parametrize("setting", ["inf", "1e308", "-1", "0", "nan", "-inf"])
def test_a_memory_setting_that_is_no_limit_is_one_error_line(
    capsys, tmp_path, monkeypatch, setting
):
    path = tmp_path / "data.csv"
    numeric_frame(40).to_csv(path, index=False)
    monkeypatch.setenv("MATCHOPT_MEMORY_GIB", setting)
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(
        code, err, f"$MATCHOPT_MEMORY_GIB='{setting}': expected a number of GiB above 0"
    )


def test_a_wide_csv_is_refused_for_the_memory_its_columns_take(capsys, tmp_path, monkeypatch):
    """A million columns in 12 MB: reading them takes gigabytes (about 14 KiB a column), which
    an estimate from the file's size alone missed (the read aborted in C++, exit 134)."""
    path = tmp_path / "wide.csv"
    width = 1_000_000
    header = ",".join(f"c{i}" for i in range(width))
    path.write_text(header + "\n" + ",".join(["1"] * width) + "\n")
    monkeypatch.setenv("MATCHOPT_MEMORY_GIB", "16")
    code, _, err = optimize(capsys, path, "--target", "c0")
    assert_one_line_error(code, err, "wide.csv", "of 1,000,000 columns needs about 30.6", "16.0")


@pytest.mark.parametrize("size", [2 * 2**30, 64 * 2**20], ids=["over-the-cap", "a-hole"])
def test_a_sparse_csv_is_refused_before_reading(capsys, tmp_path, size):
    """A file of a header and a hole (NUL bytes) went to pandas' reader: 64 s and 6.7 GB for
    2 GB, then ArrowMemoryError."""
    path = tmp_path / "sparse.csv"
    path.write_text("a,b,y\n1,2,3\n")
    os.truncate(path, size)
    code, _, err = optimize(capsys, path, "--target", "y")
    words = "over the 1 GiB a data file may take" if size > 2**30 else "holds NUL bytes"
    assert_one_line_error(code, err, "sparse.csv", words)


def test_ragged_csv_row(capsys, csv_file):
    path = csv_file("a,y\n1,2\n3,4,5\n")
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(code, err, "data.csv", "cannot read as CSV", "line 3")


def test_missing_target(capsys, csv_file):
    path = csv_file("a,b,y\n1,2,3\n2,3,4\n")
    code, _, err = optimize(capsys, path, "--target", "score")
    assert_one_line_error(code, err, "data.csv", "no target column 'score'", "a, b, y")


def test_non_numeric_value_names_column_row_line_value(capsys, csv_file):
    path = csv_file("a,b,y\n1,2,3\n2,oops,4\n3,1,5\n")
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(
        code, err, "data.csv", "column 'b'", "row 2", "line 3", "'oops' is not a number"
    )


@pytest.mark.parametrize(
    ("cell", "words"),
    [("nan", "NaN"), ("inf", "infinite"), ("-Infinity", "infinite"), ("", "missing value")],
)
def test_nan_inf_and_empty_cells(capsys, csv_file, cell, words):
    path = csv_file(f"a,y\n1,3\n{cell},4\n2,5\n")
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(code, err, "column 'a'", "row 2", "line 3", words)


def test_nan_in_target_of_a_parquet_file(capsys, tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "data.parquet"
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "y": [1.0, np.nan, 2.0]}).to_parquet(path)
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(code, err, "data.parquet", "column 'y'", "row 2", "NaN")


def test_parquet_dates_lists_and_records_are_named(capsys, tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "data.parquet"
    n = 12
    pd.DataFrame(
        {
            "when": pd.date_range("2024-01-01", periods=n, freq="D"),
            "a": np.arange(n) * 1.0,
            "tags": [[1, 2]] * n,
            "long_tags": [list(range(60))] * n,  # a cell past the message's 40 characters
            "meta": [{"k": 1}] * n,
            "y": np.sin(np.arange(n)),
        }
    ).to_parquet(path)
    cases = [
        (("--features", "a,when"), ("column 'when' holds dates", "--categorical")),
        (("--features", "a", "--target", "when"), ("column 'when' holds dates",)),
        (("--features", "a,tags"), ("column 'tags', row 1", "is a list")),
        (("--features", "a,long_tags"), ("column 'long_tags', row 1", "...", "is a list")),
        (
            ("--features", "a,long_tags", "--categorical", "long_tags"),
            ("'long_tags', row 1", "one value"),
        ),
        (("--features", "a,tags", "--categorical", "tags"), ("'tags', row 1", "one value")),
        (("--features", "a,meta", "--categorical", "meta"), ("'meta', row 1", "is a record")),
    ]
    for options, words in cases:
        target = () if "--target" in options else ("--target", "y")
        code, _, err = optimize(capsys, path, *target, *options)
        assert_one_line_error(code, err, "data.parquet", *words)
    # Dates as categories are values like any other: they come back as dates.
    out = tmp_path / "out.parquet"
    code, _, _ = optimize(
        capsys, path, "--target", "y", "--features", "a,when", "--categorical", "when",
        "--n", "3", "--out", out,  # the last --out wins
    )  # fmt: skip
    assert code == 0
    assert pd.api.types.is_datetime64_any_dtype(pd.read_parquet(out)["when"])


def test_a_parquet_list_cell_of_many_values_is_one_error_line(capsys, tmp_path):
    """A list cell longer than a message shows (40 characters) is cut, in every role of its
    column: target, feature, category, sequence; never a traceback."""
    pytest.importorskip("pyarrow")
    path = tmp_path / "data.parquet"
    n = 12
    pd.DataFrame(
        {
            "a": np.arange(n) * 1.0,
            "numbers": [list(range(41))] * n,
            "letters": [[str(i) for i in range(50)]] * n,
            "y": np.sin(np.arange(n)),
        }
    ).to_parquet(path)
    for column in ("numbers", "letters"):
        cases = [
            (("--target", column, "--features", "a"), "is a list"),
            (("--target", "y", "--features", f"a,{column}"), "is a list"),
            (("--target", "y", "--features", f"a,{column}", "--categorical", column), "one value"),
            (("--target", "y", "--sequence", column), "is a list, not a text sequence"),
        ]
        for options, words in cases:
            code, _, err = optimize(capsys, path, *options)
            assert_one_line_error(code, err, f"column '{column}', row 1", "...", words)
            message = err.rstrip().splitlines()[-1]
            assert "\\n" not in message and len(message) < 300, message


def test_constant_target(capsys, csv_file):
    path = csv_file("a,y\n1,7\n2,7\n3,7\n")
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(code, err, "data.csv", "'y' is constant", "7")


def test_too_few_rows_for_the_method_says_how_many(capsys, tmp_path):
    path = tmp_path / "data.csv"
    numeric_frame(n=50).to_csv(path, index=False)
    out = tmp_path / "o.csv"
    code, _, err = run_cli(
        capsys, "optimize", path, "--target", "y", "--method", "matchopt", "--out", out
    )  # matchopt, validated preset: 128 training rows (trajectory_length) + 10% held out
    assert_one_line_error(
        code, err, "preset validated", "needs at least 142 rows", "has 50", "validation_fraction"
    )
    code, _, err = run_cli(
        capsys, "optimize", path, "--target", "y", "--method", "matchopt", "--preset", "paper",
        "--out", out,
    )  # fmt: skip
    assert_one_line_error(code, err, "needs at least 128 rows", "has 50", "trajectory_length")
    # The default method (a MATCH-OPT ensemble, paper preset): one row per rank bucket.
    from matchopt.names import RECOMMENDED_METHOD

    code, _, err = run_cli(capsys, "optimize", path, "--target", "y", "--out", out)
    assert_one_line_error(
        code,
        err,
        f"{RECOMMENDED_METHOD} (preset paper)",
        "needs at least 128 rows",
        "trajectory_length",
    )


def test_min_rows_is_part_of_every_methods_contract():
    from matchopt.methods.base import build_config

    for entry in METHODS.values():
        need, why = entry.cls.min_rows(build_config(entry, "paper"))
        assert need >= 2 and why
    matchopt = METHODS["matchopt"]
    assert matchopt.cls.min_rows(build_config(matchopt, "quick"))[0] == 32
    # 142 rows: 14 held out (round(0.1 * 142)) leave 128 for the rank buckets; 141 leave 127.
    assert matchopt.cls.min_rows(build_config(matchopt, "validated"))[0] == 142


def test_ragged_sequences(capsys, csv_file):
    path = csv_file("seq,y\nACGT,1\nACG,2\nAGGT,3\n")
    code, _, err = optimize(capsys, path, "--target", "y", "--sequence", "seq")
    assert_one_line_error(code, err, "column 'seq'", "row 2", "length 3", "row 1 has length 4")


def test_letter_outside_the_alphabet(capsys, csv_file):
    path = csv_file("seq,y\nACGT,1\nACNT,2\nAGGT,3\n")
    code, _, err = optimize(
        capsys, path, "--target", "y", "--sequence", "seq", "--alphabet", "ACGT"
    )
    assert_one_line_error(code, err, "row 2", "letter 'N'", "position 3", "'ACGT'")


def test_duplicate_column_name(capsys, csv_file):
    path = csv_file("a,b,a,y\n1,2,3,4\n2,3,4,5\n")
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(code, err, "data.csv", "duplicate column name 'a'")


def test_csv_line_numbers_count_blank_lines_and_cells_over_several_lines(capsys, csv_file):
    # Row 3 is on line 7: two blank lines (one of spaces) and a quoted cell of two lines.
    path = csv_file('a,b,y\n\n1,2,3\n   \n"4",5,6\n\n2,oops,4\n"x\ny",1,2\n5,zz,1\n')
    code, _, err = optimize(capsys, path, "--target", "y", "--features", "b")
    assert_one_line_error(code, err, "column 'b'", "row 3 (line 7)", "'oops'")
    # A cell spanning lines 8-9 does not shift the next row (line 10).
    frame = read_table(path)
    frame.loc[2, "b"] = "7"
    with pytest.raises(MatchoptError, match=r"row 5 \(line 10\): 'zz'"):
        TableOptimizer(target="y", features=["b"], method="random").fit(frame, source="t")
    # Rows removed after reading: no line numbers rather than wrong ones.
    with pytest.raises(MatchoptError, match=r"column 'b', row 4: 'zz'") as info:
        TableOptimizer(target="y", features=["b"], method="random").fit(frame.drop(index=0))
    assert "line" not in str(info.value)


def test_a_csv_table_saved_as_parquet_reads_back_without_csv_lines(capsys, csv_file, tmp_path):
    pytest.importorskip("pyarrow")
    frame = read_table(csv_file("a,y\n\n1,2\n\n2,x\n"))
    frame.to_parquet(tmp_path / "t.parquet")  # pandas writes attrs as JSON
    code, _, err = optimize(capsys, tmp_path / "t.parquet", "--target", "y")
    assert_one_line_error(code, err, "t.parquet: column 'y', row 2: 'x' is not a number")
    assert "line" not in err


def test_one_row_is_too_few_rows_not_a_constant_target(capsys, csv_file):
    path = csv_file("a,b,y\n0.1,0.2,0.3\n")
    code, _, err = optimize(capsys, path, "--target", "y")
    assert_one_line_error(code, err, "data.csv", "only 1 data row", "at least 2")
    assert "constant" not in err


def test_alphabet_without_a_sequence_column_is_an_error(capsys, tmp_path):
    path = tmp_path / "data.csv"
    numeric_frame().to_csv(path, index=False)
    code, _, err = optimize(capsys, path, "--target", "y", "--alphabet", "ACGT")
    assert_one_line_error(code, err, "--alphabet needs --sequence")
    assert not (tmp_path / "out.csv").exists()


def test_a_feature_named_like_an_output_column_is_refused():
    for name in ("predicted_y", "predicted_y_std", "nearest_euclidean"):
        frame = numeric_frame().rename(columns={"a": name})
        with pytest.raises(MatchoptError, match=f"feature column '{name}' has the name of an"):
            TableOptimizer(target="y", method="random", preset="quick").fit(frame)


def test_duplicate_column_name_in_a_dataframe():
    frame = pd.DataFrame([[1, 2, 3], [2, 3, 5]], columns=["a", "a", "y"])
    with pytest.raises(MatchoptError, match="duplicate column name 'a'"):
        TableOptimizer(target="y", method="random").fit(frame)


@pytest.mark.parametrize(
    ("out", "words"),
    [
        ("missing_dir/out.csv", "does not exist"),
        ("a_file.txt/out.csv", "is not a folder"),
        ("a_dir.csv", "is a folder"),
        ("out.xlsx", "unknown output format"),
    ],
)
def test_unwritable_output_fails_before_fitting(capsys, tmp_path, monkeypatch, out, words):
    (tmp_path / "a_file.txt").write_text("x")
    (tmp_path / "a_dir.csv").mkdir()
    data = tmp_path / "data.csv"
    numeric_frame().to_csv(data, index=False)

    def no_fit(*args, **kwargs):
        raise AssertionError("fit must not run when the output cannot be written")

    monkeypatch.setattr(TableOptimizer, "fit", no_fit)
    code, _, err = run_cli(
        capsys, "optimize", data, "--target", "y", "--method", "random", "--out", tmp_path / out
    )
    assert_one_line_error(code, err, "--out", words)


def test_unwritable_model_path_fails_before_fitting(capsys, tmp_path, monkeypatch):
    data = tmp_path / "data.csv"
    numeric_frame().to_csv(data, index=False)
    monkeypatch.setattr(TableOptimizer, "fit", lambda *a, **k: pytest.fail("fit ran"))
    code, _, err = run_cli(
        capsys, "optimize", data, "--target", "y", "--out", tmp_path / "o.csv",
        "--save-model", tmp_path / "nowhere" / "m.pt",
    )  # fmt: skip
    assert_one_line_error(code, err, "--save-model", "does not exist")


def test_other_option_errors():
    frame = numeric_frame()
    with pytest.raises(MatchoptError, match="--bounds a=1.0:0.0"):
        TableOptimizer(target="y", bounds={"a": (1, 0)}).fit(frame)
    with pytest.raises(MatchoptError, match="not a numeric feature"):
        TableOptimizer(target="y", bounds={"zz": (0, 1)}).fit(frame)
    with pytest.raises(MatchoptError, match="expected COLUMN=LOW:HIGH"):
        parse_bounds(["a=0-1"])
    assert parse_bounds(["a=0:1,b=-2:3.5"]) == {"a": (0.0, 1.0), "b": (-2.0, 3.5)}
    with pytest.raises(MatchoptError, match="cannot also be a feature"):
        TableOptimizer(target="y", features=["a", "y"]).fit(frame)
    with pytest.raises(MatchoptError, match="categories: --categorical; not a feature"):
        TableOptimizer(target="y", method="random").fit(mixed_frame())
    with pytest.raises(MatchoptError, match="unknown method"):
        TableOptimizer(target="y", method="nope").fit(frame)
    with pytest.raises(MatchoptError, match="only the letter"):
        TableOptimizer(target="y", sequence="s").fit(pd.DataFrame({"s": ["AA", "AA"], "y": [1, 2]}))
    with pytest.raises(MatchoptError, match="positive integer"):
        TableOptimizer(target="y", method="random").fit(frame).propose(0)


def test_load_rejects_a_file_that_is_not_a_model(capsys, tmp_path):
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"not a model")
    code, _, err = run_cli(capsys, "propose", "--model", bad, "--out", tmp_path / "o.csv")
    assert_one_line_error(code, err, "model.pt", "not a matchopt model file")
    code, _, err = run_cli(capsys, "propose", "--model", tmp_path / "no.pt")
    assert_one_line_error(code, err, "no.pt", "no such model file")


#: Text a crafted file could hold to drive a terminal: a title change, a screen clear, a bell,
#: a bidirectional override and a forged line.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202e\nmatchopt: error: forged"


def test_text_of_a_crafted_model_file_prints_with_control_characters_escaped(capsys, tmp_path):
    """propose prints the model's source table, column names and categories from the file:
    escaped, so that they cannot drive the terminal or forge lines; letters stay as they are."""
    frame = pd.DataFrame(
        {
            f"sé{HOSTILE}": ["x", f"ü{HOSTILE}", "z", "x"],
            "t": ["p", "p", "p", "q"],
            "y": [1.0, 2, 3, 4],
        }
    )
    opt = TableOptimizer(
        target="y", categorical=[f"sé{HOSTILE}", "t"], method="random", preset="quick", seed=0
    ).fit(frame, source=f"table{HOSTILE}.csv")
    model = opt.save(tmp_path / "model.pt")
    code, out, err = run_cli(
        capsys, "propose", "--model", model, "--n", 2, "--out", tmp_path / "o.csv"
    )
    assert code == 0, err
    for text in (out, err):
        assert not any(c in text for c in "\x1b\x07\u202e"), text
        assert "forged" not in "".join(line for line in text.splitlines() if "\\n" not in line)
    shown = "\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\nmatchopt: error: forged"
    assert f"random fitted on table{shown}.csv" in err
    assert f"sé{shown}" in out and f"ü{shown}" in out  # the table of the best rows
    assert pd.read_csv(tmp_path / "o.csv").columns[0] == f"sé{HOSTILE}"  # the file keeps them


def test_column_names_in_errors_are_escaped(capsys, tmp_path):
    data = tmp_path / "data.csv"
    numeric_frame().rename(columns={"a": f"a{HOSTILE}"}).to_csv(data, index=False)
    for option in ("--target", "--features"):
        args = ["--target", "nope"] if option == "--target" else ["--target", "y", option, "zz"]
        code, _, err = run_cli(capsys, "optimize", data, *args, "--out", tmp_path / "o.csv")
        assert_one_line_error(code, err, "columns: a\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\n")
        assert "\x1b" not in err


# --- Atomic output --------------------------------------------------------------------------------


def test_failed_write_after_fit_leaves_no_file(capsys, tmp_path, monkeypatch):
    data = tmp_path / "data.csv"
    numeric_frame().to_csv(data, index=False)
    old = tmp_path / "old.csv"
    old.write_text("previous results\n")

    def failing_replace(src, dst, **folders):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    for out in (tmp_path / "new.csv", old):
        code, _, err = run_cli(
            capsys, "optimize", data, "--target", "y", "--method", "random",
            "--preset", "quick", "--out", out, "--force",
        )  # fmt: skip
        assert_one_line_error(code, err, "cannot write", "No space left on device")
    assert not (tmp_path / "new.csv").exists()
    assert old.read_text() == "previous results\n"  # an existing file is left whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "old.csv"]  # no temp files


# --- Schema details -------------------------------------------------------------------------------


def test_schema_round_trip_and_float32_precision():
    frame = mixed_frame()
    schema = TableSchema.infer(frame, "y", categorical=["solvent"])
    designs = schema.encode(frame)
    back = schema.decode(designs.astype(np.float32))
    assert back["solvent"].tolist() == frame["solvent"].tolist()
    assert back["b"].tolist() == frame["b"].tolist()
    np.testing.assert_allclose(back["a"], frame["a"], rtol=1e-6)
    assert all(len(repr(v)) <= 12 for v in back["a"])  # shortest float32 decimals


def test_read_table_keeps_text_cells(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("seq,y\nNA,1\nAN,2\n")
    frame = read_table(path)
    assert frame["seq"].tolist() == ["NA", "AN"]  # "NA" is a sequence here, not a missing value


# --- The command line as a user runs it -----------------------------------------------------------


def subprocess_cli(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "matchopt.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_cli_bad_input_exits_non_zero_without_traceback(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("a,y\n1,2\nx,3\n")
    result = subprocess_cli("optimize", path, "--target", "y", "--out", tmp_path / "o.csv")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"matchopt: error: {path}: column 'a', row 2 (line 3): 'x' is not a number "
        "(categories: --categorical; not a feature: --features)"
    )
    assert not (tmp_path / "o.csv").exists()


def test_cli_optimize_then_propose_from_saved_model_is_identical(tmp_path):
    data = tmp_path / "data.csv"
    mixed_frame().to_csv(data, index=False)
    first, second, model = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "m.pt"
    result = subprocess_cli(
        "optimize", data, "--target", "y", "--categorical", "solvent", "--preset", "quick",
        "--seed", "4", "--n", "12", "--out", first, "--save-model", model,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "12 proposals ->" in result.stdout
    result = subprocess_cli("propose", "--model", model, "--n", "12", "--out", second)
    assert result.returncode == 0, result.stderr
    assert first.read_bytes() == second.read_bytes()
    proposals = pd.read_csv(first)
    columns = ["a", "b", "solvent", *PREDICTION_COLUMNS, "ranking_score", "nearest_euclidean"]
    assert [c for c in proposals.columns if c != "origin"] == columns
    # Each run leaves its report beside the proposals.
    assert (tmp_path / "a.report.html").stat().st_size > 0
    assert (tmp_path / "b.report.html").stat().st_size > 0


@pytest.mark.parametrize("link", ["same", "hard", "symbolic"])
@pytest.mark.parametrize("option", ["--out", "--save-model"])
def test_an_output_that_is_the_input_table_is_refused_before_any_work(
    capsys, tmp_path, link, option
):
    data = tmp_path / "mine.csv"
    numeric_frame(n=200).to_csv(data, index=False)
    before = data.read_bytes()
    target = data
    if link == "hard":
        target = tmp_path / "alias.csv"
        os.link(data, target)
    elif link == "symbolic":
        target = tmp_path / "alias.csv"
        target.symlink_to(data)
    args = ["--out", tmp_path / "o.csv", option, target] if option == "--save-model" else []
    args = args or ["--out", target]
    code, _, err = run_cli(capsys, "optimize", data, "--target", "y", *args)
    assert_one_line_error(code, err, f"{option} {target}", "is the input file")
    assert data.read_bytes() == before  # the measured table survives


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


def test_standardizer_of_huge_values_matches_the_scaled_moments():
    from matchopt.encodings import Standardizer

    y = np.array([1e300, 5e299, -3e299, 8e299])
    fitted = Standardizer.fit(y)
    small = Standardizer.fit(y / 1e300)
    np.testing.assert_allclose(fitted.mean / 1e300, small.mean, rtol=1e-12)
    np.testing.assert_allclose(fitted.std / 1e300, small.std, rtol=1e-12)
    np.testing.assert_allclose(fitted.inverse(fitted.transform(y)), y, rtol=1e-12)


# --- Proposals a scientist can trust -------------------------------------------------------------


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


def test_no_possible_proposal_is_an_error_and_writes_nothing(capsys, tmp_path):
    # Every sequence of 2 letters of AB is measured: nothing new can be proposed.
    path = tmp_path / "all.csv"
    pd.DataFrame({"s": ["AA", "AB", "BA", "BB"] * 3, "y": np.arange(12.0)}).to_csv(
        path, index=False
    )
    code, _, err = optimize(capsys, path, "--target", "y", "--sequence", "s")
    assert code == 2 and "no proposal could be made" in err
    assert not (tmp_path / "out.csv").exists()


def test_a_min_distance_no_candidate_reaches_is_an_error_and_writes_nothing(capsys, tmp_path):
    frame = numeric_frame(20)
    opt = TableOptimizer(target="y", method="random", preset="quick", seed=0, min_distance=100).fit(
        frame
    )
    with pytest.warns(ProposalWarning, match="no new designs: .* none at least min_distance 100"):
        proposals = opt.propose(8)
    assert len(proposals) == 0
    assert list(proposals.columns) == NUMERIC_PROPOSAL_COLUMNS
    path = tmp_path / "data.csv"
    frame.to_csv(path, index=False)
    model = tmp_path / "m.pt"
    code, _, err = optimize(
        capsys, path, "--target", "y", "--min-distance", "100", "--save-model", model
    )
    assert_one_line_error(code, err, "no proposal could be made", "nothing written")
    assert not (tmp_path / "out.csv").exists() and not model.exists()


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


def test_device_option_runs_on_the_cpu_and_is_checked_before_fitting(capsys, tmp_path):
    frame = numeric_frame()
    default = TableOptimizer(target="y", method="ga", preset="quick", seed=1).fit(frame)
    on_cpu = TableOptimizer(target="y", method="ga", preset="quick", seed=1, device="cpu")
    pd.testing.assert_frame_equal(on_cpu.fit(frame).propose(8), default.propose(8))
    with pytest.raises(MatchoptError, match="device 'tpu' is not a device"):
        TableOptimizer(target="y", method="random", device="tpu").fit(frame)
    path = tmp_path / "data.csv"
    frame.to_csv(path, index=False)
    code, _, err = optimize(capsys, path, "--target", "y", "--device", "tpu")
    assert_one_line_error(code, err, "--device 'tpu' is not a device")
    assert not (tmp_path / "out.csv").exists()
    loaded = TableOptimizer.load_bytes(on_cpu.to_bytes())
    assert loaded.device == "cpu" and loaded.method_.device == "cpu"  # files load onto the CPU


@pytest.mark.parametrize("oversample", [0, 101])
def test_oversample_out_of_range_is_refused_before_fitting(oversample):
    optimizer = TableOptimizer(target="y", method="random", preset="quick", oversample=oversample)
    with pytest.raises(MatchoptError, match=f"oversample must be from 1 to 100, got {oversample}"):
        optimizer.fit(numeric_frame())


def test_a_model_file_that_fails_to_propose_is_one_error_line_naming_it(
    tmp_path, monkeypatch, capsys
):
    # Layers that each pass the model-file checks but do not fit together fail only when the
    # generator runs: one line naming the file, not a traceback.
    path = tmp_path / "model.pt"
    TableOptimizer(target="y", method="random", preset="quick", seed=0).fit(numeric_frame()).save(
        path
    )

    def broken(self, n=128):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x3 and 5x7)")

    monkeypatch.setattr(TableOptimizer, "_propose", broken)
    code, out, err = run_cli(capsys, "propose", "--model", path, "--out", tmp_path / "p.csv")
    assert_one_line_error(code, err, str(path), "fails to propose", "RuntimeError: mat1")
    assert not (tmp_path / "p.csv").exists() and out == ""


def test_unsigned_64_bit_counts_near_the_limit_come_back_as_such(tmp_path):
    pytest.importorskip("pyarrow")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(80, 2))
    table = pd.DataFrame(x, columns=["a", "b"]).assign(y=-(x**2).sum(axis=1))
    table["u"] = np.uint64(2**64 - 1) - rng.integers(0, 1000, size=80).astype(np.uint64)
    proposals = TableOptimizer(target="y", method="random", seed=0).fit(table).propose(8)
    assert proposals["u"].dtype == np.uint64
    assert (proposals["u"] >= np.uint64(2**64 - 2**13)).all()
    # Distances to the measured rows keep the other columns' differences.
    assert (proposals["nearest_euclidean"] > 0).all()


def test_whole_numbers_use_the_integer_type_that_holds_them():
    from matchopt.tabular.schema import whole_numbers

    assert whole_numbers(np.array([-3.0, 2.0**62])).dtype == np.int64
    big = whole_numbers(np.array([0.0, 2.0**64]))
    assert big.dtype == np.uint64 and big[1] == np.uint64(2**64 - 2**11)
    assert whole_numbers(np.array([-1.0, 2.0**64])).dtype == np.float64


@pytest.mark.parametrize("kind", ["device", "fifo", "proc"])
def test_a_table_path_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    from matchopt.tabular import read_table

    path = tmp_path / "data.csv"
    if kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "proc":
        if not os.path.exists("/proc/self/pagemap"):
            pytest.skip("no /proc/self/pagemap")
        path.symlink_to("/proc/self/pagemap")  # says 0 bytes, gives gigabytes
    else:
        os.mkfifo(path)
    words = "says it is empty but is not" if kind == "proc" else "not a regular file"
    with pytest.raises(MatchoptError, match=words):
        read_table(path)


def test_an_output_name_too_long_for_its_temporary_file_is_written(capsys, tmp_path):
    """A legal name whose temporary name (14 characters longer) was not: it failed after the
    fit. Now the temporary name is short where the long one does not fit."""
    data = tmp_path / "data.csv"
    numeric_frame(40).to_csv(data, index=False)
    out = tmp_path / ("p" * 251 + ".csv")
    args = ["optimize", data, "--target", "y", "--method", "random", "--n", "3"]
    code, _, err = run_cli(capsys, *args, "--out", out, "--report", tmp_path / "r.html")
    assert code == 0, err
    assert len(pd.read_csv(out)) == 3


def test_an_output_name_the_file_system_refuses_is_refused_before_the_fit(
    capsys, tmp_path, monkeypatch
):
    """The default report name adds ``.report.html`` to a 251-character --out: 258 bytes."""
    data = tmp_path / "data.csv"
    numeric_frame(40).to_csv(data, index=False)
    monkeypatch.setattr(TableOptimizer, "fit", lambda *a, **k: pytest.fail("fitted"))
    out = tmp_path / ("p" * 251 + ".csv")
    args = ["optimize", data, "--target", "y", "--method", "random", "--out", out]
    code, _, err = run_cli(capsys, *args)
    assert_one_line_error(code, err, "--report ppp", "a name of 263 bytes, over the 255")
    code, _, err = run_cli(capsys, *args[:-1], tmp_path / ("q" * 256 + ".csv"))
    assert_one_line_error(code, err, "--out qqq", "a name of 260 bytes, over the 255")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]


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
