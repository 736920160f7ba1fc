import numpy as np
import pytest
import torch

from matchopt.methods.matchopt import MatchOpt, MatchOptConfig
from matchopt.methods.untrained import Untrained, UntrainedConfig
from matchopt.tasks import load_task


@pytest.mark.parametrize("task_name", ["styblinski-tang", "potts"])
@pytest.mark.parametrize("init", ["topk", "gaussian"])
def test_untrained_is_matchopt_before_its_first_step(task_name, init):
    task = load_task(task_name)
    shared = {"hidden": (64, 32, 16), "search_steps": 20, "init": init}
    untrained = Untrained(UntrainedConfig(**shared), seed=3).fit(task.offline)
    matchopt = MatchOpt(MatchOptConfig(epochs=0, **shared), seed=3).fit(task.offline)
    for mine, theirs in zip(untrained.model_.parameters(), matchopt.model_.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
    designs = untrained.propose(128)
    np.testing.assert_array_equal(designs, matchopt.propose(128))
    if init == "topk" and not task.space.is_discrete:
        assert not np.array_equal(designs, task.offline.x[task.offline.top_k(128)])
