"""A study's stored tables: read back when made with the same settings, no link followed."""

import pandas as pd
import pytest

from matchopt.errors import MatchoptError
from matchopt.safe_paths import LinkError
from matchopt.studies.stored import stored_or_computed


def table() -> pd.DataFrame:
    return pd.DataFrame({"seed": [0], "score": [0.5]})


def test_a_table_is_computed_once_and_read_back(tmp_path):
    path = tmp_path / "potts" / "seed0.csv"
    frame, computed = stored_or_computed(tmp_path, path, "s", table)
    assert computed and path.is_file()
    again, computed = stored_or_computed(tmp_path, path, "s", pytest.fail)
    assert not computed and again.equals(frame)
    with pytest.raises(MatchoptError, match="other settings"):
        stored_or_computed(tmp_path, path, "t", pytest.fail)


def test_a_task_folder_that_is_a_link_is_refused_and_nothing_written_outside(tmp_path):
    victim = tmp_path / "O"
    victim.mkdir()
    out = tmp_path / "study"
    out.mkdir()
    (out / "potts").symlink_to(victim)
    with pytest.raises(LinkError, match="potts is a link"):
        stored_or_computed(out, out / "potts" / "seed0.csv", "s", table)
    assert not any(victim.iterdir())
