"""The per-table choice: the protocol, the pick, the designs kept apart."""

import copy
import dataclasses

import numpy as np
import pytest
from interrupts import counted

from matchopt.data import DesignSpace, OfflineData, design_groups
from matchopt.errors import MatchoptError
from matchopt.methods import make_method
from matchopt.methods.auto import AutoChoice, AutoConfig, protocol_score, pseudo_offline_split
from matchopt.search import box_widths, near_copy_pairs
from matchopt.tasks import load_task


@pytest.fixture(scope="module")
def potts():
    return load_task("potts").offline


@pytest.fixture(scope="module")
def fitted(potts):
    return make_method("auto", "quick", seed=0).fit(potts)


def test_the_choice_is_the_best_protocol_score_and_is_reported(fitted, potts):
    report = fitted.fit_report()
    assert set(report["protocol"]) == {"matchopt-ens-mix", "cma-es", "ens-mean-small"}
    assert report["choice"] == max(report["protocol"], key=report["protocol"].get)
    assert report["left_out"] == {}
    # Scores are shares of the held-out top designs: from 0 to 1 for every member.
    assert all(0.0 <= value <= 1.0 for value in report["protocol"].values())
    assert "above the 0.8 quantile" in report["criterion"] and "0 to 1" in report["criterion"]
    # Potts' rows are distinct designs: the top fifth is held out.
    held = potts.y > np.quantile(potts.y, 0.8)
    assert (report["held_out_designs"], report["lower_designs"]) == (held.sum(), (~held).sum())
    # The chosen member's own surrogate predicts.
    rows = fitted.data_.x[:3]
    chosen = fitted.members_[fitted.choice_]
    np.testing.assert_array_equal(fitted.predict(rows), chosen.predict(rows))


def test_same_seed_same_choice_and_designs(potts, fitted):
    again = make_method("auto", "quick", seed=0).fit(potts)
    assert again.protocol_ == fitted.protocol_ and again.choice_ == fitted.choice_
    assert again.fit_report() == fitted.fit_report()
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
    x = rng.permutation(np.stack(np.unravel_index(np.arange(4**6), (4,) * 6), axis=1))[:400]
    y = np.where(rng.random(400) < 0.3, 1.0, 0.0)  # two levels: the 80th percentile is the best
    data = OfflineData(x, y, DesignSpace.discrete(6, 4))
    held = pseudo_offline_split(data.x, data.y, 0.8)
    np.testing.assert_array_equal(held, y == 1.0)
    lower = make_method("auto", "quick", seed=0)._lower_rows(data, held)
    assert lower is not None and lower.y.max() == 0.0 and len(lower) == (y == 0).sum()


def test_replicates_of_one_design_stay_on_one_side_of_the_split():
    rng = np.random.default_rng(1)
    designs = rng.permutation(np.stack(np.unravel_index(np.arange(3**5), (3,) * 5), axis=1))
    designs = designs[:60]
    merit = rng.normal(size=60)
    # Three noisy replicates of every design, shuffled: a per-row cut at the 0.8 quantile
    # would put some designs' rows on both sides.
    rows = rng.permutation(np.repeat(np.arange(60), 3))
    x, y = designs[rows], merit[rows] + rng.normal(scale=1.0, size=len(rows))
    groups = design_groups(x)
    per_row = y > np.quantile(y, 0.8)
    assert any(len(set(per_row[groups == g])) == 2 for g in range(60))  # the case is there
    held = pseudo_offline_split(x, y, 0.8)
    assert all(len(set(held[groups == g])) == 1 for g in range(60))
    # Held out: the designs whose mean score is above the 0.8 quantile of the designs' means.
    means = np.array([y[groups == g].mean() for g in range(60)])
    np.testing.assert_array_equal(held, (means > np.quantile(means, 0.8))[groups])
    assert held.sum() == 3 * 12


def test_a_design_far_beyond_the_data_counts_at_most_one():
    held_out = np.array([1.0, 2.0, 3.0, 4.0])
    # None reached, two reached (ties count), two reached, all reached (and far beyond).
    assert protocol_score(np.array([0.0, 2.0, 2.5, 1e12]), held_out) == pytest.approx(0.5)
    assert protocol_score(np.array([1e12, 4.0]), held_out) == 1.0
    assert protocol_score(np.array([-1e12]), held_out) == 0.0


def test_members_whose_designs_extrapolate_score_at_most_one_and_tie_in_pool_order(monkeypatch):
    """A judge that scores every design off the table a million (z-units) bounds no member's
    protocol score: each of their designs counts 1, they tie, and the first member wins."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(80, 3)).astype(np.float32)
    data = OfflineData(x, -((x - 0.3) ** 2).sum(axis=1), DesignSpace.continuous(3))

    def judge(self, designs):
        seen = {row.tobytes(): y for row, y in zip(self.data_.x, self.data_.y)}
        flat = np.asarray(designs, dtype=np.float32)
        return np.array([seen.get(row.tobytes(), 1e6) for row in flat])

    monkeypatch.setattr(AutoChoice, "judge", judge)
    config = dataclasses.replace(make_method("auto", "quick").config_, pool="ens-mean-small,cma-es")
    method = AutoChoice(config, seed=0).fit(data)
    assert method.protocol_ == {"ens-mean-small": 1.0, "cma-es": 1.0}
    assert method.choice_ == "ens-mean-small"


def test_a_saved_choice_loads_with_its_report_and_refuses_scores_beyond_one(fitted, tmp_path):
    path = fitted.save(tmp_path / "auto.pt")
    assert AutoChoice.load(path).fit_report() == fitted.fit_report()
    crafted = copy.copy(fitted)
    crafted.protocol_ = {**fitted.protocol_, "cma-es": 1112.051}
    with pytest.raises(MatchoptError, match="not a number from 0 to 1"):
        crafted.__matchopt_check__()


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


def test_a_killed_choice_resumes_its_pool_fits_to_the_same_designs(
    potts, fitted, monkeypatch, tmp_path
):
    import matchopt.methods.matchopt as matchopt_module
    from matchopt.checkpoints import remove_snapshot
    from matchopt.methods.base import resumed_seconds
    from matchopt.models.gaussian import GaussianEnsemble

    real_step, real_fit = matchopt_module.fused_loss_and_gradients, GaussianEnsemble.fit
    steps, ensembles = [], []

    def sitting(stop_step=None, stop_ensemble=None):  # counts this sitting's training
        steps.clear(), ensembles.clear()
        step = counted(real_step, steps, kill_at=stop_step)
        monkeypatch.setattr(matchopt_module, "fused_loss_and_gradients", step)
        monkeypatch.setattr(GaussianEnsemble, "fit", counted(real_fit, ensembles, stop_ensemble))

    sitting()
    make_method("auto", "quick", seed=0).fit(potts)
    whole_steps, whole_ensembles = len(steps), len(ensembles)
    snapshot = tmp_path / ".snapshots" / "potts" / "auto" / "seed0.pt"

    def resumed():
        return make_method("auto", "quick", seed=0).resume_from(snapshot, 0).fit(potts)

    # Killed in the last epoch of matchopt-ens-mix's full-data fit (the pool's first), after
    # every pseudo-offline fit.
    sitting(stop_step=whole_steps - 2)
    with pytest.raises(KeyboardInterrupt):
        resumed()
    names = {p.name for p in snapshot.parent.iterdir()}
    assert {"seed0.lower0.member1.pt", "seed0.full0.member1.pt", "seed0.shared"} <= names
    # Again, as the last Gaussian ensemble (ens-mean-small's, on all rows) starts: only the
    # lost epoch trained, and the pseudo-offline fits' ensembles were read, not trained.
    sitting(stop_ensemble=2)
    with pytest.raises(KeyboardInterrupt):
        resumed()
    assert 0 < len(steps) < whole_steps / 8 and whole_ensembles > 2
    sitting()
    again = resumed()
    assert steps == [] and len(ensembles) == 1
    assert again.protocol_ == fitted.protocol_ and again.choice_ == fitted.choice_
    np.testing.assert_array_equal(again.propose(32), fitted.propose(32))
    # The record counts the training of every sitting; a fit in one sitting has none earlier.
    assert resumed_seconds(again) > 0 == resumed_seconds(fitted)
    assert "earlier_seconds" not in fitted.fit_report()
    remove_snapshot(snapshot, root=tmp_path)
    assert not (tmp_path / ".snapshots").exists()
