"""The training mixins (matchopt.methods.training): fit_seeds refuses mixed batches and fits
methods that do not batch seeds one by one."""

from __future__ import annotations

import numpy as np
import pytest

from matchopt.errors import MatchoptError
from matchopt.methods import make_method
from matchopt.methods.training import fit_seeds
from matchopt.tasks import load_task


def test_fit_seeds_refuses_mixed_batches_and_fits_other_methods_one_by_one():
    data = load_task("potts").offline
    with pytest.raises(MatchoptError, match="repeated seeds"):
        fit_seeds([make_method("ddom", "quick", {}, seed=1)] * 2, data)
    with pytest.raises(MatchoptError, match="one config"):
        fit_seeds(
            [make_method("ddom", "quick", {}, seed=0), make_method("ddom", "paper", {}, seed=1)],
            data,
        )
    with pytest.raises(MatchoptError, match="got a RandomDesigns beside a Ddom"):
        fit_seeds([make_method("ddom", "quick", {}, seed=0), make_method("random", "quick")], data)
    with pytest.raises(MatchoptError, match="at least one method"):
        fit_seeds([], data)
    fitted = fit_seeds([make_method("random", "quick", {}, seed=s) for s in (0, 1)], data)
    for method in fitted:
        np.testing.assert_array_equal(
            method.propose(8),
            make_method("random", "quick", {}, seed=method.seed).fit(data).propose(8),
        )
