"""One run (matchopt.runner) with a fake method and a fake task (tests/fakes.py): what the runner
fits, scores and records, and the context it hands to the method."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import FakeMethod, ResumableFake, install_fakes

from matchopt.bench import Grid, run_grid
from matchopt.errors import MatchoptError
from matchopt.methods import METHODS, RunContext
from matchopt.methods.base import MethodEntry
from matchopt.runner import RunSpec, SeedBatchPlan, run, run_batch


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
    monkeypatch.setitem(METHODS, "fake", MethodEntry(ResumableFake, "resumable fake (tests)"))
    run("fake-quadratic", "fake", seed=0, preset="quick", n_designs=4, context=context)
    assert method.contexts[-1].snapshot.path == tmp_path / "snap.pt"
    # A grid gives each cell its own snapshot file, under the results folder.
    grid = Grid(tasks=["fake-quadratic"], methods=["fake"], seeds=[5], preset="quick")
    run_grid(grid, tmp_path / "grid", workers=1, progress=False)
    snapshot = method.contexts[-1].snapshot
    assert snapshot is not None and (tmp_path / "grid") in snapshot.path.parents


def test_a_batch_of_runs_makes_each_record_whole_and_goes_on_after_a_failure(fakes, monkeypatch):
    # Every job of a grid is one run_batch: the first run's method trains the batch's seeds,
    # the other runs fit on their own; each record is complete when the runner makes it.
    task, method = fakes
    runs = [RunSpec("fake", 0, "quick"), RunSpec("fake", 1, "quick"), RunSpec("fake", 2, "paper")]
    results = list(run_batch("fake-quadratic", runs, SeedBatchPlan((0, 1)), n_designs=4))
    assert method.fits == 3 and task.oracle_calls == 3
    for (record, _), spec in zip(results, runs):
        assert (record.seed, record.preset) == (spec.seed, spec.preset)
        assert record.extra["seed_batch"]["seeds"] == [0, 1]
        assert record.extra["cell_seconds"] >= record.fit_seconds
    assert results[0][0].fit_seconds == results[1][0].fit_seconds  # each a share of the batch
    _, alone = run("fake-quadratic", "fake", seed=1, preset="quick", n_designs=4)
    np.testing.assert_array_equal(results[1][1], alone)

    real = FakeMethod.propose

    def broken_for_seed_1(self, n=128):
        if self.seed == 1:
            raise RuntimeError("seed 1 broke")
        return real(self, n)

    monkeypatch.setattr(FakeMethod, "propose", broken_for_seed_1)
    first, second, third = run_batch("fake-quadratic", runs, n_designs=4)
    assert isinstance(second, RuntimeError) and "seed_batch" not in first[0].extra
    assert third[0].seed == 2


def test_run_needs_at_least_one_design():
    from matchopt.runner import run

    for bad in (0, -1, 2.0, True):
        with pytest.raises(MatchoptError, match="n_designs must be an integer >= 1"):
            run("potts", "random", n_designs=bad)
