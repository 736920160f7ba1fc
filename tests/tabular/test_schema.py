"""A user's table read, validated, encoded and decoded (matchopt.tabular.schema): formats, bad
inputs named by file, column, row and line in one error line, no traceback."""

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from table_helpers import (
    HOSTILE,
    assert_one_line_error,
    mixed_frame,
    numeric_frame,
    optimize,
    run_cli,
)

from matchopt.errors import MatchoptError
from matchopt.tabular import (
    TableOptimizer,
    TableSchema,
    read_table,
)


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


def test_column_names_in_errors_are_escaped(capsys, tmp_path):
    data = tmp_path / "data.csv"
    numeric_frame().rename(columns={"a": f"a{HOSTILE}"}).to_csv(data, index=False)
    for option in ("--target", "--features"):
        args = ["--target", "nope"] if option == "--target" else ["--target", "y", option, "zz"]
        code, _, err = run_cli(capsys, "optimize", data, *args, "--out", tmp_path / "o.csv")
        assert_one_line_error(code, err, "columns: a\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\n")
        assert "\x1b" not in err


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
