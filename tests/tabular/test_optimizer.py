"""The table optimizer end to end (matchopt.tabular.optimizer): proposals of numeric,
categorical and sequence tables, save/load, every method on a table, `matchopt optimize` then
`matchopt propose`."""

import warnings

import numpy as np
import pandas as pd
import pytest
from table_helpers import (
    HOSTILE,
    NUMERIC_PROPOSAL_COLUMNS,
    PREDICTION_COLUMNS,
    SOLVENTS,
    assert_new_and_unique,
    assert_one_line_error,
    mixed_frame,
    numeric_frame,
    optimize,
    run_cli,
    sequence_frame,
    subprocess_cli,
)

from matchopt.errors import MatchoptError
from matchopt.methods import METHODS
from matchopt.tabular import (
    ProposalWarning,
    TableOptimizer,
)


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


def test_load_rejects_a_file_that_is_not_a_model(capsys, tmp_path):
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"not a model")
    code, _, err = run_cli(capsys, "propose", "--model", bad, "--out", tmp_path / "o.csv")
    assert_one_line_error(code, err, "model.pt", "not a matchopt model file")
    code, _, err = run_cli(capsys, "propose", "--model", tmp_path / "no.pt")
    assert_one_line_error(code, err, "no.pt", "no such model file")


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
