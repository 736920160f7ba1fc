"""The grid runner: cells, skipping finished cells, failures, kill-and-resume, Ray backend."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from matchopt.bench import Grid, run_grid
from matchopt.bench.grid import Cell, finished_record
from matchopt.errors import MatchoptError
from matchopt.methods import METHODS, MethodEntry
from matchopt.methods.random_designs import RandomDesigns
from matchopt.records import ADDED_FIELDS, RunRecord
from matchopt.report import write_report

GRID_ARGS = [
    "--tasks", "potts,styblinski-tang",
    "--methods", "random,untrained,matchopt",
    "--seeds", "0,1",
    "--preset", "quick",
]  # fmt: skip


def _records(out: Path) -> dict[str, dict]:
    """Everything in a record that does not depend on timing, by cell path."""
    found = {}
    for path in sorted(out.rglob("seed*.json")):
        if path.name.endswith(".error.json"):
            continue
        record = json.loads(path.read_text())
        for timing in ("fit_seconds", "search_seconds", "extra"):
            record.pop(timing)
        found[str(path.relative_to(out))] = record
    return found


def _bench(out: Path, *extra: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-m", "matchopt.cli", "bench", *GRID_ARGS, "--out", str(out), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_cells_expand_grid_and_scope_overrides():
    grid = Grid(
        tasks=["potts"],
        methods=["matchopt", "random"],
        seeds=[0, 1],
        overrides={"matchopt.epochs": "3", "matchopt.kappa": "2"},
    )
    cells = grid.cells()
    assert [c.name for c in cells] == [
        "potts/matchopt/seed0",
        "potts/matchopt/seed1",
        "potts/random/seed0",
        "potts/random/seed1",
    ]
    assert cells[0].overrides == (("epochs", "3"), ("kappa", "2"))
    assert cells[2].overrides == ()
    # An unscoped key applies to every method of the grid, or is refused: never skipped.
    both = Grid(["potts"], ["matchopt", "ga"], [0], overrides={"epochs": "3"}).cells()
    assert both[0].overrides == both[1].overrides == (("epochs", "3"),)
    with pytest.raises(
        MatchoptError, match=r"random have no config field 'epochs'.*matchopt\.epochs"
    ):
        Grid(["potts"], ["matchopt", "random"], [0], overrides={"epochs": "3"}).cells()


def test_task_scoped_overrides_apply_to_that_task_only_and_win():
    """The paper's per-task settings (e.g. 50 epochs on superconductor) in one grid."""
    overrides = {"epochs": "3", "potts:epochs": "5", "styblinski-tang:ga.epochs": "7"}
    grid = Grid(["potts", "styblinski-tang"], ["matchopt", "ga"], [0], overrides=overrides)
    by_name = {c.name: dict(c.overrides) for c in grid.cells()}
    assert by_name == {
        "potts/matchopt/seed0": {"epochs": "5"},
        "potts/ga/seed0": {"epochs": "5"},
        "styblinski-tang/matchopt/seed0": {"epochs": "3"},
        "styblinski-tang/ga/seed0": {"epochs": "7"},
    }


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"tfbind8:epochs": "1"}, "task 'tfbind8' is not in the grid"),
        ({"potts:coms.epochs": "1"}, "not in the grid"),
        ({"potts:epochs": "many"}, "is not an integer"),
        ({"nonsense": "1"}, "no method of the grid"),
        ({"coms.epochs": "1"}, "not in the grid"),
        ({"epochs": "many"}, "is not an integer"),
    ],
)
def test_bad_overrides_fail_before_any_work(tmp_path, overrides, message):
    grid = Grid(tasks=["potts"], methods=["matchopt"], seeds=[0], overrides=overrides)
    with pytest.raises(MatchoptError, match=message):
        run_grid(grid, tmp_path, workers=1, progress=False)
    assert not any(tmp_path.iterdir())


def test_unknown_names_and_backend(tmp_path):
    with pytest.raises(MatchoptError, match="unknown task"):
        run_grid(Grid(["nope"], ["random"], [0]), tmp_path, progress=False)
    with pytest.raises(MatchoptError, match="unknown method"):
        run_grid(Grid(["potts"], ["nope"], [0]), tmp_path, progress=False)
    with pytest.raises(MatchoptError, match="unknown backend"):
        run_grid(Grid(["potts"], ["random"], [0]), tmp_path, backend="slurm", progress=False)
    for grid, words in [
        (Grid(["potts", "potts"], ["random"], [0]), "task 'potts' twice"),
        (Grid(["potts"], ["random", "ga", "random"], [0]), "method 'random' twice"),
        (Grid(["potts"], ["random"], [0, 1, 0]), "seed 0 twice"),
    ]:
        with pytest.raises(MatchoptError, match=f"the grid lists {words}"):
            run_grid(grid, tmp_path, progress=False)
    with pytest.raises(MatchoptError, match="the grid's seed 4294967296: seeds are integers from"):
        run_grid(Grid(["potts"], ["random"], [0, 2**32]), tmp_path, progress=False)
    assert not list(tmp_path.rglob("*.json"))  # refused before any cell ran


def test_the_command_line_refuses_a_name_given_twice(tmp_path, capsys):
    from matchopt.cli import main

    argv = ["bench", "--tasks", "potts, styblinski-tang,potts", "--methods", "random"]
    assert main([*argv, "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert "--tasks lists 'potts' twice" in capsys.readouterr().err


def test_rerun_skips_finished_cells_and_rejects_other_configs(tmp_path):
    grid = Grid(tasks=["potts"], methods=["random"], seeds=[0, 1], preset="quick")
    first = run_grid(grid, tmp_path, workers=1, progress=False)
    assert len(first.finished) == 2 and not first.failed
    path = Cell("potts", "random", 0, "quick").record_path(tmp_path)
    stamp = path.stat().st_mtime_ns
    second = run_grid(grid, tmp_path, workers=1, progress=False)
    assert len(second.skipped) == 2 and not second.finished
    assert path.stat().st_mtime_ns == stamp
    assert re.search(r"\| potts +\| random +\| quick +\| 0,1 +\|", second.text())

    other = Grid(tasks=["potts"], methods=["random"], seeds=[0], preset="paper")
    with pytest.raises(MatchoptError, match="another preset or config"):
        run_grid(other, tmp_path, workers=1, progress=False)


def test_records_older_than_a_config_field_match_its_old_value(tmp_path):
    """A record written before a field existed ran with the value ADDED_FIELDS gives it: a rerun
    of the grid skips it, and the report pools it with new records (MATCH-OPT's paper records
    predate its validation fields)."""
    grid = Grid(tasks=["potts"], methods=["matchopt"], seeds=[0], preset="quick")
    run_grid(grid, tmp_path, workers=1, progress=False)
    path = Cell("potts", "matchopt", 0, "quick").record_path(tmp_path)
    record = json.loads(path.read_text())
    added = [k for k in ADDED_FIELDS if k in record["config"]]
    assert {"validation_fraction", "selection", "search_lr_scale"} <= set(added)
    for name in added:
        del record["config"][name]
    path.write_text(json.dumps(record))
    assert len(run_grid(grid, tmp_path, workers=1, progress=False).skipped) == 1
    record["config"]["validation_fraction"] = 0.1  # a real difference is still one
    path.write_text(json.dumps(record))
    with pytest.raises(MatchoptError, match="another preset or config"):
        run_grid(grid, tmp_path, workers=1, progress=False)


def test_unreadable_record_is_named(tmp_path):
    cell = Cell("potts", "random", 0, "quick")
    cell.record_path(tmp_path).parent.mkdir(parents=True)
    cell.record_path(tmp_path).write_text("{not json")
    with pytest.raises(MatchoptError, match="seed0.json: not a readable run record"):
        finished_record(cell, tmp_path)


class _Exploding(RandomDesigns):
    def fit(self, data):
        raise RuntimeError("boom in fit")


def test_failing_cell_records_error_and_others_go_on(tmp_path, monkeypatch):
    monkeypatch.setitem(METHODS, "exploding", MethodEntry(_Exploding, "fails on purpose"))
    grid = Grid(tasks=["potts"], methods=["exploding", "random"], seeds=[0], preset="quick")
    summary = run_grid(grid, tmp_path, workers=1, progress=False)
    assert [o.cell.name for o in summary.failed] == ["potts/exploding/seed0"]
    assert [o.cell.name for o in summary.finished] == ["potts/random/seed0"]
    error = json.loads((tmp_path / "potts/exploding/seed0.error.json").read_text())
    assert error["error"] == "RuntimeError: boom in fit"
    assert "Traceback" in error["traceback"] and "boom in fit" in error["traceback"]
    assert not (tmp_path / "potts/exploding/seed0.json").exists()
    assert "FAILED potts/exploding/seed0: RuntimeError: boom in fit" in summary.text()

    # Once the method works, a rerun retries the failed cell and removes its error file.
    monkeypatch.setitem(METHODS, "exploding", MethodEntry(RandomDesigns, "fixed"))
    again = run_grid(grid, tmp_path, workers=1, progress=False)
    assert [o.cell.name for o in again.finished] == ["potts/exploding/seed0"]
    assert not (tmp_path / "potts/exploding/seed0.error.json").exists()


def test_killed_grid_resumes_without_redoing_finished_cells(tmp_path):
    reference = tmp_path / "uninterrupted"
    done = _bench(reference, "--workers", "2")
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, err
    expected = _records(reference)
    assert len(expected) == 12

    killed = tmp_path / "killed"
    proc = _bench(killed, "--workers", "2", start_new_session=True)
    deadline = time.monotonic() + 300
    while len(_records(killed)) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker processes
    proc.communicate()
    survivors = {p: p.stat().st_mtime_ns for p in killed.rglob("seed*.json")}
    assert 3 <= len(survivors) < 12, "kill the grid midway"

    resumed = _bench(killed, "--workers", "2")
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    assert f"skipped (already done) {len(survivors)}" in out
    for path, stamp in survivors.items():
        assert path.stat().st_mtime_ns == stamp, f"{path} was redone"
    assert _records(killed) == expected
    assert not list(killed.rglob("*.tmp"))
    # Wall times differ between runs; every score table, rank and MNR must not.
    for fmt in ("md", "csv"):
        assert write_report(killed, fmt=fmt, runtime=False) == write_report(
            reference, fmt=fmt, runtime=False
        )


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


def test_a_second_bench_on_the_same_folder_stops_at_once(tmp_path):
    from matchopt.bench.grid import LOCK_FILE
    from matchopt.io import file_lock

    grid = Grid(tasks=["potts"], methods=["random"], seeds=[0], preset="quick")
    with file_lock(tmp_path / LOCK_FILE, wait=False):  # as a running bench holds it
        with pytest.raises(MatchoptError, match=rf"another bench \(pid {os.getpid()}\)"):
            run_grid(grid, tmp_path, workers=1, progress=False)
    assert not list(tmp_path.rglob("seed*.json"))
    # Released (as when its holder is killed): the next bench runs.
    assert len(run_grid(grid, tmp_path, workers=1, progress=False).finished) == 1


def _children(pid: int) -> set[int]:
    """Pids of the live child processes of ``pid`` (Linux /proc)."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        if f"\nPPid:\t{pid}\n" in text and "\nState:\tZ" not in text:
            found.add(int(status.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state


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


def test_one_worker_shows_the_running_cells_own_progress(tmp_path, capsys):
    # An hours-long cell must not sit behind a grid bar that moves once per cell.
    grid = Grid(["potts"], ["matchopt"], [0], preset="quick", overrides={"epochs": "3"})
    assert not run_grid(grid, tmp_path / "shown", workers=1, progress=True).failed
    assert "MATCH-OPT training" in capsys.readouterr().err
    assert not run_grid(grid, tmp_path / "quiet", workers=1, progress=False).failed
    assert capsys.readouterr().err == ""


def test_a_finished_bench_leaves_no_lock_file_and_no_empty_snapshot_folders(tmp_path):
    from matchopt.bench.grid import LOCK_FILE

    grid = Grid(["potts"], ["matchopt", "random"], [0, 1], preset="quick")
    summary = run_grid(grid, tmp_path, workers=1, progress=False)
    assert len(summary.finished) == 4
    assert not (tmp_path / LOCK_FILE).exists()  # no file naming a dead pid
    assert not (tmp_path / ".snapshots").exists()  # matchopt's snapshots, removed when scored
    assert (tmp_path / "potts" / "matchopt" / "seed1.json").is_file()


def test_the_lock_is_exclusive_and_its_file_goes_with_the_holder(tmp_path):
    from matchopt.io import FileLocked, file_lock

    path = tmp_path / "sub" / "x.lock"
    with file_lock(path, wait=False):
        assert path.read_text() == f"pid {os.getpid()}\n"
        with pytest.raises(FileLocked, match=f"pid {os.getpid()}"):
            with file_lock(path, wait=False):
                pass
    assert not path.exists()
    with file_lock(path, wait=False):  # taken again at once
        assert path.exists()
    assert not path.exists()


def test_a_waiter_on_a_removed_lock_file_locks_the_new_one(tmp_path):
    """The holder removes the file on release; a waiter that opened the old file must not hold a
    lock on it while a third process locks a new file at the same path."""
    import threading

    from matchopt.io import file_lock

    path = tmp_path / "x.lock"
    inside, events = threading.Lock(), []

    def hold(name: str, seconds: float) -> None:
        with file_lock(path):
            if not inside.acquire(blocking=False):
                events.append(f"{name} overlapped")
                return
            events.append(name)
            time.sleep(seconds)
            inside.release()

    threads = [threading.Thread(target=hold, args=(f"t{i}", 0.05)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(events) == [f"t{i}" for i in range(6)]
    assert not path.exists()


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
