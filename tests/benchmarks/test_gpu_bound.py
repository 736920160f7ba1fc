"""benchmarks/gpu_bound.py: the budget plan of the GPU grid, and one timed row (quick to run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def load_gpu_bound():
    return load_benchmark("gpu_bound")


def row(method: str, minutes: float, device: str = "cuda") -> dict:
    return {"method": method, "device": device, "expected_4_seeds_minutes": minutes}


def test_the_plan_keeps_the_cheapest_methods_that_fit_the_budget(capsys):
    gpu_bound = load_gpu_bound()
    rows = [row("bonet", 30.0), row("mins", 3.0), row("coms", 4.0), row("ddom", 2.5)]
    assert gpu_bound.plan(rows, budget_seconds=600) == ["ddom", "mins", "coms"]
    out = capsys.readouterr().out
    assert "bonet" in out and "over the budget: left out" in out
    assert "plan on cuda: ddom,mins,coms, 9.5 min expected of 10.0" in out
    assert gpu_bound.plan(rows, budget_seconds=600, keep_all=True) == [
        "ddom",
        "mins",
        "coms",
        "bonet",
    ]
    assert gpu_bound.plan(rows, budget_seconds=60) == []
    # Rows of other devices (the CPU's, measured first) are not the plan's.
    assert gpu_bound.plan([row("ddom", 1.0, "cpu"), row("ddom", 500.0)], 600) == []


def test_steps_per_epoch_follow_the_data_or_bonets_windows():
    gpu_bound = load_gpu_bound()
    from matchopt.methods import make_method

    assert gpu_bound.steps_per_epoch("ddom", make_method("ddom").config_, 32_898) == 258
    bonet = make_method("bonet").config_  # 800 trajectories x 128 points, batches of 128
    assert gpu_bound.steps_per_epoch("bonet", bonet, 32_898) == 800


@pytest.mark.parametrize("script", ["gpu_grid.sh", "dev_suite.sh", "superconductor.sh"])
def test_the_benchmark_scripts_parse(script):
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / script)], check=True)


def test_a_timed_row_and_its_plan_file(tmp_path):
    plan_file = tmp_path / "plan.txt"
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_bound.py"),
            "--methods",
            "ddom",
            "--steps",
            "1",
            "--devices",
            "cpu",
            "--budget",
            "1e9",
            "--plan-file",
            str(plan_file),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    assert "ddom      cpu" in out and "seeds batched" in out
    assert plan_file.read_text() == "ddom"


def test_the_step_profile_counts_operators_and_host_syncs_per_step():
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "step_profile.py"),
            "--methods",
            "ddom",
            "--steps",
            "2",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert [(r["method"], r["seeds"]) for r in rows] == [("ddom", 1), ("ddom", 4)]
    for row in rows:
        assert row["steps"] == 2 and row["operators_per_step"] > 0
        # DDOM reads its loss once a seed per epoch, never per step (no host sync per step).
        assert row["host_syncs_per_step"] == row["seeds"] / row["steps"]
        assert 0 < row["operator_share"] <= 1.5


def test_point_mutants_are_every_design_one_token_away():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from mutant_ceiling import point_mutants

    rows = np.array([[0, 1, 2], [0, 1, 0]])
    mutants = point_mutants(rows, 3, exclude=rows)
    # 2 rows x 3 positions x 2 other tokens, less the shared ones and the rows themselves.
    expected = {
        tuple(m)
        for row in rows
        for p in range(3)
        for t in range(3)
        if t != row[p]
        for m in [np.where(np.arange(3) == p, t, row)]
    } - {tuple(r) for r in rows}
    assert {tuple(m) for m in mutants} == expected and len(mutants) == len(expected)


def test_the_epoch_is_the_named_tasks_and_an_unknown_task_is_one_line():
    script = [sys.executable, str(ROOT / "benchmarks" / "gpu_bound.py")]
    timed = [*script, "--methods", "ddom", "--steps", "1", "--devices", "cpu"]
    out = subprocess.run(
        [*timed, "--task", "styblinski-tang"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    from matchopt.tasks import load_task

    rows = len(load_task("styblinski-tang").offline)
    assert out.startswith(f"styblinski-tang epoch ({rows} rows), paper preset")
    wrong = subprocess.run([*timed, "--task", "tfbind9"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "unknown task 'tfbind9'" in wrong.stderr
    assert "Traceback" not in wrong.stderr
