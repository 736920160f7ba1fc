"""A fake task and a fake method (BoTorch's MockModel pattern), shared by the tests of the
runner and of the bench's grid: the engine in seconds, whatever the real methods cost.

The fake task is a 2-d quadratic with 40 offline rows; the fake method proposes the best offline
rows moved by a fixed step, and counts how often the engine fits it and calls the oracle.

Below them, what the bench's tests share: a grid's command-line arguments, the records of a
grid without their timings, and the live child processes of a process (Linux /proc).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from matchopt.config_fields import count
from matchopt.data import DesignSpace, OfflineData
from matchopt.methods import METHODS, RunContext
from matchopt.methods.base import Method, MethodEntry
from matchopt.methods.training import Resumable
from matchopt.methods.wrappers import check_fitted, fit_all_or_nothing, in_default_threads
from matchopt.tasks import TASKS
from matchopt.tasks.base import Task


class FakeTask(Task):
    """-(x1^2 + x2^2) on [-1, 1]^2: 80 draws, the lower half offline."""

    name = "fake-quadratic"
    summary = "fake 2-d quadratic (tests)"
    space = DesignSpace.continuous(2)
    offline_size = 40
    embedded = True
    oracle_calls = 0

    def _load(self):
        x = np.random.default_rng(0).uniform(-1, 1, (80, 2))
        y = self._function(x)
        keep = y <= np.median(y)
        return x[keep], y[keep], y

    @staticmethod
    def _function(x: np.ndarray) -> np.ndarray:
        return -(np.asarray(x, dtype=np.float64) ** 2).sum(axis=1)

    def _score(self, designs: np.ndarray) -> np.ndarray:
        type(self).oracle_calls += 1
        return self._function(designs)


@dataclasses.dataclass(frozen=True)
class FakeConfig:
    step: float = 0.1
    """How far toward the origin the best rows move."""
    repeats: int = count(1)
    """Unused work: a count field, to check configs pass through."""


class FakeMethod(Method):
    """The best offline rows (again from the best when ``n`` exceeds them), moved ``step``
    toward the origin, plus a seeded jitter."""

    config_class = FakeConfig
    presets = {"paper": {}, "quick": {"step": 0.2}}
    fits = 0
    contexts: list[RunContext] = []

    @fit_all_or_nothing
    def fit(self, data: OfflineData) -> FakeMethod:
        type(self).fits += 1
        type(self).contexts.append(self.run)
        self.data_ = data
        return self

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        check_fitted(self)
        order = np.argsort(-self.data_.y)
        best = self.data_.x[order[np.arange(n) % len(order)]]  # the best rows, round after round
        jitter = np.random.default_rng(self.seed).normal(0, 1e-3, best.shape)
        return (best * (1 - self.config_.step) + jitter).astype(np.float32)


class ResumableFake(FakeMethod, Resumable):
    """The fake method, keeping training snapshots (it writes none)."""


def install_fakes(monkeypatch) -> tuple[type[FakeTask], type[FakeMethod]]:
    """Register the fake task and method for one test (``monkeypatch`` undoes it), counters at
    zero and no context seen yet."""
    monkeypatch.setitem(TASKS, FakeTask.name, FakeTask)
    monkeypatch.setitem(METHODS, "fake", MethodEntry(FakeMethod, "fake method (tests)"))
    FakeTask.oracle_calls = FakeMethod.fits = 0
    monkeypatch.setattr(FakeMethod, "contexts", [])
    return FakeTask, FakeMethod


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
