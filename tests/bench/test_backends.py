"""The grid's execution backends (matchopt.bench.backends): the local pool and Ray give the same
records, stream each cell's outcome when it ends, and stop their workers when interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import _alive, _children, _records

from matchopt.bench import Grid, run_grid
from matchopt.bench.grid import Cell
from matchopt.records import RunRecord


@pytest.mark.minutes
def test_ray_backend_gives_the_same_records(tmp_path):
    pytest.importorskip("ray")
    # Both sides run two workers, so each cell gets the same threads: thread count changes the
    # summation order of BLAS kernels, hence (for some methods) the designs.
    local = run_grid(
        Grid(["potts", "styblinski-tang"], ["random", "matchopt"], [0], preset="quick"),
        tmp_path / "local",
        workers=2,
        progress=False,
    )
    assert not local.failed
    ray_run = subprocess.run(
        [
            sys.executable,
            "-m",
            "matchopt.cli",
            "bench",
            "--tasks",
            "potts,styblinski-tang",
            "--methods",
            "random,matchopt",
            "--seeds",
            "0",
            "--preset",
            "quick",
            "--backend",
            "ray",
            "--workers",
            "2",
            "--out",
            str(tmp_path / "ray"),
        ],  # fmt: skip
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ray_run.returncode == 0, ray_run.stderr
    assert _records(tmp_path / "ray") == _records(tmp_path / "local")
    record = RunRecord.from_json((tmp_path / "ray/potts/matchopt/seed0.json").read_text())
    # Two workers share the cores: each runs with cores // 2 threads.
    assert record.extra["environment"]["torch_threads"] == max(1, (os.cpu_count() or 1) // 2)


def test_an_unreachable_ray_cluster_is_one_line(tmp_path, monkeypatch, capsys):
    ray = pytest.importorskip("ray")
    from matchopt.cli import main

    def unreachable(*args, **kwargs):  # what ray.init raises when no cluster answers
        raise ConnectionError("ray client connection timeout\nmore lines of detail")

    monkeypatch.setattr(ray, "init", unreachable)
    code = main(
        ["bench", "--tasks", "potts", "--methods", "random", "--seeds", "0", "--out",
         str(tmp_path), "--backend", "ray", "--ray-address", "ray://127.0.0.1:1"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "could not start or reach the Ray cluster at ray://127.0.0.1:1: ray client" in err
    assert "more lines" not in err  # the first line of ray's message only


def _shared_ensemble_jobs(out: Path, overrides: dict[str, str] | None = None):
    """One job of two cells sharing a quick ensemble (potts seed 0)."""
    from matchopt.bench.grid import plan_jobs

    grid = Grid(
        tasks=["potts"], methods=["ens-mean", "ens-min"], seeds=[0], preset="quick",
        overrides=overrides or {},
    )  # fmt: skip
    jobs = plan_jobs(grid.cells(), out)
    assert len(jobs) == 1 and len(jobs[0].cells) == 2 and jobs[0].ensemble_folder
    return jobs


@pytest.mark.parametrize("workers", [1, 2])
def test_each_cell_of_a_shared_ensemble_job_is_collected_when_it_ends(tmp_path, workers):
    # A finished cell's record must not wait for the job's other cells: a kill meanwhile
    # would lose it. Its record is on disk before the next cell of the job has ended.
    from matchopt.bench.backends import run_local
    from matchopt.bench.grid import store_outcome

    jobs = _shared_ensemble_jobs(tmp_path)
    seen = []

    def collect(outcome):
        assert outcome.ok, outcome.error
        store_outcome(outcome, tmp_path)
        seen.append(
            (outcome.cell.method, sorted(p.parent.name for p in tmp_path.rglob("seed0.json")))
        )
        assert Path(jobs[0].ensemble_folder).is_dir()  # kept for the job's later cells

    run_local(jobs, None, workers, 1, collect, str(tmp_path))
    assert seen == [("ens-mean", ["ens-mean"]), ("ens-min", ["ens-mean", "ens-min"])]
    assert not Path(jobs[0].ensemble_folder).exists()  # every cell done: released


@pytest.mark.minutes
def test_ray_streams_each_cell_of_a_shared_ensemble_job(tmp_path):
    # A job's cells run as one Ray task (one node keeps the ensemble); each outcome still comes
    # back when its cell ends, not when the job ends: the first reaches the driver while the
    # second cell is still running (an order of events, whatever the machine's load).
    pytest.importorskip("ray")
    from matchopt.bench.backends import run_ray
    from matchopt.bench.grid import store_outcome

    # The second cell searches for a while (search steps only: the ensemble is still shared),
    # so that it is still running when the first outcome arrives.
    jobs = _shared_ensemble_jobs(tmp_path, {"ens-min.search_steps": "4000"})
    arrivals = []

    def collect(outcome):
        arrivals.append((time.time(), outcome))
        assert outcome.ok, outcome.error
        store_outcome(outcome, tmp_path)

    run_ray(jobs, None, 1, 1, None, collect, str(tmp_path))
    assert [o.cell.method for _, o in arrivals] == ["ens-mean", "ens-min"]
    (first_arrived, first), (_, second) = arrivals
    assert first.ended <= first_arrived < second.ended
    assert not Path(jobs[0].ensemble_folder).exists()  # every cell done: released
    assert {p.parent.name for p in tmp_path.rglob("seed0.json")} == {"ens-mean", "ens-min"}


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_an_interrupted_pool_stops_its_running_cells(tmp_path):
    # The driver stops listening (Ctrl-C): a cell still running in a worker must stop too,
    # not run on to the end with nobody to write its record.
    from matchopt.bench.backends import run_local
    from matchopt.bench.cells import Job

    slow = Cell("potts", "matchopt", 0, "paper")  # about a minute here
    fast = Cell("potts", "random", 0, "quick")
    workers: set[int] = set()

    def collect(outcome):
        workers.update(
            p
            for p in _children(os.getpid())
            if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()
        )
        raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_local([Job((slow,)), Job((fast,))], None, 2, 1, collect, str(tmp_path))
    assert workers, "the pool's workers were not found"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.1)
    survivors = [p for p in workers if _alive(p)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not survivors, "a worker went on after the interrupt"
    assert time.monotonic() - start < 60  # returned without waiting for the slow cell
