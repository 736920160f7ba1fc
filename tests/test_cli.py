"""The CLI as a user runs it: exit codes, stdout/stderr contents. Runs that depend on a fresh
process (threads, records of a whole run) start a subprocess; the others run ``main()`` in this
process with the environment a subprocess would get (the same code path without a second start
of Python and torch for each case)."""

import json
import os
import re
import subprocess
import sys
import tempfile

import pytest
from table_helpers import (
    assert_one_line_error,
    numeric_frame,
    run_cli,
    subprocess_cli,
)

from matchopt.tabular import (
    TableOptimizer,
)


def matchopt(*args, env_data_dir=None, **kwargs):
    env = dict(os.environ)
    env.pop("MATCHOPT_DATA_DIR", None)
    # An empty cache: a real ~/.cache/matchopt must not change what these tests see.
    env["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), "matchopt-test-empty-cache")
    if env_data_dir is not None:
        env["MATCHOPT_DATA_DIR"] = str(env_data_dir)
    return subprocess.run(
        [sys.executable, "-m", "matchopt.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        **kwargs,
    )


@pytest.fixture
def in_process(monkeypatch, capsys, tmp_path):
    """``matchopt(*args)`` as :func:`matchopt` gives it, run by ``main()`` in this process, in an
    empty working folder; thread settings a command makes are undone afterwards."""
    import torch

    from matchopt import runtime
    from matchopt.cli import main

    monkeypatch.delenv("MATCHOPT_DATA_DIR", raising=False)
    monkeypatch.setenv(
        "XDG_CACHE_HOME", os.path.join(tempfile.gettempdir(), "matchopt-test-empty-cache")
    )
    variables = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    saved = {variable: os.environ.get(variable) for variable in variables}
    monkeypatch.setattr(runtime, "_threads_chosen", dict(runtime._threads_chosen))
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()

    def call(*args: str) -> subprocess.CompletedProcess:
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit:  # argparse's own errors
            code = exit.code
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, captured.out, captured.err)

    yield call
    torch.set_num_threads(threads)
    for variable, value in saved.items():
        if value is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = value


def test_run_quick_json_writes_records(tmp_path):
    result = matchopt(
        "run", "--preset", "quick", "--seeds", "0,1", "--json", "--out", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    records = [json.loads(line) for line in lines]
    for seed, record in zip((0, 1), records):
        assert record["task"] == "styblinski-tang" and record["method"] == "matchopt"
        assert record["seed"] == seed and record["preset"] == "quick"
        assert len(record["scores"]) == 128
        assert record["p100"] == max(record["scores"])
        for key in ("config", "p50", "offline_best", "fit_seconds", "search_seconds", "version"):
            assert key in record
        saved = tmp_path / "styblinski-tang" / "matchopt" / f"seed{seed}.json"
        assert json.loads(saved.read_text())["scores"] == record["scores"]


def test_run_table_and_set(tmp_path):
    result = matchopt(
        "run",
        "--task",
        "potts",
        "--preset",
        "quick",
        "--set",
        "epochs=2",
        "--set",
        "quadrature=left-riemann",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"\| potts +\| matchopt +\| quick +\| 0 +\|", result.stdout)
    record = json.loads((tmp_path / "potts" / "matchopt" / "seed0.json").read_text())
    assert record["config"]["epochs"] == 2
    assert record["config"]["quadrature"] == "left-riemann"


def test_noreg_is_registered(tmp_path, in_process):
    result = in_process(
        "run", "--method", "matchopt-noreg", "--preset", "quick", "--json", "--out", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config"]["alpha"] == 0.0


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--task", "nope"], "unknown task 'nope'"),
        (["run", "--method", "nope"], "unknown method 'nope'"),
        (["run", "--set", "epochs"], "malformed --set"),
        (["run", "--set", "nope=1"], "--set nope: unknown for MatchOpt; valid keys"),
        (["run", "--set", "epochs=many"], "--set epochs=many: 'many' is not an integer"),
        (["run", "--set", "epochs=ten"], "--set epochs=ten: 'ten' is not an integer"),
        (["run", "--set", "lr=fast"], "'fast' is not a number"),
        (["run", "--set", "hidden=8,x"], "'8,x' is not integers separated by commas"),
        (["run", "--set", "refit=maybe"], "'maybe' is not true or false"),
        (["run", "--set", "search_lr=big"], "'big' is not a number (or none)"),
        (["run", "--set", "quadrature=simpson"], "choose one of"),
        (["run", "--method", "matchopt-noreg", "--set", "alpha=1"], "fixes alpha"),
        (["run", "--seeds", "a,b"], "--seeds"),
        (["run", "--seeds", "-1"], "--seeds -1: seeds must be integers from 0 to 4294967295"),
        (
            ["run", "--seeds", "99999999999999999999999"],
            "--seeds 99999999999999999999999: seeds must be integers from 0 to 4294967295",
        ),
        (["run", "--seeds", "0,4294967296"], "seeds must be integers from 0 to 4294967295"),
        (["run", "--seeds", "0,0"], "--seeds 0,0: a seed is repeated"),
        (["run", "--set", "epochs=-3"], "--set epochs=-3: must be an integer >= 1"),
        (["run", "--set", "epochs=0"], "--set epochs=0: must be an integer >= 1"),
        (["run", "--set", "lr=nan"], "--set lr=nan: must be a finite number"),
        (["run", "--set", "lr=0"], "--set lr=0.0: a learning rate must be > 0"),
        (["run", "--set", "hidden=-5"], "--set hidden=-5: widths must be >= 1"),
        (["run", "--set", "trajectory_length=0"], "must be an integer >= 2"),
        (["run", "--set", "validation_fraction=0.9"], "must be in [0, 0.5]"),
        (
            ["bench", "--tasks", "potts", "--methods", "ga", "--out", "x", "--set", "epochs=0"],
            "--set epochs=0: must be an integer >= 1",
        ),
        (["optimize", "x.csv", "--target", "y", "--seed", "-1"], "seeds are integers from 0"),
        (
            ["optimize", "x.csv", "--target", "y", "--seed", "18446744073709551616"],
            "argument --seed: 18446744073709551616: seeds are integers from 0 to 4294967295",
        ),
        (["study", "gradient-error", "--seed", "-1"], "seeds are integers from 0 to 4294967295"),
        (["study", "gradient-error", "--seed", "4294967296"], "seeds are integers from 0 to"),
        (["propose", "--model", "m.pt", "--n", "10000000000"], "at most 100,000 proposals"),
        (["run", "--out", __file__], f"--out {__file__} is a file, not a folder"),
        (
            ["bench", "--tasks", "potts", "--methods", "random", "--out", __file__],
            f"results folder {__file__} is a file",
        ),
        (["study", "gradient-error", "--out", __file__], f"study folder {__file__} is a file"),
        (["run", "--task", "tfbind8"], "matchopt data fetch tfbind8"),
        (["run", "--threads", "0"], "--threads 0: needs at least 1 thread"),
        (["optimize", "x.csv", "--target", "y", "--threads", "two"], "whole number of threads"),
        (["run", "--threads", "1000"], f"--threads 1000: at most {4 * (os.cpu_count() or 1)} "),
        (["propose", "--model", "m.pt", "--threads", "1000"], "--threads 1000: at most"),
        (
            ["bench", "--tasks", "potts", "--methods", "random", "--out", "x", "--threads", "0"],
            "--threads 0: needs at least 1 thread",
        ),
        (
            ["bench", "--tasks", "potts", "--methods", "random", "--out", "x", "--threads", "1000"],
            "--threads 1000: at most",
        ),
        (
            ["bench", "--tasks", "potts", "--methods", "random", "--out", "x"]
            + ["--seeds", "0,5000000000"],
            "--seeds 0,5000000000: seeds must be integers from 0 to 4294967295",
        ),
        (["bogus"], "invalid choice"),
    ],
)
def test_clear_errors(args, message, in_process):
    result = in_process(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_data_dir_error(tmp_path):
    result = matchopt("run", "--task", "tfbind8", "--data-dir", str(tmp_path / "nowhere"))
    assert result.returncode == 2
    assert "tf_bind_8-x-0.npy" in result.stderr and "Traceback" not in result.stderr


def test_tasks_and_methods_listing(tmp_path, in_process):
    result = in_process("tasks", "--data-dir", str(tmp_path))
    assert result.returncode == 0
    for name in ("styblinski-tang", "potts", "tfbind8"):
        assert name in result.stdout
    assert "missing" in result.stdout and "embedded" in result.stdout
    result = in_process("methods")
    assert result.returncode == 0 and "matchopt-noreg" in result.stdout
    from matchopt.methods import METHODS

    rows = [line for line in result.stdout.splitlines() if line.startswith("  ")]
    assert len(rows) == len(METHODS)  # one row per method, under its kind's title
    assert result.stdout.rstrip().endswith("lists a method's config fields (--set KEY=VALUE).")
    result = in_process("methods", "matchopt")
    assert result.returncode == 0
    assert "epochs = 200  [quick: 4" in result.stdout  # paper value, then other presets
    assert "Training epochs; each draws" in result.stdout  # the field's docstring
    result = in_process("methods", "ga")
    assert "n_models = 1 (fixed by this method)" in result.stdout


def test_tasks_lists_the_suites(in_process):
    from matchopt.tasks import SUITES

    result = in_process("tasks")
    assert result.returncode == 0
    line = next(x for x in result.stdout.splitlines() if x.startswith("suite dev"))
    assert line.endswith(", ".join(SUITES["dev"]))
    assert "`matchopt bench --suite dev`" in line


def test_bench_suite_runs_the_suites_tasks(monkeypatch):
    from matchopt import cli
    from matchopt.bench.grid import GridSummary
    from matchopt.cli import commands
    from matchopt.tasks import SUITES

    seen = []

    def fake_run_grid(grid, out, **kwargs):
        seen.append(grid)
        return GridSummary(out=out, total=0)

    monkeypatch.setattr(commands, "run_grid", fake_run_grid)
    assert cli.main(["bench", "--suite", "dev", "--methods", "random", "--out", "unused"]) == 0
    assert seen[0].tasks == list(SUITES["dev"])


def test_bench_report_and_study_commands(tmp_path, in_process):
    out = tmp_path / "grid"
    bench = in_process(
        "bench", "--tasks", "potts", "--methods", "random,untrained", "--seeds", "0,1",
        "--preset", "quick", "--workers", "1", "--out", str(out),
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    assert "grid: 4 cells  finished 4" in bench.stdout
    assert re.search(r"\| potts +\| random +\| quick +\| 0,1 +\|", bench.stdout)

    report = in_process("report", str(out), "--format", "latex", "--plots", str(tmp_path / "figs"))
    assert report.returncode == 0, report.stderr
    assert "\\toprule" in report.stdout and "\\textbf{" in report.stdout
    assert (tmp_path / "figs" / "percentile_curves.png").is_file()
    csv_report = in_process("report", str(out), "--format", "csv", "--percentiles", "100")
    assert csv_report.stdout.startswith("metric,task,method,q,mean,std,n_seeds,rank,mnr")

    study = in_process(
        "study", "gradient-error", "--out", str(tmp_path / "study"), "--epochs", "1",
        "--n-train", "64", "--n-test", "32", "--alphas", "0.1,1", "--batch-size", "16",
    )  # fmt: skip
    assert study.returncode == 0, study.stderr
    assert (tmp_path / "study" / "gradient_error.png").is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        (["bench", "--tasks", "potts", "--methods", "random", "--out", "x", "--workers", "0"],
         "--workers 0"),
        (["bench", "--tasks", "", "--methods", "random", "--out", "x"], "--tasks needs"),
        (["report", "nowhere-at-all"], "nowhere-at-all"),
        (["report", ".", "--percentiles", "101"], "percentile"),
        (["study", "gradient-error", "--alphas", "a"], "--alphas"),
        (["bench", "--suite", "nope", "--methods", "random", "--out", "x"], "invalid choice"),
        (["bench", "--suite", "dev", "--tasks", "potts", "--methods", "random", "--out", "x"],
         "not allowed with"),
        (["bench", "--methods", "random", "--out", "x"], "--tasks --suite"),
        (["report", ".", "--suite", "dev", "--tasks", "potts"], "not both"),
        (["study", "search-settings", "--grid", "search_step"], "malformed --grid"),
        (["study", "search-settings", "--grid", "a=1", "--grid", "a=2"], "twice"),
        (["study", "search-settings", "--grid", "nope=1", "--task", "potts"], "nope"),
    ],
)  # fmt: skip
def test_grid_command_errors(args, message, in_process):
    result = in_process(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_design_bench_names_work_as_task_names(tmp_path, in_process, monkeypatch):
    from task_fixtures import write_sequences

    from matchopt.tasks import TASKS

    data = tmp_path / "data"
    write_sequences(data, TASKS["tfbind8"], n_rows=4**8)  # every 8-mer: any design scores
    out = tmp_path / "runs"
    monkeypatch.setenv("MATCHOPT_DATA_DIR", str(data))
    result = in_process(
        "run", "--task", "TFBind8-Exact-v0", "--method", "random", "--preset", "quick",
        "--json", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["task"] == "tfbind8"
    assert (out / "tfbind8" / "random" / "seed0.json").is_file()
    twice = in_process(
        "bench", "--tasks", "tfbind8,TFBind8-Exact-v0", "--methods", "random", "--out", "x"
    )
    assert twice.returncode == 2 and "--tasks lists 'tfbind8' twice" in twice.stderr
    unknown = in_process("run", "--task", "TFBind9-Exact-v0")
    assert unknown.returncode == 2 and "design-bench names: TFBind8-Exact-v0" in unknown.stderr


def test_run_skips_recorded_seeds_and_a_failed_run_leaves_no_folder(
    tmp_path, in_process, monkeypatch
):
    out = tmp_path / "runs"
    first = in_process("run", "--preset", "quick", "--seeds", "0", "--out", str(out))
    assert first.returncode == 0, first.stderr
    record = out / "styblinski-tang" / "matchopt" / "seed0.json"
    written = record.read_bytes(), record.stat().st_mtime_ns
    again = in_process("run", "--preset", "quick", "--seeds", "0,1", "--json", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert "seed 0 / quick] recorded already" in again.stderr
    assert "MATCH-OPT training" in again.stderr  # seed 1 trains
    assert [json.loads(line)["seed"] for line in again.stdout.splitlines()] == [0, 1]
    assert (record.read_bytes(), record.stat().st_mtime_ns) == written

    monkeypatch.setenv("MATCHOPT_DATA_DIR", str(tmp_path / "no-data"))
    missing = in_process("run", "--task", "tfbind8", "--out", "fresh")
    assert missing.returncode == 2 and "not found" in missing.stderr
    assert not (tmp_path / "fresh").exists()


@pytest.mark.parametrize(
    "argv, said",
    [
        (["optimize", "t.csv", "--target", "y"], "no file is left half-written"),
        (["run", "--preset", "quick"], "recorded seeds are kept"),
    ],
)
def test_ctrl_c_says_what_the_command_kept(argv, said, monkeypatch, capsys, tmp_path):
    from matchopt import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, argv[0], interrupted)
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 130
    err = capsys.readouterr().err
    assert err.startswith("matchopt: interrupted (") and said in err
    if argv[0] == "optimize":
        assert "seed" not in err


def test_the_recommended_method_is_marked_and_is_the_default_of_optimize_and_the_table_optimizer(
    capsys,
):
    import inspect

    from matchopt.cli import build_parser, main
    from matchopt.methods import METHODS, RECOMMENDED_METHOD
    from matchopt.tabular import TableOptimizer

    assert RECOMMENDED_METHOD in METHODS
    from matchopt.methods import METHODS

    assert main(["methods"]) == 0
    lines = capsys.readouterr().out.splitlines()
    title = lines.index("Recommended (the default of `matchopt optimize`):")
    assert lines[title + 1].split()[0] == RECOMMENDED_METHOD
    listed = [line.split()[0] for line in lines if line.startswith("  ")]
    assert sorted(listed) == sorted(METHODS)  # every method once
    variants = lines.index(f"Variants of {RECOMMENDED_METHOD} (its settings but these):")
    assert lines[variants + 1].startswith("  matchopt-ens ") and "(not " in lines[variants + 1]
    args = build_parser().parse_args(["optimize", "t.csv", "--target", "y", "--out", "p.csv"])
    assert args.method == RECOMMENDED_METHOD
    assert inspect.signature(TableOptimizer).parameters["method"].default == RECOMMENDED_METHOD
    assert main(["methods", RECOMMENDED_METHOD]) == 0
    assert "(recommended)" in capsys.readouterr().out.splitlines()[0]


# --- optimize writes every file before it reports ------------------------------------------------


@pytest.fixture
def table(tmp_path):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.uniform(size=(40, 2)), columns=["a", "b"])
    frame.assign(y=rng.normal(size=40)).to_csv(tmp_path / "base.csv", index=False)
    return tmp_path / "base.csv"


def optimize_args(table):
    folder = table.parent
    return [
        "optimize", str(table), "--target", "y", "--method", "random", "--n", "4",
        "--out", str(folder / "o.csv"), "--save-model", str(folder / "m.pt"),
    ]  # fmt: skip


def test_a_stdout_that_fails_loses_no_file_and_says_so(table, monkeypatch, capsys):
    import errno

    from matchopt.cli import main

    class Full:  # an unbuffered stdout on a full disk: every write fails
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass  # nothing is ever held

    monkeypatch.setattr(sys, "stdout", Full())
    assert main(optimize_args(table)) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("matchopt: e")]
    folder = table.parent
    assert line == (
        "matchopt: error: cannot show the results on stdout: No space left on device; written: "
        f"proposals {folder / 'o.csv'}, report {folder / 'o.report.html'}, model {folder / 'm.pt'}"
    )
    for name in ("o.csv", "o.report.html", "m.pt"):
        assert (folder / name).stat().st_size > 0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_optimize_onto_dev_full_writes_the_model_file_too(table):
    """The issue's command: unbuffered stdout on /dev/full wrote o.csv, not m.pt, and said
    nothing of the model."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "matchopt.cli", *optimize_args(table)],
            stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=300,
        )  # fmt: skip
    assert result.returncode == 2
    assert "written: proposals" in result.stderr and "model " in result.stderr
    assert (table.parent / "m.pt").stat().st_size > 0


def test_a_file_that_cannot_be_written_names_what_was_and_was_not(table, monkeypatch, capsys):
    import matchopt.tabular.outputs as outputs
    from matchopt.cli import main
    from matchopt.errors import MatchoptError

    real = outputs.write_file

    def full_at_the_model(path, data):
        if path.name == "m.pt":
            raise MatchoptError(f"cannot write {path}: No space left on device")
        real(path, data)

    monkeypatch.setattr(outputs, "write_file", full_at_the_model)
    assert main(optimize_args(table)) == 2
    err = capsys.readouterr().err
    folder = table.parent
    assert (
        f"No space left on device; written: proposals {folder / 'o.csv'}, report "
        f"{folder / 'o.report.html'}; NOT written: model {folder / 'm.pt'}"
    ) in err
    assert not (folder / "m.pt").exists()


def test_every_subcommand_is_registered_where_it_is_defined():
    from matchopt import cli
    from matchopt.cli import commands

    parser = cli.build_parser()
    (subparsers,) = [a for a in parser._actions if a.choices and "run" in a.choices]
    assert set(subparsers.choices) == set(cli.COMMANDS) == set(commands.REGISTERED)


def test_the_command_line_refuses_a_name_given_twice(tmp_path, capsys):
    from matchopt.cli import main

    argv = ["bench", "--tasks", "potts, styblinski-tang,potts", "--methods", "random"]
    assert main([*argv, "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert "--tasks lists 'potts' twice" in capsys.readouterr().err


def test_run_into_a_bench_folder_takes_its_lock_and_keeps_other_configs(tmp_path, capsys):
    from matchopt.bench.grid import LOCK_FILE
    from matchopt.cli import main
    from matchopt.io import file_lock

    run = ["run", "--task", "potts", "--method", "random", "--preset", "quick", "--seeds", "0"]
    with file_lock(tmp_path / LOCK_FILE, wait=False):  # as a running bench holds it
        assert main([*run, "--out", str(tmp_path)]) == 2
    assert f"a bench or run (pid {os.getpid()}) is writing into" in capsys.readouterr().err
    assert not list(tmp_path.rglob("seed*.json"))
    assert main([*run, "--out", str(tmp_path)]) == 0
    record = tmp_path / "potts" / "random" / "seed0.json"
    before = record.read_bytes()
    # Another preset into the same folder: refused before any work, the record kept.
    assert main([*run[:-4], "--preset", "paper", "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert "made with another preset or config" in capsys.readouterr().err
    assert record.read_bytes() == before


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
