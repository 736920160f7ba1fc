"""The files of `matchopt optimize` (matchopt.tabular.outputs): checked before any work, written
atomically, never the input table, existing files refused unless forced."""

import os

import numpy as np
import pandas as pd
import pytest
from table_helpers import (
    assert_one_line_error,
    numeric_frame,
    run_cli,
)

from matchopt.tabular import (
    TableOptimizer,
)
from matchopt.tabular.known_tables import smooth_table


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
