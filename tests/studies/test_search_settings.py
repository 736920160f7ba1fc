"""matchopt study search-settings: one training per seed, every combination searched and scored."""

from __future__ import annotations

import pandas as pd
import pytest

from matchopt.errors import MatchoptError
from matchopt.studies import search_settings
from matchopt.studies.search_settings import (
    combinations,
    rule_table,
    run_search_settings_study,
    setting_name,
)

SMALL = {"n_models": "2", "epochs": "2", "n_starts": "16"}


def test_combinations_in_grid_order():
    grid = {"pessimism": [1.0, 0.0], "search_step": [0.1, 1.0]}
    names = [setting_name(s) for s in combinations(grid)]
    assert names == [
        "pessimism=1,search_step=0.1",
        "pessimism=1,search_step=1",
        "pessimism=0,search_step=0.1",
        "pessimism=0,search_step=1",
    ]


def test_study_writes_tables_and_resumes(tmp_path, monkeypatch):
    out = tmp_path / "study"
    grid = {"pessimism": ["1", "0"], "search_step": ["0.1", "2"]}
    rules = run_search_settings_study(
        "matchopt-ens", grid, ["potts", "styblinski-tang"], [0], out, "quick", SMALL
    )
    frame = pd.read_csv(out / "settings.csv")
    assert len(frame) == 8 and frame["offline_rows"].between(0, 1).all()
    assert set(frame["setting"]) == {
        "pessimism=1,search_step=0.1", "pessimism=1,search_step=2",
        "pessimism=0,search_step=0.1", "pessimism=0,search_step=2",
    }  # fmt: skip
    assert list(rules.columns[-4:]) == [
        "mean p100 rank", "mean rank", "p50 above offline", "seeds",
    ]  # fmt: skip
    assert (out / "search-settings.png").stat().st_size > 1000
    # A rerun reads the finished seeds instead of training again.
    monkeypatch.setattr(search_settings, "study_seed", lambda *a, **k: pytest.fail("refit"))
    again = run_search_settings_study(
        "matchopt-ens", grid, ["potts", "styblinski-tang"], [0], out, "quick", SMALL
    )
    pd.testing.assert_frame_equal(again, rules)
    with pytest.raises(MatchoptError, match="other settings"):
        run_search_settings_study("matchopt-ens", {"pessimism": ["2"]}, ["potts"], [0], out,
                                  "quick", SMALL)  # fmt: skip


@pytest.mark.parametrize(
    "grid, overrides, message",
    [
        ({"nope": ["1"]}, {}, "nope"),
        ({"search_step": ["-1"]}, {}, "search_step"),
        ({"search_step": []}, {}, "at least one value"),
        ({"search_step": ["0.1"]}, {"search_step": "0.2"}, "in the grid and in --set"),
    ],
)
def test_bad_grids_fail_before_training(tmp_path, grid, overrides, message):
    with pytest.raises(MatchoptError, match=message):
        run_search_settings_study("matchopt-ens", grid, ["potts"], [0], tmp_path, "quick",
                                  overrides)  # fmt: skip
    assert not list(tmp_path.iterdir())


def test_rules_put_combinations_that_fall_below_the_offline_best_last():
    rows = []
    # "far" ranks best on task a but falls below the offline best (0.5) on task b.
    for task, scores in (("a", {"near": 0.6, "far": 0.9}), ("b", {"near": 0.55, "far": 0.1})):
        for setting, value in scores.items():
            rows.append({"task": task, "seed": 0, "setting": setting, "offline_rows": 0.0,
                         "offline_best": 0.5, "oracle_p100": value,
                         "oracle_p50": value})  # fmt: skip
    table = rule_table(pd.DataFrame(rows), ["far", "near"])
    assert list(table.index) == ["near", "far"]
    assert list(table["p50 above offline"]) == [2, 1]
    assert list(table["mean rank"]) == [1.5, 1.5]  # a tie by rank alone


def test_rules_judge_the_values_the_tables_record():
    # 1e-9 above the offline best is a tie at the tables' precision, not a win.
    rows = [{"task": "a", "seed": 0, "setting": name, "offline_rows": 0.0, "offline_best": 0.5,
             "oracle_p100": 0.9, "oracle_p50": value}
            for name, value in (("first", 0.5 + 1e-9), ("second", 0.5))]  # fmt: skip
    table = rule_table(pd.DataFrame(rows), ["second", "first"])
    assert list(table["p50 above offline"]) == [0, 0]
    assert list(table.index) == ["second", "first"]  # a tie: grid order decides
