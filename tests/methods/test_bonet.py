import numpy as np
import pytest
import torch

from matchopt.data import DesignSpace, OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods import make_method
from matchopt.methods.bonet import (
    CausalBlock,
    TrajectoryTransformer,
    bin_quotas,
    decay_groups,
    normalized_regrets,
    regret_bins,
    returns_to_go,
    rollout,
    sample_trajectories,
    trajectory_loss,
    window_starts,
)
from matchopt.models.stacked import SeedDropout, clip_seed_grad_norms


def test_regrets_and_equal_width_bins():
    regrets = normalized_regrets(np.array([10.0, 8.0, 6.0, 4.0, 2.0]))
    np.testing.assert_allclose(regrets, [0.0, 0.25, 0.5, 0.75, 1.0])
    # upper edges 0.25, 0.5, 0.75, 1.0; a regret on an edge goes to the lower bin
    np.testing.assert_array_equal(regret_bins(regrets, 4), [0, 0, 1, 2, 3])
    with pytest.raises(MatchoptError, match="two distinct y"):
        normalized_regrets(np.ones(4))


def test_bin_quotas_follow_the_score_formula():
    # bins 0..3 (upper edges 0.25, 0.5, 0.75, 1) hold 1, 2, 3, 4 rows
    regrets = np.array([0.0, 0.3, 0.35, 0.55, 0.6, 0.65, 0.8, 0.85, 0.9, 1.0])
    bins = regret_bins(regrets, 4)
    np.testing.assert_array_equal(np.bincount(bins), [1, 2, 3, 4])
    quotas = bin_quotas(regrets, bins, 4, length=50, smoothing=0.1)
    k = 0.1 * 10
    tau = 1.0 - 0.91  # 90th percentile of the regrets (linear interpolation): 0.91
    counts = np.array([1.0, 2.0, 3.0, 4.0])
    mean_regret = np.array([0.0, 0.325, 0.6, 0.8875])
    score = counts / (counts + k) * np.exp(-mean_regret / tau)
    shares = 50 * score / score.sum()
    assert quotas.sum() == 50
    assert np.all((quotas == np.floor(shares)) | (quotas == np.ceil(shares)))
    assert quotas[0] > quotas[-1]  # the best bin gets more points than the worst


def test_bin_quotas_mean_versus_centre_and_empty_bins():
    # two bins, [0, 0.5] with 7 rows and [0.5, 1] with 3; tau = 1 - 0.64 (90th percentile)
    regrets = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 1.0])
    bins = regret_bins(regrets, 2)
    counts = np.array([7.0, 3.0])
    for bin_value, bar in [("mean", [1.95 / 7, 2.15 / 3]), ("center", [0.25, 0.75])]:
        quotas = bin_quotas(regrets, bins, 2, length=100, bin_value=bin_value)
        score = counts / (counts + 0.3) * np.exp(-np.array(bar) / 0.36)
        shares = 100 * score / score.sum()
        assert quotas.sum() == 100
        assert np.all((quotas == np.floor(shares)) | (quotas == np.ceil(shares))), bin_value
    sparse = np.array([0.0, 1.0, 1.0])  # the middle bins are empty
    quotas = bin_quotas(sparse, regret_bins(sparse, 4), 4, length=8)
    assert quotas[1] == quotas[2] == 0 and quotas.sum() == 8
    # here tau = 1 - 90th percentile = 0 (ties at the worst y): the best bin takes everything
    assert quotas[0] == 8


def test_trajectories_take_each_bin_quota_and_climb():
    rng = np.random.default_rng(0)
    regrets = rng.uniform(size=500)
    bins = regret_bins(regrets, 8)
    quotas = bin_quotas(regrets, bins, 8, length=32)
    rows = sample_trajectories(bins, quotas, regrets, 5, rng)
    assert rows.shape == (5, 32)
    for trajectory in rows:
        assert np.all(np.diff(regrets[trajectory]) <= 0)  # regret falls, y rises
        np.testing.assert_array_equal(np.bincount(bins[trajectory], minlength=8), quotas)


def test_returns_to_go_and_windows():
    np.testing.assert_allclose(
        returns_to_go(np.array([[0.5, 0.3, 0.2], [1.0, 0.0, 0.0]])),
        [[1.0, 0.5, 0.2], [1.0, 0.0, 0.0]],
    )
    windows = window_starts(2, 6, 4)
    np.testing.assert_array_equal(windows[:, 0], [0] * 6 + [1] * 6)
    np.testing.assert_array_equal(windows[:6, 1], [0, 1, 2, 2, 2, 2])


def test_transformer_is_causal_over_rtg_and_point_tokens():
    model = TrajectoryTransformer(
        3, 3, context=6, max_start=4, embed_dim=16, n_layers=2, n_heads=2, seeds=(0, 1)
    )
    rtgs, points = torch.rand(2, 2, 6), torch.randn(2, 2, 6, 3)  # seeds x windows x steps
    starts = torch.tensor([[0, 4], [1, 2]])
    base = model(rtgs, points, starts)
    assert base.shape == (2, 2, 6, 3)
    moved = points.clone()
    moved[:, :, 3] += 1.0  # x_3 may only affect the predictions of steps 4, 5
    out = model(rtgs, moved, starts)
    torch.testing.assert_close(out[:, :, :4], base[:, :, :4])
    assert not torch.allclose(out[:, :, 4], base[:, :, 4])
    raised = rtgs.clone()
    raised[:, :, 2] += 1.0  # RTG_2 affects the prediction of step 2 itself, not the earlier ones
    out = model(raised, points, starts)
    torch.testing.assert_close(out[:, :, :2], base[:, :, :2])
    assert not torch.allclose(out[:, :, 2], base[:, :, 2])
    # The seeds are apart: seed 1's inputs never reach seed 0's predictions.
    other = points.clone()
    other[1] += 1.0
    out = model(rtgs, other, starts)
    torch.testing.assert_close(out[0], base[0])
    assert not torch.allclose(out[1], base[1])


def test_each_seed_starts_from_its_own_seed():
    together = TrajectoryTransformer(3, 5, 4, 2, embed_dim=8, n_layers=1, n_heads=2, seeds=(7, 9))
    for k, seed in enumerate((7, 9)):
        alone = TrajectoryTransformer(3, 5, 4, 2, embed_dim=8, n_layers=1, n_heads=2, seeds=(seed,))
        for (name, mine), theirs in zip(alone.named_parameters(), together.parameters()):
            torch.testing.assert_close(mine[0], theirs[k], rtol=0, atol=0, msg=name)
        sliced = together.seed_slice(k)
        for mine, theirs in zip(alone.parameters(), sliced.parameters()):
            assert torch.equal(mine, theirs)
    assert not torch.equal(together.head.weight[0], together.head.weight[1])
    std = together.blocks[0].expand.weight.std().item()
    assert 0.015 < std < 0.025  # minGPT's N(0, 0.02)


def test_a_block_is_torchs_pre_norm_encoder_layer():
    """Without dropout, the written-out block computes ``nn.TransformerEncoderLayer`` (pre-norm,
    GELU, feed-forward 4 x width) under a causal mask, from the same weights."""
    torch.manual_seed(0)
    width, heads = 16, 4
    reference = torch.nn.TransformerEncoderLayer(
        width, heads, 4 * width, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    ).eval()
    with torch.no_grad():  # norms away from (1, 0), so that their weights count
        for norm in (reference.norm1, reference.norm2):
            norm.weight.normal_(1.0, 0.3), norm.bias.normal_(0.0, 0.3)
    block = CausalBlock(1, width, heads)
    attention = reference.self_attn
    with torch.no_grad():
        for mine, theirs in [
            (block.norm1, reference.norm1),
            (block.norm2, reference.norm2),
            (block.qkv, (attention.in_proj_weight, attention.in_proj_bias)),
            (block.projection, attention.out_proj),
            (block.expand, reference.linear1),
            (block.contract, reference.linear2),
        ]:
            weight, bias = theirs if isinstance(theirs, tuple) else (theirs.weight, theirs.bias)
            mine.weight[0] = weight.T if weight.dim() == 2 else weight
            mine.bias[0, 0] = bias
    h = torch.randn(3, 10, width)
    future = torch.ones(10, 10, dtype=torch.bool).triu(1)
    expected = reference(h, src_mask=torch.nn.Transformer.generate_square_subsequent_mask(10))
    got = block(h[None], future, lambda x: x)[0]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_seed_dropout_draws_each_seeds_masks_from_its_own_generator():
    x = torch.ones(2, 1000)
    drop = SeedDropout(0.25, [torch.Generator().manual_seed(s) for s in (3, 4)])
    out = drop(x)
    assert out.unique().tolist() == [0.0, pytest.approx(1.0 / 0.75)]
    assert 0.2 < (out == 0).float().mean() < 0.3
    alone = SeedDropout(0.25, [torch.Generator().manual_seed(4)])(x[1:])
    assert torch.equal(alone[0], out[1])  # seed 4's masks, batched or alone
    assert SeedDropout(0.0, [])(x) is x
    with pytest.raises(MatchoptError, match="1 dropout generators for 2 seeds"):
        SeedDropout(0.5, [torch.Generator()])(x)
    with pytest.raises(MatchoptError, match="dropout must be in"):
        SeedDropout(1.0, [])


def test_seed_gradient_clipping_is_each_seeds_clip_grad_norm():
    generator = torch.Generator().manual_seed(0)
    stacked = [torch.nn.Parameter(torch.zeros(3, 4, 5)), torch.nn.Parameter(torch.zeros(3, 7))]
    for p in stacked:
        p.grad = torch.randn(p.shape, generator=generator) * 0.5
    stacked[0].grad[2] *= 1e-3  # seed 2's norm is under the limit: left alone
    stacked[1].grad[2] *= 1e-3
    singles = [[torch.nn.Parameter(p[k].clone()) for p in stacked] for k in range(3)]
    for k, params in enumerate(singles):
        for p, s in zip(params, stacked):
            p.grad = s.grad[k].clone()
    norms = clip_seed_grad_norms(stacked, 1.0)
    for k, params in enumerate(singles):
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        assert norms[k].item() == pytest.approx(norm.item(), rel=1e-6)
        for p, s in zip(params, stacked):
            torch.testing.assert_close(s.grad[k], p.grad)
    assert norms[2] < 1.0 < norms[0]


def test_discrete_loss_sums_the_positions_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 4 * 5)  # B x T x (length 4 x vocab 5)
    tokens = torch.randint(0, 5, (2, 3, 4))
    expected = sum(
        torch.nn.functional.cross_entropy(
            logits.view(2, 3, 4, 5)[:, :, k].reshape(-1, 5), tokens[:, :, k].reshape(-1)
        )
        for k in range(4)
    )
    # Two seeds: the second one's loss is the first one's of other logits.
    both = trajectory_loss(torch.stack([logits, logits + 1.0]), None, torch.stack([tokens] * 2), 5)
    torch.testing.assert_close(both[0], expected)
    torch.testing.assert_close(both[1], expected)  # softmax is shift-invariant
    x = torch.randn(2, 2, 3, 4)
    torch.testing.assert_close(
        trajectory_loss(x + torch.tensor([1.0, 2.0])[:, None, None, None], x, None, 0),
        torch.tensor([1.0, 4.0]),
    )


def test_weight_decay_only_on_matrices():
    model = TrajectoryTransformer(3, 3, context=4, max_start=2, embed_dim=8, n_layers=1, n_heads=2)
    decay, no_decay = decay_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decayed == {f"{m}.weight" for m in LINEARS}
    kept = {names[id(p)] for p in no_decay["params"]}
    assert {"token_position", "step_position", "head.bias", "norm.weight"} <= kept
    assert len(decayed) + len(kept) == len(names)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0


#: The linear maps of a one-layer transformer.
LINEARS = [
    "rtg_embedding",
    "point_embedding",
    *(f"blocks.0.{m}" for m in ("qkv", "projection", "expand", "contract")),
    "head",
]


class RecordingModel(torch.nn.Module):
    """Predicts x_t = (step index of the window's last pair) and records its inputs."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, rtgs, points, starts):
        self.calls.append((rtgs.clone(), points.clone(), starts.clone()))
        last = starts + rtgs.shape[1] - 1
        return last[:, None, None].float().expand(len(rtgs), rtgs.shape[1], points.shape[-1])


def test_rollout_holds_the_target_rtg_and_slides_the_window():
    model = RecordingModel()
    prompt_regrets = np.array([[0.5, 0.25, 0.25, 0.0], [1.0, 0.5, 0.5, 0.5]])
    rtgs = torch.from_numpy(returns_to_go(prompt_regrets) + 0.1).float()  # target 0.1
    np.testing.assert_allclose(rtgs[0], [1.1, 0.6, 0.35, 0.1])
    points = torch.zeros(2, 4, 3)
    designs = rollout(model, points, rtgs, 3, 0.1, 3, lambda p: (p.numpy(), p))
    assert designs.shape == (2, 3, 3)
    np.testing.assert_array_equal(designs[0, :, 0], [4, 5, 6])  # trajectory steps 4, 5, 6
    for k, (seen_rtgs, seen_points, starts) in enumerate(model.calls):
        step = 4 + k  # the step being predicted
        assert seen_rtgs.shape == (2, 3) and seen_points.shape == (2, 3, 3)
        np.testing.assert_array_equal(starts, [step - 2, step - 2])
        torch.testing.assert_close(seen_rtgs[:, -1], torch.full((2,), 0.1))
        # the points before the placeholder are the prompt / the earlier predictions
        expected = [s if s >= 4 else 0 for s in range(step - 2, step)]
        np.testing.assert_array_equal(seen_points[0, :-1, 0], expected)
    # first call, second rollout: prompt RTGs 2.6, 1.6, 1.1, 0.6, then the target; last 3 kept
    torch.testing.assert_close(model.calls[0][0][1], torch.tensor([1.1, 0.6, 0.1]))


@pytest.mark.parametrize("discrete", [False, True])
def test_rollouts_return_any_number_of_designs(discrete):
    rng = np.random.default_rng(0)
    if discrete:
        space = DesignSpace.discrete(5, 3)
        x = rng.integers(0, 3, size=(300, 5))
    else:
        space = DesignSpace.continuous(4)
        x = rng.normal(size=(300, 4)).astype(np.float32)
    data = OfflineData(x, rng.normal(size=300), space)
    method = make_method("bonet", "quick", seed=3).fit(data)
    designs = method.propose(13)  # 2 rollouts of 8 new steps, cut to 13
    assert designs.shape == (13, *space.shape) and designs.dtype == space.dtype
    space.validate(designs)


def test_invalid_lengths_are_clear_errors():
    data = OfflineData(np.zeros((10, 2), np.float32), np.arange(10.0), DesignSpace.continuous(2))
    with pytest.raises(MatchoptError, match="prompt_length"):
        make_method("bonet", "quick", {"prompt_length": 16}).fit(data)
