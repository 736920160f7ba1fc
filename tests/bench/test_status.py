"""Each running cell's own progress, shown by the driver (matchopt.bench.status)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_cells_progress_reaches_the_driver_as_one_line():
    from matchopt.bench.status import CellStatusStream, RunningCells, time_left

    class ListQueue(list):
        put = list.append

        def get_nowait(self):
            if not self:
                raise IndexError("empty")
            return self.pop(0)

    queue = ListQueue()
    stream = CellStatusStream(queue, "potts/matchopt/seed0")
    stream.write("\rMATCH-OPT training:   1%| | 1/100\rMATCH-OPT training:   2%| | 2/100")
    stream.write("\rMATCH-OPT training:   3%| | 3/100")  # within 0.5 s of the last: kept back
    assert queue == [("potts/matchopt/seed0", "MATCH-OPT training:   2%| | 2/100")]
    assert stream.latest.endswith("3/100")
    stream.close()
    assert queue[-1] == ("potts/matchopt/seed0", None)

    running = RunningCells(2, disable=True)
    for name in ("a/m/seed0", "b/m/seed0", "c/m/seed0"):
        running.show(name, "epoch 1")
    assert running.where == {"a/m/seed0": 0, "b/m/seed0": 1}  # no third line for two workers
    queue[:] = [("a/m/seed0", None), ("c/m/seed0", "epoch 2")]
    running.drain(queue)
    assert running.where == {"b/m/seed0": 1, "c/m/seed0": 0} and not queue
    running.close()

    assert time_left([], 3, 2) == "?" and time_left([60.0, 120.0, 600.0], 0, 2) == "0 s"
    assert time_left([60.0, 120.0, 600.0], 10, 2) == "10 min"  # median 120 s x 10 / 2
    assert time_left([30.0], 2, 1) == "60 s" and time_left([3600.0], 3, 1) == "3.0 h"


def test_bench_with_workers_shows_each_running_cells_bar(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = ["--tasks", "styblinski-tang", "--methods", "matchopt", "--seeds", "0,1"]
    done = subprocess.run(
        [sys.executable, "-m", "matchopt.cli", "bench", *args, "--preset", "quick",
         "--workers", "2", "--out", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for seed in (0, 1):
        assert f"styblinski-tang/matchopt/seed{seed}: MATCH-OPT" in done.stderr
    assert "left]" in done.stderr and "last=" not in done.stderr
