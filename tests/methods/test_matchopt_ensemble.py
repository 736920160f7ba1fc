"""MATCH-OPT ensemble: the ranking term, the member budget, the path search and its selection."""

import numpy as np
import pytest
import torch
from interrupts import counted

import matchopt.methods.matchopt as matchopt_module
from matchopt.errors import ConfigError
from matchopt.methods import make_method
from matchopt.methods.matchopt import (
    fused_loss_and_gradients,
    gradient_matching_loss,
    listnet_loss,
    quadrature_rule,
)
from matchopt.methods.matchopt_ensemble import (
    MatchOptEnsemble,
    MatchOptEnsembleConfig,
    select_per_path,
)
from matchopt.models.mlp import MLP
from matchopt.search import gradient_ascent, gradient_ascent_path
from matchopt.tasks import load_task

#: A small ensemble that trains in seconds and searches far enough to leave the offline rows.
SMALL = {
    "n_models": 3,
    "hidden": (32, 16),
    "epochs": 3,
    "trajectory_length": 32,
    "n_starts": 48,
    "search_steps": 30,
    "search_step": 2.0,
    "path_every": 5,
}


@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("rank_weight", [0.5, 2.0])
def test_fused_ranking_term_matches_autograd(alpha, rank_weight):
    generator = torch.Generator().manual_seed(0)
    model = MLP(12, (24, 8))
    x = torch.randn(16, 12, generator=generator)
    y = torch.sort(torch.randn(16, generator=generator)).values
    rule = quadrature_rule("trapezoid", 5)
    loss = gradient_matching_loss(model, x, y, rule, alpha, rank_weight)
    expected = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    fused = fused_loss_and_gradients(model, x, y, rule, alpha, rank_weight)
    assert float(fused) == pytest.approx(float(loss.detach()), rel=1e-5)
    for p, grad in zip(model.parameters(), expected):
        grad = torch.zeros_like(p) if grad is None else grad
        torch.testing.assert_close(p.grad, grad, rtol=1e-4, atol=1e-6)


def test_listnet_loss_is_lowest_for_the_right_order():
    y = torch.tensor([-1.0, 0.0, 2.0])
    assert listnet_loss(y * 3, y) < listnet_loss(-y * 3, y)


def test_without_ranking_the_loss_is_the_papers():
    model = MLP(6, (8,))
    x, y = torch.randn(10, 6), torch.sort(torch.randn(10)).values
    rule = quadrature_rule("trapezoid", 5)
    assert torch.equal(
        gradient_matching_loss(model, x, y, rule, 1.0),
        gradient_matching_loss(model, x, y, rule, 1.0, 0.0),
    )


def test_members_train_at_most_max_steps():
    config = MatchOptEnsembleConfig(epochs=200, max_steps=8000, trajectory_length=128)
    assert MatchOptEnsemble.member_epochs(config, 32_898) == 31  # TF-Bind-8: 257 an epoch
    assert MatchOptEnsemble.member_epochs(config, 2_500) == 200  # potts: 19 an epoch
    uncapped = MatchOptEnsembleConfig(max_steps=None)
    assert MatchOptEnsemble.member_epochs(uncapped, 32_898) == 200


def test_ascent_path_stays_in_its_box_and_trust_region():
    def score(x):
        return x.sum(-1)  # pushes every coordinate up without end

    x0 = torch.zeros(3, 4)
    path = gradient_ascent_path(score, x0, steps=50, lr=0.1, every=5, high=torch.full((4,), 2.0))
    assert path.max() == 2.0
    path = gradient_ascent_path(score, x0, steps=50, lr=0.1, every=5, radius=0.5)
    rms = (path - x0).pow(2).mean(-1).sqrt()
    assert rms.max() <= 0.5 + 1e-6 and rms[-1].min() >= 0.5 - 1e-6


def test_ascent_path_stays_in_the_euclidean_ball_whatever_the_dimension():
    def score(x):
        return x.sum(-1)

    for d in (4, 400):
        x0 = torch.zeros(3, d)
        path = gradient_ascent_path(score, x0, steps=50, lr=0.1, every=5, radius_l2=1.5)
        norm = (path - x0).norm(dim=-1)
        assert norm.max() <= 1.5 + 1e-5 and norm[-1].min() >= 1.5 - 1e-5
    # With both bounds, the smaller ball holds: RMS 0.5 at d = 4 is a Euclidean distance of 1.
    path = gradient_ascent_path(score, torch.zeros(2, 4), 50, 0.1, radius=0.5, radius_l2=3.0)
    assert (path.norm(dim=-1).max() - 1.0).abs() < 1e-5


@pytest.mark.parametrize("field", ["trust_radius", "trust_radius_l2", "bold_trust_radius"])
@pytest.mark.parametrize("value", ["0", "-0.5"])
def test_a_trust_radius_must_be_positive(field, value):
    with pytest.raises(ConfigError, match=f"{field}=.*must be > 0"):
        make_method("matchopt-ens", "paper", {field: value})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("bold_pessimism", "-1", r"must be in \[0, 10\]"), ("bold_designs", "-1", "integer >= 0")],
)
def test_the_portfolio_refuses_negative_values(field, value, message):
    with pytest.raises(ConfigError, match=f"{field}=.*{message}"):
        make_method("matchopt-ens", "paper", {field: value})


def test_ascent_path_ends_where_plain_adam_ascent_ends():
    def score(x):
        return -(x - 1.0).pow(2).sum(-1)

    x0 = torch.zeros(4, 3)
    path = gradient_ascent_path(score, x0, steps=23, lr=0.05, every=10)
    assert path.shape == (4, 4, 3)  # start, steps 10 and 20, the last (23)
    assert torch.equal(path[0], x0)
    assert torch.equal(path[-1], gradient_ascent(score, x0, 23, 0.05))


def test_selection_takes_one_new_design_per_path_best_first():
    candidates = np.array([[0, 0], [0, 1], [1, 1], [2, 2], [3, 3], [0, 1]])
    scores = np.array([9.0, 8.0, 7.0, 6.0, 5.0, 10.0])
    paths = np.array([0, 0, 0, 1, 1, 2])
    offline = np.array([[0, 0]])
    picked = select_per_path(candidates, scores, paths, offline, 3)
    # [0, 0] is offline; [0, 1] is taken on path 2 first, so path 0 falls to [1, 1].
    assert picked.tolist() == [5, 2, 3]


def test_selection_falls_back_to_more_per_path_then_to_offline_rows():
    candidates = np.array([[0], [1], [2]])
    scores = np.array([3.0, 2.0, 1.0])
    paths = np.array([0, 0, 0])
    offline = np.array([[0]])
    assert select_per_path(candidates, scores, paths, offline, 2).tolist() == [1, 2]
    assert select_per_path(candidates, scores, paths, offline, 3).tolist() == [1, 2, 0]
    assert select_per_path(candidates, scores, paths, offline, 4).tolist() == [1, 2, 0, 1]


@pytest.mark.parametrize("task_name", ["potts", "styblinski-tang"])
def test_designs_are_new_distinct_and_reproducible(task_name):
    data = load_task(task_name).offline
    method = make_method("matchopt-ens", "quick", SMALL, seed=1).fit(data)
    designs = method.propose(32)
    assert designs.shape == (32, *data.space.shape)
    rows = {row.tobytes() for row in np.ascontiguousarray(designs)}
    assert len(rows) == 32
    assert not rows & {row.tobytes() for row in np.ascontiguousarray(data.x.astype(designs.dtype))}
    again = make_method("matchopt-ens", "quick", SMALL, seed=1).fit(data).propose(32)
    np.testing.assert_array_equal(designs, again)
    assert len(method.models_) == 3 and method.fit_report()["member_epochs"] == 3


def test_members_differ_and_predict_is_their_mean():
    data = load_task("potts").offline
    method = make_method("matchopt-ens", "quick", SMALL, seed=0).fit(data)
    first, second = (m.hidden[0].weight for m in method.models_[:2])
    assert not torch.equal(first, second)
    x = torch.from_numpy(method.encoder_.encode_x(data.x[:5]))
    with torch.no_grad():
        mean = method.member_values(x).mean(0).numpy()
    np.testing.assert_allclose(method.predict(data.x[:5]), method.encoder_.decode_y(mean))


@pytest.mark.parametrize("task", ["potts", "styblinski-tang"])
def test_the_euclidean_bound_changes_nothing_where_it_never_binds(task):
    # Tokens are not bounded; at d = 10 the RMS ball of 0.5 (Euclidean 1.58) lies inside 4.
    data = load_task(task).offline
    plain = make_method("matchopt-ens", "quick", SMALL, seed=1).fit(data)
    bounded = make_method("matchopt-ens-l2", "quick", SMALL, seed=1).fit(data)
    assert bounded.config_.trust_radius_l2 == 4.0
    np.testing.assert_array_equal(bounded.propose(16), plain.propose(16))


@pytest.mark.parametrize("task", ["potts", "styblinski-tang"])
def test_a_portfolio_adds_the_bolder_searchs_best_new_designs(task):
    data = load_task(task).offline
    method = make_method("matchopt-ens", "quick", SMALL, seed=1).fit(data)
    cautious = method.propose(24)
    method.set_params(config__pessimism=0.0, config__trust_radius=None)
    bold = method.propose(24)
    method.set_params(config__pessimism=1.0, config__trust_radius=0.5, config__bold_designs=8)
    portfolio = method.propose(32)
    assert len(portfolio) == 32
    # The cautious search's own 24 designs first, then 8 of the bolder one's, all new.
    np.testing.assert_array_equal(portfolio[:24], cautious)
    rows = [row.tobytes() for row in np.ascontiguousarray(portfolio)]
    assert len(set(rows)) == 32
    offline = {row.tobytes() for row in np.ascontiguousarray(data.x.astype(portfolio.dtype))}
    assert not set(rows) & offline
    kept = [row for row in bold if row.tobytes() not in set(rows[:24])]
    np.testing.assert_array_equal(portfolio[24:], np.array(kept[:8]))


def test_the_euclidean_bound_holds_each_design_near_its_start_in_high_dimension():
    from matchopt.data import DesignSpace, OfflineData

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 200)).astype(np.float32)
    data = OfflineData(x, x[:, :5].sum(1), DesignSpace.continuous(200))
    bounded = make_method("matchopt-ens-l2", "quick", SMALL | {"n_starts": 16}, seed=0).fit(data)
    designs = bounded.propose(16)
    features = bounded.encoder_.encode_x(designs)
    offline = bounded.encoder_.encode_x(data.x)
    nearest = np.sqrt(((features[:, None] - offline[None]) ** 2).sum(-1)).min(1)
    assert nearest.max() <= 4.0 + 1e-4
    # The per-feature bound alone lets them go about 0.5 * sqrt(200) = 7.1 away.
    free = make_method("matchopt-ens", "quick", SMALL | {"n_starts": 16}, seed=0).fit(data)
    features = free.encoder_.encode_x(free.propose(16))
    assert np.sqrt(((features[:, None] - offline[None]) ** 2).sum(-1)).min(1).max() > 5.0


def test_the_ranking_variant_trains_other_members():
    data = load_task("potts").offline
    plain = make_method("matchopt-ens", "quick", SMALL, seed=0).fit(data)
    ranked = make_method("matchopt-ens-rank", "quick", SMALL, seed=0).fit(data)
    assert ranked.config_.rank_weight == 1.0
    assert plain.member_losses_ != ranked.member_losses_


def test_a_killed_ensemble_resumes_to_the_same_designs(tmp_path, monkeypatch):
    data = load_task("potts").offline
    reference = make_method("matchopt-ens", "quick", SMALL, seed=2).fit(data)
    steps_per_member = 3 * (len(data) // 32)
    real = matchopt_module.fused_loss_and_gradients
    # Inside the second member's first epoch.
    interrupted = counted(real, [], kill_at=steps_per_member + 5)
    snapshot = tmp_path / "ens.pt"
    monkeypatch.setattr(matchopt_module, "fused_loss_and_gradients", interrupted)
    with pytest.raises(KeyboardInterrupt):
        make_method("matchopt-ens", "quick", SMALL, seed=2).resume_from(snapshot, 0).fit(data)
    steps = []
    monkeypatch.setattr(matchopt_module, "fused_loss_and_gradients", counted(real, steps))
    resumed = make_method("matchopt-ens", "quick", SMALL, seed=2).resume_from(snapshot, 0).fit(data)
    # The first member was finished: only the second's lost epoch and the third member train.
    assert len(steps) == 2 * steps_per_member
    np.testing.assert_array_equal(resumed.propose(16), reference.propose(16))
    assert resumed.member_losses_ == reference.member_losses_


def test_trust_radius_bounds_how_far_continuous_designs_move():
    data = load_task("styblinski-tang").offline
    method = make_method("matchopt-ens", "quick", {**SMALL, "trust_radius": "none"}, seed=1)
    free = method.fit(data).propose(16)
    method.set_params(config__trust_radius=0.05)
    near = method.propose(16)
    z = method.encoder_.encode_x
    starts = z(data.x[data.top_k(SMALL["n_starts"])])

    def distance(designs):  # RMS change per feature, to the nearest start
        return np.sqrt(((z(designs)[:, None] - starts[None]) ** 2).mean(-1)).min(1)

    assert distance(near).max() <= 0.05 + 1e-5 < distance(free).max()


def test_candidates_are_reused_across_selections_and_forgotten_by_fit(tmp_path, monkeypatch):
    import matchopt.methods.matchopt_ensemble as ensemble_module

    data = load_task("potts").offline
    method = make_method("matchopt-ens", "quick", SMALL, seed=1).fit(data)
    first = method.propose(16)
    calls = []
    real = ensemble_module.gradient_ascent_path
    monkeypatch.setattr(
        ensemble_module, "gradient_ascent_path", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    method.set_params(config__support="none")
    method.propose(16)
    assert calls == []  # only the selection changed: no new search
    method.set_params(config__support="pairs")
    np.testing.assert_array_equal(method.propose(16), first)
    method.save(tmp_path / "m.pt")
    assert "_candidate_cache" not in vars(MatchOptEnsemble.load(tmp_path / "m.pt"))
    method.set_params(config__search_step=0.5)
    method.propose(16)
    assert calls == [1]  # another search setting: a new search
    method.fit(data)
    method.propose(16)
    assert calls == [1, 1]  # a refit forgets the old candidates


def test_pair_support_keeps_designs_to_neighbour_pairs_of_good_rows():
    from matchopt.data import DesignSpace, OfflineData

    rng = np.random.default_rng(0)
    # Token 3 never follows token 0 in rows above the minimum; rows holding (0, 3) score 0.
    x = rng.integers(0, 4, size=(400, 6))
    bad = ((x[:, :-1] == 0) & (x[:, 1:] == 3)).any(axis=1)
    y = np.where(bad, 0.0, 1.0 + x.sum(axis=1) + rng.normal(0, 0.1, 400))
    data = OfflineData(x, y, DesignSpace.discrete(6, 4))
    settings = {**SMALL, "search_step": 5.0, "n_starts": 64, "support": "none"}
    method = make_method("matchopt-ens", "quick", settings, seed=0).fit(data)
    designs = method.propose(16)
    method.set_params(config__support="pairs")
    kept = method.propose(16)
    has_pair = ((kept[:, :-1] == 0) & (kept[:, 1:] == 3)).any(axis=1)
    assert not has_pair.any()
    assert method._pairs_seen(designs).tolist() == [
        not ((d[:-1] == 0) & (d[1:] == 3)).any() for d in designs
    ]


def test_averaging_replicates_fits_one_row_per_design():
    from matchopt.tasks.replicates import PottsReplicates

    data = PottsReplicates().offline
    method = make_method("matchopt-ens", "quick", {"average_replicates": "true"}, seed=0)
    method.fit(data)
    designs, first = np.unique(data.x, axis=0, return_index=True)
    assert len(method.data_) == len(designs) < len(data)
    row = np.flatnonzero((data.x == method.data_.x[0]).all(axis=1))
    assert method.data_.y[0] == pytest.approx(data.y[row].mean())
    proposals = method.propose(16)
    assert len(np.unique(proposals, axis=0)) == 16


def test_token_designs_change_at_most_max_changes_positions_from_their_start():
    from matchopt.tasks import load_task

    data = load_task("potts").offline
    free = make_method("matchopt-ens", "quick", seed=0).fit(data)
    bounded = make_method("matchopt-ens", "quick", {"max_changes": "2"}, seed=0).fit(data)
    designs = bounded.propose(16)
    nearest = np.array([(data.x != row).sum(axis=1).min() for row in designs])
    assert nearest.max() <= 2 and len(np.unique(designs, axis=0)) == 16
    farthest = max((data.x != row).sum(axis=1).min() for row in free.propose(16))
    assert farthest > 2  # the bound is what keeps them close


def test_one_bar_for_the_fit_and_one_for_the_search(capsys):
    method = make_method("matchopt-ens-mix", "quick", {"n_models": 3}, seed=0, progress=True)
    method.fit(load_task("potts").offline)
    fit_bars = capsys.readouterr().err
    method.propose(16)
    search_bars = capsys.readouterr().err
    # The fit's bar names the member in training and counts every member's epochs.
    assert "member 3 of 3" in fit_bars and f"/{3 * method.member_epochs_}" in fit_bars
    # The search's bar counts both searches' steps (cautious, then bold).
    assert "MATCH-OPT ensemble search" in search_bars
    assert f"| 0/{2 * method.config_.search_steps} " in search_bars
