"""benchmarks/superconductor.sh: what each lane runs (its commands printed, nothing run)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from matchopt.bench import Grid
from matchopt.methods import make_method
from matchopt.names import RECOMMENDED_METHOD

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "superconductor.sh"
#: The methods of TF-Bind-8's table in results/main, all run on the CPU.
TFBIND8_CPU_TABLE = {
    "random", "untrained", "cma-es", "bo-qei", "bdi", "cbas", "roma",
    "matchopt-noreg", "matchopt", "ens-mean", "ens-min", "ga",
}  # fmt: skip


def commands(lane: str, tmp_path: Path) -> list[list[str]]:
    """The words of each command the lane would run."""
    grid = tmp_path / "gpu_grid.sh"
    grid.write_text('echo gpu_grid "$TASK" "$METHODS" "$SEEDS" "$RESULTS"\n')
    env = {**os.environ, "LANE": lane, "MATCHOPT": "echo matchopt", "GPU_GRID": f"bash {grid}"}
    out = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [line.split() for line in out.splitlines()]


def values(words: list[str], option: str) -> list[str]:
    return [words[i + 1] for i, word in enumerate(words) if word == option]


def test_the_cpu_lane_runs_tfbind8s_cpu_table_the_recommended_method_and_auto(tmp_path):
    lines = commands("cpu", tmp_path)
    benches = [w for w in lines if w[1] == "bench"]
    methods = [m for w in benches for m in values(w, "--methods")[0].split(",")]
    assert sorted(methods) == sorted(TFBIND8_CPU_TABLE | {RECOMMENDED_METHOD, "auto"})
    for words in benches:
        assert values(words, "--tasks") == ["superconductor"]
        assert values(words, "--seeds") == ["0,1,2,3"] and values(words, "--preset") == ["paper"]
        assert values(words, "--threads") == ["1"] and values(words, "--workers") == ["1"]
        assert values(words, "--out") == ["results/main"]
    # Ens-Mean trains the ensemble that Ens-Min and GA read: it runs first of the three; the
    # acceptance's methods come before `auto`, which trains a whole pool.
    assert methods.index("ens-mean") < min(methods.index("ens-min"), methods.index("ga"))
    assert methods.index("auto") == len(methods) - 1
    assert lines[-1] == ["matchopt", "report", "results/main", "--tasks", "superconductor"]


def test_the_cpu_lanes_settings_are_the_reference_codes_and_apply(tmp_path):
    configs = {}
    for words in commands("cpu", tmp_path)[:-1]:
        grid = Grid(
            tasks=["superconductor"],
            methods=values(words, "--methods")[0].split(","),
            seeds=[0],
            overrides=dict(v.split("=", 1) for v in values(words, "--set")),
        )
        for method, overrides in grid.method_overrides("superconductor").items():
            configs[method] = make_method(method, "paper", overrides).config_
    assert {configs[m].epochs for m in ("ga", "ens-mean", "ens-min")} == {50}
    assert configs["roma"].inner_lr == 5e-4
    assert configs["matchopt"] == make_method("matchopt", "paper").config_


def test_the_ensemble_lane_is_the_cpu_lanes_ensemble_step_into_its_own_folder(tmp_path):
    cpu = [w for w in commands("cpu", tmp_path) if "ens-mean,ens-min,ga" in w]
    lines = commands("ensemble", tmp_path)
    assert lines[:-1] == cpu and len(cpu) == 1


@pytest.mark.parametrize(
    ("lane", "expected"),
    [
        ("gpu", ["gpu_grid", "superconductor", "ddom,coms,mins,bonet", "0,1,2,3", "results/main"]),
        ("gpu-bound-cpu", ["ddom,coms,mins,bonet"]),
    ],
)
def test_the_gpu_bound_methods_have_a_lane_of_their_own(tmp_path, lane, expected):
    first = commands(lane, tmp_path)[0]
    assert first == expected if first[0] == "gpu_grid" else values(first, "--methods") == expected


def test_an_unknown_lane_is_one_line_and_exit_2(tmp_path):
    env = {**os.environ, "LANE": "fast", "MATCHOPT": "echo matchopt"}
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "LANE must be cpu, ensemble, gpu, gpu-bound-cpu or report, not fast"
    ]
