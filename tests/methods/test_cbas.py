import numpy as np
import torch

from matchopt.data import DesignSpace, OfflineData
from matchopt.methods import make_method
from matchopt.methods.cbas import DesignVAE, cbas_weights, probability_above
from matchopt.models import GaussianEnsemble


def _constant_member(member, mean, log_std):
    """Make an ensemble member predict the same (mean, log_std) everywhere."""
    last = member.body[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.tensor([mean, log_std]))


def test_probability_above_is_the_mixture_tail():
    ensemble = GaussianEnsemble(3, n_models=2, hidden=(4,))
    _constant_member(ensemble.members[0], 1.0, np.log(0.15))
    _constant_member(ensemble.members[1], -1.0, np.log(0.15))
    x = torch.randn(5, 3)
    with torch.no_grad():
        stds = [m(x)[1].exp()[0].item() for m in ensemble.members]
        p = probability_above(ensemble, x, gamma=0.5)
    normal = torch.distributions.Normal(0.0, 1.0)
    expected = 0.5 * (1 - normal.cdf(torch.tensor(-0.5 / stds[0])))
    expected += 0.5 * (1 - normal.cdf(torch.tensor(1.5 / stds[1])))
    torch.testing.assert_close(p, expected.expand(5), rtol=1e-5, atol=1e-6)
    # a mixture of two far-apart members: about half the mass lies above 0.5
    assert 0.49 < float(p[0]) < 0.51


def test_weights_are_clipped_ratio_times_tail_probability():
    log_p = torch.tensor([0.0, float(np.log(2.0)), 100.0])
    log_q = torch.tensor([0.0, 0.0, 0.0])
    p_above = torch.tensor([0.5, 0.25, 1.0])
    w = cbas_weights(log_p, log_q, p_above, max_log_weight=20.0)
    torch.testing.assert_close(w, torch.tensor([0.5, 0.5, float(np.exp(20.0))]))


def test_vae_likelihoods_match_torch_distributions():
    torch.manual_seed(0)
    z = torch.randn(6, 2)
    tokens_vae = DesignVAE(4, 3, latent_size=2, hidden=(8,))
    params = tokens_vae.decode(z)
    x = torch.randint(0, 3, (6, 4))
    expected = torch.distributions.Categorical(logits=params).log_prob(x).sum(-1)
    torch.testing.assert_close(tokens_vae.log_likelihood(params, x), expected)

    floats_vae = DesignVAE(4, None, latent_size=2, hidden=(8,))
    params = floats_vae.decode(z)
    mean, log_std = params.unbind(-1)
    assert torch.all(log_std.exp() > 0.05) and torch.all(log_std.exp() < 0.3)  # soft clamp
    x = torch.randn(6, 4)
    expected = torch.distributions.Normal(mean, log_std.exp()).log_prob(x).sum(-1)
    torch.testing.assert_close(floats_vae.log_likelihood(params, x), expected)


def test_token_sampling_follows_the_decoder_probabilities():
    vae = DesignVAE(1, 3, latent_size=2, hidden=(4,))
    log_probs = torch.log(torch.tensor([0.1, 0.2, 0.7])).expand(20000, 1, 3)
    draws = vae.sample_designs(log_probs, torch.Generator().manual_seed(0))
    freq = np.bincount(draws.numpy().ravel(), minlength=3) / 20000
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.7], atol=0.015)


def test_weighted_elbo_scales_with_the_weights():
    torch.manual_seed(0)
    vae = DesignVAE(3, None, latent_size=2, hidden=(8,))
    x = torch.randn(10, 3)
    one = vae.loss(x, torch.ones(10), 1.0, torch.Generator().manual_seed(1))
    three = vae.loss(x, torch.full((10,), 3.0), 1.0, torch.Generator().manual_seed(1))
    torch.testing.assert_close(three, 3 * one)
    zero = vae.loss(x, torch.zeros(10), 1.0, torch.Generator().manual_seed(1))
    assert zero.item() == 0.0


def test_adaptive_sampling_moves_toward_higher_predicted_y():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 2)).astype(np.float32)
    data = OfflineData(x, x[:, 0].astype(np.float64), DesignSpace.continuous(2))  # y = x_0
    overrides = {
        "ensemble_epochs": 20,
        "ensemble_lr": 3e-3,
        "latent_size": 2,
        "vae_hidden": (64,),
        "vae_lr": 3e-3,
        "prior_epochs": 40,
        "iterations": 5,
        "samples_per_iteration": 400,
        "online_epochs": 5,
    }
    method = make_method("cbas", "quick", overrides, seed=0).fit(data)
    assert len(method.gammas_) == 5
    assert method.gammas_[-1] > method.gammas_[0] + 0.5  # q's samples climb in predicted y
    designs = method.propose(128)
    assert designs.shape == (128, 2) and designs.dtype == np.float32
    assert designs[:, 0].mean() > 0.8  # the offline x_0 has mean 0 and std 1
