"""The checkpoint-selection study (the only code that scores intermediate checkpoints)."""

import json

import numpy as np
import pandas as pd
import pytest

from matchopt.errors import MatchoptError
from matchopt.studies.checkpoint_selection import (
    RULES,
    rule_picks,
    rule_table,
    run_checkpoint_selection_study,
)
from matchopt.validation import METRICS

OVERRIDES = {"hidden": (16,), "epochs": 6, "search_steps": 5, "trajectory_length": 32}


def test_study_writes_its_tables_and_figures_and_resumes(tmp_path):
    out = tmp_path / "study"
    args = (["potts"], [0, 1], out)
    rules = run_checkpoint_selection_study(*args, every=2, splits=["random", "top"],
                                           overrides=OVERRIDES)  # fmt: skip
    assert {p.name for p in out.iterdir()} >= {
        "checkpoints.csv", "rules.csv", "picks.csv", "metric_correlation.csv",
        "potts-random.png", "potts-top.png", "potts",
    }  # fmt: skip
    assert set(rules.index) == {f"{s}:{r}" for s in ("random", "top") for r in RULES}
    checkpoints = pd.read_csv(out / "checkpoints.csv")
    assert sorted(checkpoints["epoch"].unique()) == [2, 4, 6]
    assert {"oracle_p100", "oracle_p50", *METRICS, "matching-loss"} <= set(checkpoints.columns)
    # A rerun trains nothing: every (task, split, seed) file is kept as it is.
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("potts/*/seed*.csv")}
    run_checkpoint_selection_study(*args, every=2, splits=["random", "top"], overrides=OVERRIDES)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    # Other settings are never mixed into the same folder.
    with pytest.raises(MatchoptError, match="made with other settings"):
        run_checkpoint_selection_study(*args, every=3, splits=["random"], overrides=OVERRIDES)
    settings = json.loads((out / "potts" / "random" / "seed0.settings.json").read_text())
    assert settings["every"] == 2 and settings["split"] == "random"


def test_rules_pick_as_the_selector_does():
    checkpoints = pd.DataFrame(
        {
            "task": "t", "seed": 0, "split": "random", "epoch": [10, 20, 30],
            "spearman": [0.1, 0.5, 0.5], "kendall": [0.1, 0.2, 0.3], "ndcg": [0.9, 0.8, 0.7],
            "top-precision": [0.0, 0.0, 0.0], "mse": [0.3, 0.1, 0.2],
            "matching-loss": [np.nan, 0.4, 0.2], "oracle_p100": [1.0, 2.0, 3.0],
            "oracle_p50": [0.5, 0.6, 0.7],
        }
    )  # fmt: skip
    picks = rule_picks(checkpoints).set_index("rule")["epoch"].to_dict()
    assert picks == {
        "random:last": 30,
        "random:spearman": 20,
        "random:kendall": 30,
        "random:ndcg": 10,
        "random:top-precision": 10,
        "random:mse": 20,
        "random:matching-loss": 30,
    }  # fmt: skip  (ties: the earlier epoch; NaN never wins)
    table = rule_table(rule_picks(checkpoints))
    assert table.index[0] in ("random:last", "random:kendall", "random:matching-loss")
