"""What a table optimizer is asked to do, checked in one place (matchopt.tabular.settings)."""

import pandas as pd
import pytest
from table_helpers import (
    mixed_frame,
    numeric_frame,
)

from matchopt.errors import MatchoptError
from matchopt.tabular import (
    TableOptimizer,
    parse_bounds,
)


def test_other_option_errors():
    frame = numeric_frame()
    with pytest.raises(MatchoptError, match="--bounds a=1.0:0.0"):
        TableOptimizer(target="y", bounds={"a": (1, 0)}).fit(frame)
    with pytest.raises(MatchoptError, match="not a numeric feature"):
        TableOptimizer(target="y", bounds={"zz": (0, 1)}).fit(frame)
    with pytest.raises(MatchoptError, match="expected COLUMN=LOW:HIGH"):
        parse_bounds(["a=0-1"])
    assert parse_bounds(["a=0:1,b=-2:3.5"]) == {"a": (0.0, 1.0), "b": (-2.0, 3.5)}
    with pytest.raises(MatchoptError, match="cannot also be a feature"):
        TableOptimizer(target="y", features=["a", "y"]).fit(frame)
    with pytest.raises(MatchoptError, match="categories: --categorical; not a feature"):
        TableOptimizer(target="y", method="random").fit(mixed_frame())
    with pytest.raises(MatchoptError, match="unknown method"):
        TableOptimizer(target="y", method="nope").fit(frame)
    with pytest.raises(MatchoptError, match="only the letter"):
        TableOptimizer(target="y", sequence="s").fit(pd.DataFrame({"s": ["AA", "AA"], "y": [1, 2]}))
    with pytest.raises(MatchoptError, match="positive integer"):
        TableOptimizer(target="y", method="random").fit(frame).propose(0)


@pytest.mark.parametrize("oversample", [0, 101])
def test_oversample_out_of_range_is_refused_before_fitting(oversample):
    optimizer = TableOptimizer(target="y", method="random", preset="quick", oversample=oversample)
    with pytest.raises(MatchoptError, match=f"oversample must be from 1 to 100, got {oversample}"):
        optimizer.fit(numeric_frame())
