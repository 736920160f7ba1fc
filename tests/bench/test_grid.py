"""The bench's grid (matchopt.bench.grid): cells and their overrides, names refused before any
work, each cell recorded, reruns skip finished cells (and refuse other configs), a failing cell
does not stop the grid, kill-and-resume, the folder's lock; some with a fake method and a fake
task (tests/fakes.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fakes import GRID_ARGS, FakeMethod, _records, install_fakes

from matchopt.bench import Grid, run_grid
from matchopt.bench.grid import Cell, finished_record, plan_jobs
from matchopt.errors import MatchoptError
from matchopt.methods import METHODS, MethodEntry
from matchopt.methods.random_designs import RandomDesigns
from matchopt.records import ADDED_FIELDS
from matchopt.report import write_report


@pytest.fixture
def fakes(monkeypatch):
    return install_fakes(monkeypatch)


def test_a_grid_records_each_cell_and_a_rerun_skips_them(fakes, tmp_path):
    task, method = fakes
    grid = Grid(tasks=["fake-quadratic"], methods=["fake"], seeds=[0, 1, 2], preset="quick")
    summary = run_grid(grid, tmp_path, workers=1, progress=False)
    assert len(summary.finished) == 3 and not summary.failed and method.fits == 3
    for seed in range(3):
        record = json.loads((tmp_path / "fake-quadratic" / "fake" / f"seed{seed}.json").read_text())
        assert record["seed"] == seed and record["method"] == "fake"
    again = run_grid(grid, tmp_path, workers=1, progress=False)
    assert len(again.skipped) == 3 and method.fits == 3  # nothing refitted
    report = write_report(tmp_path, runtime=False)
    assert "fake-quadratic" in report and "fake" in report


def test_a_failing_cell_is_recorded_and_the_grid_goes_on(fakes, tmp_path, monkeypatch):
    task, method = fakes

    def broken(self, n=128):
        raise RuntimeError("the fake search broke")

    grid = Grid(tasks=["fake-quadratic"], methods=["fake"], seeds=[0, 1], preset="quick")
    monkeypatch.setattr(FakeMethod, "propose", broken)
    summary = run_grid(grid, tmp_path, workers=1, progress=False)
    assert len(summary.failed) == 2 and "the fake search broke" in summary.failed[0].error
    assert task.oracle_calls == 0  # the oracle never sees a failed run
    assert all((tmp_path / "fake-quadratic" / "fake" / f"seed{s}.json").exists() is False
               for s in (0, 1))  # fmt: skip


def test_every_job_of_a_grid_is_one_run_batch(fakes, tmp_path, monkeypatch):
    from matchopt.bench import cells

    batches = []
    real = cells.run_batch

    def counted(task, runs, batch=None, *args, **kwargs):
        batches.append(([r.seed for r in runs], batch))
        return real(task, runs, batch, *args, **kwargs)

    monkeypatch.setattr(cells, "run_batch", counted)
    grid = Grid(tasks=["fake-quadratic"], methods=["fake"], seeds=[0, 1], preset="quick")
    summary = run_grid(grid, tmp_path, workers=1, progress=False)
    assert len(summary.finished) == 2 and batches == [([0], None), ([1], None)]
    record = summary.finished[0].record
    assert record.extra["cell_seconds"] == summary.finished[0].seconds


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


def test_a_finished_bench_leaves_no_lock_file_and_no_empty_snapshot_folders(tmp_path):
    from matchopt.bench.grid import LOCK_FILE

    grid = Grid(["potts"], ["matchopt", "random"], [0, 1], preset="quick")
    summary = run_grid(grid, tmp_path, workers=1, progress=False)
    assert len(summary.finished) == 4
    assert not (tmp_path / LOCK_FILE).exists()  # no file naming a dead pid
    assert not (tmp_path / ".snapshots").exists()  # matchopt's snapshots, removed when scored
    assert (tmp_path / "potts" / "matchopt" / "seed1.json").is_file()


@pytest.mark.numerics
def test_bench_batches_seeds_only_when_asked_and_records_say_so(tmp_path):
    grid = Grid(tasks=["styblinski-tang"], methods=["ddom", "random"], seeds=[0, 1], preset="quick")
    jobs = plan_jobs(grid.cells(), tmp_path, batch_seeds=True)
    assert [(j.seed_batch, [c.seed for c in j.cells]) for j in jobs] == [
        (True, [0, 1]),
        (False, [0]),
        (False, [1]),
    ]
    assert not any(j.seed_batch for j in plan_jobs(grid.cells(), tmp_path))
    summary = run_grid(grid, tmp_path / "batched", workers=1, progress=False, batch_seeds=True)
    assert not summary.failed
    alone = run_grid(grid, tmp_path / "alone", workers=1, progress=False)
    assert not alone.failed
    for seed in (0, 1):
        batched = json.loads(
            (tmp_path / f"batched/styblinski-tang/ddom/seed{seed}.json").read_text()
        )
        own = json.loads((tmp_path / f"alone/styblinski-tang/ddom/seed{seed}.json").read_text())
        assert batched["extra"]["seed_batch"]["seeds"] == [0, 1]
        assert "seed_batch" not in own["extra"]
        np.testing.assert_allclose(batched["scores"], own["scores"], rtol=1e-3, atol=1e-3)
    # The batch's snapshot is gone once its records are written.
    assert not list((tmp_path / "batched").glob(".snapshots/**/*.pt"))


@pytest.mark.numerics
def test_bench_trains_shared_ensembles_of_all_seeds_in_one_batch(tmp_path):
    """GA, Ens-Mean and Ens-Min fit one Gaussian ensemble per seed: with --batch-seeds the seeds'
    ensembles train in one batch, which every cell then reads."""
    grid = Grid(
        tasks=["styblinski-tang"],
        methods=["ga", "ens-mean", "ens-min"],
        seeds=[0, 1],
        preset="quick",
    )
    (job,) = plan_jobs(grid.cells(), tmp_path, batch_seeds=True)
    assert job.seed_batch and job.ensemble_folder is not None and job.seeds == [0, 1]
    assert [c.method for c in job.cells] == ["ens-mean"] * 2 + ["ens-min"] * 2 + ["ga"] * 2
    summary = run_grid(grid, tmp_path / "batched", workers=1, progress=False, batch_seeds=True)
    assert not summary.failed
    alone = run_grid(grid, tmp_path / "alone", workers=1, progress=False)
    assert not alone.failed
    for method in ("ga", "ens-mean", "ens-min"):
        for seed in (0, 1):
            path = f"styblinski-tang/{method}/seed{seed}.json"
            batched = json.loads((tmp_path / "batched" / path).read_text())
            own = json.loads((tmp_path / "alone" / path).read_text())
            assert batched["extra"]["seed_batch"]["seeds"] == [0, 1]
            shared = batched["extra"]["fit"]["shared_ensemble"]
            # Ens-Mean's batch trained the ensembles the others read.
            assert shared["from_cache"] == (method != "ens-mean")
            assert shared["seed_batch"] == [0, 1]
            np.testing.assert_allclose(batched["scores"], own["scores"], rtol=1e-4, atol=1e-4)
    # The shared ensembles and the batch's snapshot are gone once every record is written.
    assert not [p for p in (tmp_path / "batched").glob(".snapshots/**/*") if p.is_file()]
