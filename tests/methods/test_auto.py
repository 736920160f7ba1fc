"""The per-table choice: the protocol, the pick, the designs kept apart."""

import dataclasses

import numpy as np
import pytest

from matchopt.data import DesignSpace, OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods import make_method
from matchopt.methods.auto import AutoChoice, AutoConfig
from matchopt.search import box_widths, near_copy_pairs
from matchopt.tasks import load_task


@pytest.fixture(scope="module")
def potts():
    return load_task("potts").offline


@pytest.fixture(scope="module")
def fitted(potts):
    return make_method("auto", "quick", seed=0).fit(potts)


def test_the_choice_is_the_best_protocol_score_and_is_reported(fitted):
    report = fitted.fit_report()
    assert set(report["protocol"]) == {"matchopt-ens-mix", "cma-es", "ens-mean-small"}
    assert report["choice"] == max(report["protocol"], key=report["protocol"].get)
    assert report["left_out"] == {}
    # The chosen member's own surrogate predicts.
    rows = fitted.data_.x[:3]
    chosen = fitted.members_[fitted.choice_]
    np.testing.assert_array_equal(fitted.predict(rows), chosen.predict(rows))


def test_same_seed_same_choice_and_designs(potts, fitted):
    again = make_method("auto", "quick", seed=0).fit(potts)
    assert again.protocol_ == fitted.protocol_ and again.choice_ == fitted.choice_
    np.testing.assert_array_equal(again.propose(32), fitted.propose(32))


def test_designs_are_distinct_and_ranked_by_the_judge(fitted):
    designs = fitted.propose(64)
    assert len(np.unique(designs, axis=0)) == 64
    judged = fitted.judge(designs)
    assert np.all(np.diff(judged) <= 1e-12)


def test_continuous_designs_keep_their_distance():
    task = load_task("hartmann6")
    method = make_method("auto", "quick", seed=1).fit(task.offline)
    designs = method.propose(128)
    widths = box_widths(task.offline.x)
    assert near_copy_pairs(designs, widths, method.config_.min_distance) == 0


def test_the_judge_floors_token_designs_with_unseen_neighbour_pairs():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(600, 6))
    x = x[~((x[:, :-1] == 3) & (x[:, 1:] == 3)).any(axis=1)]  # no row holds "3 3"
    data = OfflineData(x, x.sum(axis=1) + rng.normal(size=len(x)), DesignSpace.discrete(6, 4))
    method = make_method("auto", "quick", seed=0).fit(data)
    designs = x[:2].copy()
    designs[0, 2:4] = 3
    floor = (data.y.min() - method.judge_mean_) / method.judge_std_
    judged = method.judge(designs)
    assert judged[0] == pytest.approx(floor) and judged[1] > floor


def test_cma_es_is_left_out_of_wide_designs(potts):
    config = dataclasses.replace(make_method("auto", "quick").config_, cma_max_features=10)
    method = AutoChoice(config, seed=0).fit(potts)
    assert set(method.left_out_) == {"cma-es"} and "48 features" in method.left_out_["cma-es"]
    assert set(method.protocol_) == {"matchopt-ens-mix", "ens-mean-small"}


def test_ties_at_the_quantile_judge_on_the_rows_below_the_best():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(400, 6))
    y = np.where(rng.random(400) < 0.3, 1.0, 0.0)  # two levels: the 80th percentile is the best
    data = OfflineData(x, y, DesignSpace.discrete(6, 4))
    method = make_method("auto", "quick", seed=0)
    lower = method._lower_rows(data)
    assert lower is not None and lower.y.max() == 0.0 and len(lower) == (y == 0).sum()


@pytest.mark.parametrize(
    "pool, message",
    [
        ("matchopt-ens-mix,auto", "'auto' is not a single method"),
        ("cma-es,cma-es", "twice"),
        ("cma-es,nope", "'nope' is not a single method"),
        (" , ", "names no method"),
    ],
)
def test_a_bad_pool_is_refused(pool, message):
    with pytest.raises(MatchoptError, match=message):
        AutoChoice(AutoConfig(pool=pool)).pool_names()


def test_optimize_prints_and_records_the_choice(tmp_path, capsys):
    import pandas as pd

    from matchopt import cli

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(200, 3))
    table = pd.DataFrame(x, columns=["a", "b", "c"]).assign(y=-((x - 0.3) ** 2).sum(axis=1))
    table.to_csv(tmp_path / "t.csv", index=False)
    out = tmp_path / "p.parquet"
    args = ["optimize", str(tmp_path / "t.csv"), "--target", "y", "--method", "auto"]
    code = cli.main([*args, "--preset", "quick", "--n", "8", "--out", str(out)])
    assert code == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("  chose "))
    written = pd.read_parquet(out)
    chose = written["proposed_by"].iloc[0]
    assert (
        line.startswith(f"  chose {chose}: protocol scores")
        and (written["proposed_by"] == chose).all()
    )
    meta = written.attrs["matchopt"]
    assert meta["method"] == "auto" and meta["choice"] == chose
    assert set(meta["protocol"]) == {"matchopt-ens-mix", "cma-es", "ens-mean-small"}
    for name, value in meta["protocol"].items():
        assert f"{name} {value:.3f}" in line


def test_members_that_predict_alike_judge_once(fitted, potts):
    twin = AutoChoice(fitted.config_, seed=0)
    same = fitted.members_["cma-es"]
    twin.members_ = {
        "cma-es": same,
        "ens-mean-small": same,
        "matchopt-ens-mix": fitted.members_["matchopt-ens-mix"],
    }
    twin._fit_judge(potts)
    assert twin.judges_ == ["cma-es", "matchopt-ens-mix"]
