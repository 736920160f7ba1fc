"""The bench's grid (matchopt.bench.grid) with a fake method and a fake task (tests/fakes.py):
each cell recorded, reruns skip finished cells, a failing cell does not stop the grid."""

from __future__ import annotations

import json

import pytest
from fakes import FakeMethod, install_fakes

from matchopt.bench import Grid, run_grid
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
