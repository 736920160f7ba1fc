"""matchopt.poli_black_box: tasks as poli black boxes, methods as poli solvers."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("poli", reason="poli-core is a test dependency installed by .ci/run")

from poli.core.abstract_black_box import AbstractBlackBox  # noqa: E402

from matchopt.errors import MatchoptError  # noqa: E402
from matchopt.poli_black_box import MatchoptSolver, TaskBlackBox, make_problem  # noqa: E402
from matchopt.tasks import load_task  # noqa: E402


def test_tfbind8_black_box_scores_letters_as_the_oracle(data_dir):
    problem = make_problem("tfbind8", data_dir)
    black_box, x0 = problem.black_box, problem.x0
    assert isinstance(black_box, AbstractBlackBox) and problem.is_discrete()
    assert x0.shape == (32_898, 8) and set(np.unique(x0)) <= set("ACGT")
    assert black_box.info.get_max_sequence_length() == 8 and black_box.info.alphabet == list("ACGT")
    task = load_task("tfbind8", data_dir)
    np.testing.assert_allclose(black_box(x0[:64]), task.offline.y[:64].reshape(-1, 1), rtol=1e-6)
    # Whole strings work too, and a letter outside the alphabet is named.
    strings = np.array(["".join(row) for row in x0[:3]])
    np.testing.assert_array_equal(black_box(strings), black_box(x0[:3]))
    with pytest.raises(MatchoptError, match="'X' is not in the alphabet ACGT"):
        black_box(np.array([list("ACGTACGX")]))


@pytest.mark.parametrize("task_name", ["potts", "styblinski-tang"])
def test_any_method_solves_a_poli_problem_offline(task_name):
    problem = make_problem(task_name)
    black_box, x0 = problem.black_box, problem.x0
    y0 = black_box.task.offline.y
    solver = MatchoptSolver(black_box, x0, y0, method="ga", preset="quick", seed=0)
    x, y = solver.solve(n=16)
    assert x.shape == (16,) + x0.shape[1:] and y.shape == (16, 1)
    # The values are the task's oracle on the designs the method returned.
    np.testing.assert_allclose(y[:, 0], black_box.task.score(black_box.to_designs(x)))
    # Same seed, same designs (a fresh solver refits).
    again, _ = MatchoptSolver(black_box, x0, y0, method="ga", preset="quick", seed=0).solve(n=16)
    np.testing.assert_array_equal(again, x)


def test_a_budget_is_enforced_by_poli():
    black_box = TaskBlackBox("potts", evaluation_budget=4)
    x0 = black_box.to_poli(black_box.task.offline.x[:4])
    black_box(x0)
    with pytest.raises(Exception, match="budget"):
        black_box(x0[:1])
