"""What every task does (matchopt.tasks.base): the oracle refuses malformed designs and designs
far outside the task's space, and a run that made one writes no record."""

import numpy as np
import pytest

from matchopt.errors import MatchoptError
from matchopt.tasks import load_task


def test_oracle_rejects_malformed_designs():
    task = load_task("potts")
    with pytest.raises(MatchoptError, match="shape"):
        task.score(np.zeros((3, 5), dtype=np.int64))
    with pytest.raises(MatchoptError, match="outside"):
        task.score(np.full((1, 12), 7))


def test_a_design_outside_the_tasks_space_is_never_scored(monkeypatch):
    """However a design was made, the oracle is not asked about one thousands of spans away
    from the data (a crafted shared ensemble gave -220,117 on a [-5, 5] task: p100 -1.6e16)."""
    from matchopt.tasks.base import DOMAIN_SPANS

    task = load_task("styblinski-tang")
    low, high = task.domain()
    assert np.all(low < -5 * DOMAIN_SPANS) and np.all(high > 5 * DOMAIN_SPANS)
    designs = np.zeros((3, 10), np.float32)
    designs[:, 0] = [-9.6, 9.8, 1000.0]  # beyond the box, as searches go: scored
    assert np.isfinite(task.score(designs)).all()
    designs[2, 4] = -220_117.0
    called = []
    monkeypatch.setattr(type(task), "_score", lambda self, x: called.append(x) or x[:, 0])
    with pytest.raises(MatchoptError, match=r"design 2, coordinate 4 is -220117, outside the "):
        task.score(designs)
    assert not called


def test_a_run_whose_method_returns_designs_outside_the_space_writes_no_record(
    monkeypatch, tmp_path, capsys
):
    from matchopt import cli
    from matchopt.methods.random_designs import RandomDesigns

    real = RandomDesigns.propose
    monkeypatch.setattr(RandomDesigns, "propose", lambda self, n=128: real(self, n) * 1e6)
    args = ["run", "--task", "styblinski-tang", "--method", "random", "--preset", "quick"]
    assert cli.main([*args, "--out", str(tmp_path / "R")]) == 2
    assert "outside the space of task 'styblinski-tang'" in capsys.readouterr().err
    assert not list((tmp_path / "R").rglob("seed0.json"))
