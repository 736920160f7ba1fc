"""One run (matchopt.runner) with a fake method and a fake task (tests/fakes.py): what the runner
fits, scores and records, and the context it hands to the method."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import FakeMethod, install_fakes

from matchopt.bench import Grid, run_grid
from matchopt.methods import RunContext
from matchopt.runner import run


@pytest.fixture
def fakes(monkeypatch):
    return install_fakes(monkeypatch)


def test_a_run_fits_once_scores_once_and_records_what_it_did(fakes):
    task, method = fakes
    record, designs = run("fake-quadratic", "fake", seed=3, preset="quick", n_designs=16)
    assert method.fits == 1 and task.oracle_calls == 1
    assert designs.shape == (16, 2)
    assert (record.task, record.method, record.seed, record.preset) == (
        "fake-quadratic", "fake", 3, "quick",
    )  # fmt: skip
    assert record.config == {"step": 0.2, "repeats": 1}
    # Moved toward the optimum: every design beats the row it came from.
    assert record.p100 > record.offline_best
    again, same = run("fake-quadratic", "fake", seed=3, preset="quick", n_designs=16)
    np.testing.assert_array_equal(same, designs)  # same seed, same designs
    assert again.p50 == record.p50


def test_a_run_hands_its_context_to_the_method_and_nothing_else(fakes, tmp_path, monkeypatch):
    task, method = fakes
    run("fake-quadratic", "fake", seed=0, preset="quick", n_designs=4)
    assert method.contexts[-1] == RunContext()  # a plain fit: no snapshots, no shared ensembles
    context = RunContext.of(tmp_path / "snap.pt", tmp_path / "ensembles", [0, 1])
    run("fake-quadratic", "fake", seed=0, preset="quick", n_designs=4, context=context)
    seen = method.contexts[-1]
    assert seen.ensemble_folder == tmp_path / "ensembles" and seen.seed_batch == (0, 1)
    assert seen.snapshot is None  # a method that keeps no snapshots is given no file
    monkeypatch.setattr(FakeMethod, "resumable", True)
    run("fake-quadratic", "fake", seed=0, preset="quick", n_designs=4, context=context)
    assert method.contexts[-1].snapshot.path == tmp_path / "snap.pt"
    # A grid gives each cell its own snapshot file, under the results folder.
    grid = Grid(tasks=["fake-quadratic"], methods=["fake"], seeds=[5], preset="quick")
    run_grid(grid, tmp_path / "grid", workers=1, progress=False)
    snapshot = method.contexts[-1].snapshot
    assert snapshot is not None and (tmp_path / "grid") in snapshot.path.parents
