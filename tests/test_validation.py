"""Hold-out validation and checkpoint selection (matchopt.validation, MATCH-OPT's fit)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from matchopt.data import design_groups
from matchopt.errors import MatchoptError
from matchopt.methods import make_method
from matchopt.runtime import limit_threads
from matchopt.tasks import load_task
from matchopt.validation import (
    CheckpointSelector,
    evaluation_rows,
    holdout_rows,
    ranking_metrics,
)

REFERENCE = Path(__file__).parent / "data" / "matchopt_paper_designs.json"


@pytest.mark.parametrize("kind", ["random", "top"])
def test_split_is_deterministic_disjoint_and_complete(kind):
    y = np.random.default_rng(0).normal(size=1000)
    train, held = holdout_rows(y, 0.1, kind, seed=3)
    again_train, again_held = holdout_rows(y, 0.1, kind, seed=3)
    np.testing.assert_array_equal(train, again_train)
    np.testing.assert_array_equal(held, again_held)
    assert len(held) == 100 and not set(train) & set(held)
    np.testing.assert_array_equal(np.sort(np.concatenate([train, held])), np.arange(1000))
    if kind == "top":
        assert y[held].min() >= y[train].max()
        rows = evaluation_rows(y, train, held, kind, seed=3)
        assert set(held) <= set(rows) and len(rows) == 200  # the top rows and as many others
    else:
        # Stratified by rank: one held-out row in each block of 10 ranks.
        ranks = np.argsort(np.argsort(y))
        np.testing.assert_array_equal(np.sort(ranks[held] // 10), np.arange(100))
        assert not np.array_equal(held, holdout_rows(y, 0.1, kind, seed=4)[1])
        np.testing.assert_array_equal(evaluation_rows(y, train, held, kind, 3), held)


@pytest.mark.parametrize(
    "fraction, message", [(0.0, r"\(0, 0.5\]"), (0.7, r"\(0, 0.5\]"), (0.001, "at least 2")]
)
def test_bad_fractions_are_clear_errors(fraction, message):
    with pytest.raises(MatchoptError, match=message):
        holdout_rows(np.arange(100.0), fraction, "random", 0)


def test_ranking_metrics_on_known_orders():
    y = np.arange(20.0)
    perfect = ranking_metrics(y * 3 + 1, y)
    assert perfect["spearman"] == pytest.approx(1) and perfect["kendall"] == pytest.approx(1)
    assert perfect["ndcg"] == pytest.approx(1) and perfect["top-precision"] == 1
    reversed_ = ranking_metrics(-y, y)
    assert reversed_["spearman"] == pytest.approx(-1) and reversed_["top-precision"] == 0
    assert ranking_metrics(y, y)["mse"] == 0
    assert ranking_metrics(np.zeros(20), y)["spearman"] == 0  # a constant surrogate ranks nothing


def test_selector_keeps_the_best_epoch_and_never_nan():
    model = torch.nn.Linear(2, 1)
    selector = CheckpointSelector("mse")
    for epoch, value in [(1, 0.5), (2, 0.2), (3, float("nan")), (4, 0.2), (5, 0.9)]:
        with torch.no_grad():
            model.bias.fill_(epoch)
        selector.update(model, {"epoch": epoch, "mse": value})
    assert selector.restore(model) == 2 and model.bias.item() == 2  # ties keep the earlier
    with pytest.raises(MatchoptError, match="unknown selection"):
        CheckpointSelector("oracle")


def test_restoring_the_best_checkpoint_reproduces_that_epochs_predictions():
    task = load_task("styblinski-tang")
    overrides = {"validation_every": 1, "selection": "spearman", "epochs": 6}
    method = make_method("matchopt", "validated-quick", overrides, seed=2)
    method.fit(task.offline, keep_checkpoints=True)
    history = method.validator_.history
    assert [h["epoch"] for h in history] == list(range(1, 7))
    best = max(range(6), key=lambda i: (history[i]["spearman"], -i))
    assert method.selected_epoch_ == best + 1
    # The kept model predicts what the checkpoint of that epoch predicted on the held-out rows.
    features = method.validator_.features
    with torch.no_grad():
        kept = method.model_(features)
        method.model_.load_state_dict(method.checkpoints_[best])
        stored = method.model_(features)
    torch.testing.assert_close(kept, stored, rtol=0, atol=0)
    assert method.fit_report()["selected_epoch"] == best + 1
    assert len(method.fit_report()["validation"]["spearman"]) == 6


def test_refit_trains_on_all_rows_for_the_selected_epochs():
    task = load_task("potts")
    overrides = {"selection": "mse", "refit": True, "epochs": 3}
    method = make_method("matchopt", "validated-quick", overrides, seed=0).fit(task.offline)
    assert len(method.losses_) == method.selected_epoch_
    assert method.propose(8).shape == (8, 12)


def test_refit_with_the_last_epoch_trains_again_on_all_rows():
    """With selection "last" the hold-out only measures the curves; refit must still train
    on every row (it was silently skipped), giving another model than the hold-out one."""
    task = load_task("potts")
    overrides = {"selection": "last", "epochs": 3}
    held = make_method("matchopt", "validated-quick", overrides, seed=0).fit(task.offline)
    refit = make_method("matchopt", "validated-quick", {**overrides, "refit": True}, seed=0)
    refit.fit(task.offline)
    assert refit.selected_epoch_ == 3 and len(refit.losses_) == 3
    different = [
        not torch.equal(a, b)
        for a, b in zip(held.model_.parameters(), refit.model_.parameters(), strict=True)
    ]
    assert any(different)


@pytest.mark.parametrize("field", [{"selection": "spearman"}, {"refit": True}])
def test_selection_or_refit_without_held_out_rows_is_a_clear_error(field):
    task = load_task("potts")
    method = make_method("matchopt", "quick", field)
    with pytest.raises(MatchoptError, match="validation_fraction"):
        method.fit(task.offline)


@pytest.mark.numerics
@pytest.mark.parametrize("task_name", ["potts", "styblinski-tang"])
@pytest.mark.parametrize("method_name", ["matchopt", "matchopt-noreg"])
def test_paper_preset_designs_are_unchanged(task_name, method_name):
    """Designs of the paper path (short budget), stored with the code before validation existed.

    Tokens must be equal. Floats may differ by round-off where the processor's kernels sum in
    another order (see tests/roundoff.py); on the machine that stored them they were identical.
    """
    with limit_threads(1):  # the reference was made with one thread
        method = make_method(method_name, "paper", {"epochs": 3, "search_steps": 10}, seed=5)
        designs = method.fit(load_task(task_name).offline).propose(16)
    expected = np.array(json.loads(REFERENCE.read_text())[f"{task_name}/{method_name}"])
    if designs.dtype.kind == "i":
        np.testing.assert_array_equal(designs, expected)
    else:
        np.testing.assert_allclose(designs, expected, rtol=1e-4, atol=1e-5)


def test_holdout_rows_keep_the_rows_of_one_design_together():
    rng = np.random.default_rng(1)
    x = np.repeat(rng.integers(0, 4, (60, 5)), 3, axis=0)[rng.permutation(180)]
    groups = design_groups(x)
    y = rng.normal(size=180)
    for kind in ("random", "top"):
        train, held = holdout_rows(y, 0.2, kind, seed=0, groups=groups)
        assert not set(groups[train]) & set(groups[held])
        assert len(set(groups[held])) == round(0.2 * len(set(groups)))
    # One design per row: the split of the rows themselves, unchanged.
    y = rng.normal(size=50)
    for kind in ("random", "top"):
        plain = holdout_rows(y, 0.1, kind, seed=3)
        grouped = holdout_rows(y, 0.1, kind, seed=3, groups=np.arange(50))
        assert all(np.array_equal(a, b) for a, b in zip(plain, grouped))
