"""matchopt study search-step: one training per seed, every step scale searched and scored."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from matchopt.errors import MatchoptError
from matchopt.methods import make_method
from matchopt.studies import search_step
from matchopt.studies.search_step import rule_table, run_search_step_study
from matchopt.tasks import load_task


def test_scale_multiplies_the_step_of_either_default():
    data = load_task("potts").offline
    for task_data, default in ((data, 0.01), (load_task("styblinski-tang").offline, 0.001)):
        scaled = make_method("matchopt", "quick", {"search_lr_scale": 3.0}, seed=1)
        explicit = make_method("matchopt", "quick", {"search_lr": 3.0 * default}, seed=1)
        np.testing.assert_array_equal(
            scaled.fit(task_data).propose(8), explicit.fit(task_data).propose(8)
        )
    with pytest.raises(MatchoptError, match="search_lr_scale"):
        make_method("matchopt", "quick", {"search_lr_scale": "0"})


def test_study_writes_tables_and_resumes(tmp_path, monkeypatch):
    out = tmp_path / "study"
    rules = run_search_step_study(
        ["potts", "styblinski-tang"], [0], out, scales=[1, 8], preset="validated-quick"
    )
    frame = pd.read_csv(out / "scales.csv")
    assert len(frame) == 4 and set(frame["scale"]) == {1.0, 8.0}
    assert frame["unchanged"].between(0, 1).all() and (frame["moved"] >= 0).all()
    # A larger step moves the designs further from their starts (oracle-free measure).
    for _, rows in frame.groupby("task"):
        assert rows.sort_values("scale")["moved"].is_monotonic_increasing
    assert rules["mean p50 rank"].is_monotonic_increasing
    assert (out / "search-step.png").stat().st_size > 1000
    # A rerun reads the finished seeds instead of training again.
    monkeypatch.setattr(search_step, "study_seed", lambda *a, **k: pytest.fail("refit"))
    again = run_search_step_study(
        ["potts", "styblinski-tang"], [0], out, scales=[1, 8], preset="validated-quick"
    )
    pd.testing.assert_frame_equal(again, rules)
    with pytest.raises(MatchoptError, match="other settings"):
        run_search_step_study(["potts"], [0], out, scales=[1, 2], preset="validated-quick")


def test_rule_table_ranks_by_mean_p50_then_p100_then_smaller_scale():
    rows = []
    for task, p50 in (("a", {1: 0.5, 2: 0.6, 4: 0.6}), ("b", {1: 0.7, 2: 0.6, 4: 0.6})):
        for scale, value in p50.items():
            rows.append(
                {"task": task, "seed": 0, "scale": scale, "unchanged": 0.0, "moved": 1.0,
                 "oracle_p100": 0.9, "oracle_p50": value}
            )  # fmt: skip
    table = rule_table(pd.DataFrame(rows))
    # Ranks: scale 1 -> (3, 1) = 2; scale 2 -> (1, 2) = 1.5; scale 4 -> (1, 2) = 1.5.
    assert list(table.index) == [2.0, 4.0, 1.0]
    assert list(table["mean p50 rank"]) == [1.5, 1.5, 2.0]
