"""A new method and a new task, written as docs/layout.md ("Adding a method", "Adding a task")
says, run through every way matchopt runs a method: ``matchopt run`` (the runner), a bench grid
(one seed after another, and seeds as a batch) and ``matchopt optimize`` (TableOptimizer).

The top of this file is what a person writes: a config dataclass and a method class in one
file, and a task class. The fixture registers them as their one registration line would (in
``methods/registry.py`` and ``tasks/__init__.py``), for the test's time only.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest
from table_helpers import run_cli

from matchopt.bench import Grid, run_grid
from matchopt.config_fields import number
from matchopt.data import DesignSpace, OfflineData
from matchopt.methods import METHODS, MethodEntry, make_method
from matchopt.methods.base import search_rng
from matchopt.methods.engine import TrainingRun
from matchopt.methods.training import SeedBatchable, fit_seeds
from matchopt.methods.wrappers import check_fitted, in_default_threads
from matchopt.runner import run
from matchopt.tabular import TableOptimizer
from matchopt.tasks import TASKS
from matchopt.tasks.base import Task

# --- The new method: one file ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrendConfig:
    """Trend-step hyperparameters (defaults = the paper preset)."""

    step: float = number(0.05, 0.0)
    """How far each design moves along the fitted linear trend (units of the features)."""


class TrendStep(SeedBatchable):
    """The best offline rows moved along a least-squares linear trend, plus a seeded jitter.

    Attributes:
        coef_: the trend's coefficients (d features, then the intercept).
        trained_seeds_: the seeds of the training that fitted it (one, or a batch's).
    """

    config_class = TrendConfig
    presets = {"paper": {}, "quick": {"step": 0.1}}

    @classmethod
    def _train(cls, methods: Sequence[TrendStep], data: OfflineData, run: TrainingRun) -> None:
        """One least-squares fit serves every seed of the batch (the same data)."""
        coef = np.linalg.lstsq(np.c_[data.x, np.ones(len(data))], data.y, rcond=None)[0]
        for method in methods:
            method.coef_, method.trained_seeds_, method.data_ = coef, run.seeds, data

    def predict(self, designs: np.ndarray) -> np.ndarray:
        """The trend's value (n,) at ``designs``."""
        check_fitted(self)
        designs = np.asarray(designs, dtype=np.float64)
        return np.c_[designs, np.ones(len(designs))] @ self.coef_

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs: the best rows (again from the best past the last) moved ``step``
        along the trend, jittered, within the offline box."""
        check_fitted(self)
        x = self.data_.x
        best = x[np.argsort(-self.data_.y)[np.arange(n) % len(x)]]
        slope = self.coef_[:-1]
        direction = slope / max(float(np.linalg.norm(slope)), 1e-12)
        moved = best + self.config_.step * direction
        moved = moved + search_rng(self).normal(0.0, 1e-3, best.shape)
        return np.clip(moved, x.min(0), x.max(0)).astype(self.data_.space.dtype)


# --- The new task ---------------------------------------------------------------------------


class PlaneTask(Task):
    """x1 + 2 x2 on [0, 1]^2: 60 draws, the lower half offline."""

    name = "toy-plane"
    summary = "toy 2-d plane (tests)"
    space = DesignSpace.continuous(2)
    offline_size = 30
    embedded = True

    def _load(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = np.random.default_rng(0).uniform(0, 1, (60, 2))
        y = self._score(x)
        keep = y <= np.median(y)
        return x[keep], y[keep], y

    def _score(self, designs: np.ndarray) -> np.ndarray:
        designs = np.asarray(designs, dtype=np.float64)
        return designs[:, 0] + 2 * designs[:, 1]


@pytest.fixture
def registered(monkeypatch):
    """The registration lines, for this test only."""
    monkeypatch.setitem(METHODS, "trend-step", MethodEntry(TrendStep, "trend step (tests)"))
    monkeypatch.setitem(TASKS, PlaneTask.name, PlaneTask)


# --- Through every path ---------------------------------------------------------------------


def test_a_new_method_follows_the_contract(registered):
    from test_methods_contract import MAX_INHERITED_NAMES, inherited_contract_names

    assert len(inherited_contract_names(TrendStep)) <= MAX_INHERITED_NAMES
    data = PlaneTask().offline
    method = make_method("trend-step", "quick", seed=1).fit(data)
    assert method.trained_seeds_ == 1  # a plain fit is a batch of one
    designs = method.propose(8)
    np.testing.assert_array_equal(
        designs, make_method("trend-step", "quick", seed=1).fit(data).propose(8)
    )
    assert (method.predict(designs) > np.max(data.y)).any()  # up the trend
    batch = fit_seeds([make_method("trend-step", "quick", seed=s) for s in (1, 2)], data)
    assert batch[0].trained_seeds_ == (1, 2)
    np.testing.assert_array_equal(batch[0].propose(8), designs)


def test_a_new_method_runs_through_the_runner(registered):
    record, designs = run("toy-plane", "trend-step", seed=0, preset="quick", n_designs=16)
    assert designs.shape == (16, 2) and record.method == "trend-step"
    assert record.p100 > record.offline_best


@pytest.mark.parametrize("batch_seeds", [False, True])
def test_a_new_method_runs_in_a_bench_grid(registered, tmp_path, batch_seeds):
    grid = Grid(tasks=["toy-plane"], methods=["trend-step"], seeds=[0, 1], preset="quick")
    summary = run_grid(grid, tmp_path, workers=1, progress=False, batch_seeds=batch_seeds)
    assert len(summary.finished) == 2 and not summary.failed
    for seed in (0, 1):
        path = tmp_path / "toy-plane" / "trend-step" / f"seed{seed}.json"
        record = json.loads(path.read_text())
        assert record["seed"] == seed and len(record["scores"]) == 128
        assert ("seed_batch" in record["extra"]) == batch_seeds


@pytest.mark.filterwarnings("ignore::matchopt.tabular.optimizer.ProposalWarning")  # a toy's search
def test_a_new_method_optimizes_a_table(registered, tmp_path, capsys):
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"a": rng.uniform(0, 1, 40), "c": rng.uniform(0, 1, 40)})
    frame["y"] = frame["a"] - frame["c"]
    frame.to_csv(tmp_path / "t.csv", index=False)
    proposals = TableOptimizer(target="y", method="trend-step", preset="quick").fit(frame)
    assert len(proposals.propose(5)) == 5
    out = tmp_path / "proposals.csv"
    code, stdout, _ = run_cli(
        capsys, "optimize", tmp_path / "t.csv", "--target", "y", "--method", "trend-step",
        "--preset", "quick", "--n", "5", "--out", out,
    )  # fmt: skip
    assert code == 0 and len(pd.read_csv(out)) == 5
