"""A grid's cells and jobs as a worker runs them (matchopt.bench.cells): workers die with their
driver, one worker shows the running cell's own progress."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import GRID_ARGS, _alive, _children

from matchopt.bench import Grid, run_grid


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_workers_die_with_a_killed_driver(tmp_path):
    # No pipes: a surviving worker would hold them open and hang the test instead of failing it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "matchopt.cli", "bench", *GRID_ARGS, "--out", str(tmp_path)]
        + ["--workers", "2"],
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    workers: set[int] = set()
    while time.monotonic() < deadline and proc.poll() is None:
        # Pool workers are the children that imported matchopt (not the resource tracker).
        workers = {
            p for p in _children(proc.pid) if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()
        }
        if len(workers) >= 2:
            break
        time.sleep(0.2)
    assert len(workers) >= 2, "the grid's pool did not start"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # Workers notice within a second once running; one still importing torch on a loaded
    # machine (this suite beside other jobs) notices when the import ends: a loose deadline.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.2)
    survivors = [p for p in workers if _alive(p)]
    for pid in survivors:  # leave nothing running, then fail
        os.kill(pid, signal.SIGKILL)
    assert not survivors, "a worker outlived its driver"


def test_one_worker_shows_the_running_cells_own_progress(tmp_path, capsys):
    # An hours-long cell must not sit behind a grid bar that moves once per cell.
    grid = Grid(["potts"], ["matchopt"], [0], preset="quick", overrides={"epochs": "3"})
    assert not run_grid(grid, tmp_path / "shown", workers=1, progress=True).failed
    assert "MATCH-OPT training" in capsys.readouterr().err
    assert not run_grid(grid, tmp_path / "quiet", workers=1, progress=False).failed
    assert capsys.readouterr().err == ""
