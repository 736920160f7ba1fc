"""benchmarks/cell_drops.py: cells where a candidate falls below another method by > 2 SE."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

from matchopt.errors import MatchoptError
from matchopt.records import RunRecord, write_record

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "cell_drops.py"


def load_script():
    return load_benchmark("cell_drops")


def record(task, method, seed, p100, p50):
    return RunRecord(
        task, method, seed, "paper", {}, [p100, p50], p100, p50, 0.5, 1.0, 1.0, "test", 2
    )


def test_a_drop_beyond_two_standard_errors_is_counted_and_noise_is_not(tmp_path, capsys):
    module = load_script()
    # Task a: the candidate's p50 is far below (0.5 vs 0.8, tight seeds); its p100 is level.
    # Task b: the candidate is lower but within the seeds' spread.
    for seed, (noise_a, noise_b) in enumerate([(0.01, -0.2), (-0.01, 0.0), (0.0, 0.2)]):
        write_record(tmp_path / "c", record("a", "cand", seed, 0.9 + noise_a, 0.5 + noise_a))
        write_record(tmp_path / "o", record("a", "other", seed, 0.9 - noise_a, 0.8 - noise_a))
        write_record(tmp_path / "c", record("b", "cand", seed, 0.6 + noise_b, 0.55 + noise_b))
        write_record(tmp_path / "o", record("b", "other", seed, 0.6, 0.6))
    rows = module.cell_drops(module.load_records(tmp_path), "cand", "other")
    drops = {(r["task"], r["percentile"]) for r in rows if r["drop"]}
    assert drops == {("a", "p50")} and len(rows) == 4
    assert module.main([str(tmp_path), "cand", "other"]) == 0
    assert "1 of 4 cells drop by more than two standard errors" in capsys.readouterr().out


def test_methods_without_common_cells_are_named(tmp_path):
    module = load_script()
    write_record(tmp_path, record("a", "cand", 0, 0.9, 0.5))
    with pytest.raises(MatchoptError, match="both cand and other"):
        module.main([str(tmp_path), "cand", "other"])


def test_the_candidate_judgement_reports_both_methods_on_the_candidates_tasks(tmp_path):
    # potts has the candidate's records, tfbind8 only the other methods': tfbind8 is left out.
    for seed in range(3):
        for task, method, p50 in [
            ("potts", "cand", 0.7),
            ("potts", "incumbent", 0.8),
            ("potts", "matchopt", 0.6),
            ("tfbind8", "incumbent", 0.8),
            ("tfbind8", "matchopt", 0.6),
        ]:
            write_record(tmp_path / "runs", record(task, method, seed, 0.9 + 0.01 * seed, p50))
    result = subprocess.run(
        ["bash", str(SCRIPT.parent / "candidate_judgement.sh"), "cand", "incumbent"],
        env={
            **os.environ,
            "RESULTS": str(tmp_path),
            "PYTHON": sys.executable,
            "BASELINES": "matchopt",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "tasks with records of cand: potts\n" in out
    assert "## cand among the compared baselines" in out
    assert "## incumbent among the compared baselines" in out
    assert "1 of 2 cells drop by more than two standard errors" in out


def test_the_candidate_judgement_names_a_candidate_without_records(tmp_path):
    result = subprocess.run(
        ["bash", str(SCRIPT.parent / "candidate_judgement.sh"), "cand"],
        env={**os.environ, "RESULTS": str(tmp_path), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "no records of cand under" in result.stderr
