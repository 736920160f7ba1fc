"""CbAS: conditioning by adaptive sampling.

Brookes, Park, Listgarten. "Conditioning by adaptive sampling for robust design", ICML 2019;
the configuration is design-baselines' (Trabucco et al., 2022), as specified in baselines.md.

Read top to bottom:

1. **Forward model**: an ensemble of 5 bootstrapped Gaussian MLPs (one hidden layer of 256)
   predicts p(y | x) = an equal-weight mixture of the members' Gaussians.
2. **Prior p**: a VAE fitted to the offline designs (latent 32, one hidden layer of 256 in the
   encoder and in the decoder; categorical decoder for tokens, Gaussian decoder for floats),
   200 epochs. The search distribution q starts as a copy of p.
3. **Adaptive sampling**, 20 rounds: draw 1,000 designs from q; score them with the ensemble
   mean; gamma = their 80th percentile; weight each design by
   ``w = p(x | z) / q(x | z) * P(y > gamma | x)`` (the latent z is the one the design was decoded
   from; P under the ensemble mixture); train q for 10 epochs on the weighted designs (weighted
   ELBO).
4. **Output**: 128 designs sampled from q.

Design representation: the ensemble reads normalized features (:class:`DesignEncoder`: logits
for tokens, z-scored); the VAE models the z-scored features of continuous designs and the raw
tokens of discrete ones (its encoder reads them one-hot).

Deviations from baselines.md / design-baselines (listed in docs/baselines.md):

* tokens: the ensemble reads the z-scored logits, not a learned token embedding. A linear layer
  on logits is the same function class as embedding + flatten + linear (logits are an affine,
  invertible map of the one-hot vector), so only the parameterization differs; likewise the VAE
  encoder reads one-hot tokens through a linear layer instead of an embedding of width 256.
* p(x)/q(x) is the decoders' likelihood ratio at the shared latent z, p(x | z) / q(x | z), as in
  design-baselines and the CbAS authors' code (the marginal ratio is intractable).
* the log-ratio is clipped at ``max_log_weight`` (20) before exponentiation, so that a
  high-dimensional Gaussian decoder cannot overflow the weights (design-baselines does not clip).
* the VAE encoder's std is exp(soft-clamped log-std); design-baselines applies softplus to the
  clamped log-std (a slip: with bounds log 0.1 .. log 0.2 it gives a std of about 0.1 .. 0.18).
* no validation split: design-baselines holds out 200 rows (ensemble, prior) or 200 of the
  1,000 samples (each round of q) for logging only; we train on all of them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from matchopt.config_fields import count, learning_rate, widths
from matchopt.data import OfflineData
from matchopt.encodings import DesignEncoder
from matchopt.methods.base import Method
from matchopt.methods.wrappers import check_fitted, fit_all_or_nothing, in_default_threads
from matchopt.models import GaussianEnsemble, mlp_layers
from matchopt.models.gaussian import gaussian_nll, soft_clamp
from matchopt.models.sampling import gumbel_noise
from matchopt.runtime import seeded_torch_rng


@dataclass(frozen=True)
class CbASConfig:
    """CbAS hyperparameters; defaults are design-baselines' (every Design-Bench task)."""

    n_models: int = count(5)
    """Members of the bootstrapped forward ensemble."""
    ensemble_hidden: tuple[int, ...] = widths((256,))
    """Hidden layer widths of every ensemble member."""
    ensemble_epochs: int = count(100)
    """Training epochs of every ensemble member."""
    ensemble_lr: float = learning_rate(3e-4)
    """Adam learning rate of the ensemble."""
    ensemble_batch_size: int = count(100)
    """Mini-batch size of the ensemble."""
    latent_size: int = count(32)
    """Dimension of the VAE latent z."""
    vae_hidden: tuple[int, ...] = widths((256,))
    """Hidden layer widths of the VAE encoder and decoder."""
    vae_lr: float = learning_rate(3e-4)
    """Adam learning rate of the VAEs (p, and q across all rounds)."""
    vae_beta: float = 1.0
    """Weight of the KL term of the ELBO."""
    vae_batch_size: int = count(100)
    """Mini-batch size of the VAEs."""
    prior_epochs: int = count(200)
    """Training epochs of the prior p on the offline designs."""
    iterations: int = count(20)
    """Rounds of adaptive sampling."""
    samples_per_iteration: int = count(1000)
    """Designs drawn from q each round (design-baselines: 10 batches of 100)."""
    online_epochs: int = count(10)
    """Epochs of weighted training of q each round."""
    percentile: float = 80.0
    """gamma = this percentile of the ensemble means of the round's samples."""
    max_log_weight: float = 20.0
    """Upper clip of log p(x|z) - log q(x|z) (guards against overflow)."""


QUICK = {
    "ensemble_hidden": (32,),
    "ensemble_epochs": 2,
    "latent_size": 4,
    "vae_hidden": (32,),
    "prior_epochs": 2,
    "iterations": 2,
    "samples_per_iteration": 200,
    "online_epochs": 1,
}


# --- 1. The VAE (prior p and search distribution q) ---------------------------------------------


class DesignVAE(nn.Module):
    """VAE over designs: Gaussian encoder q(z | x); categorical or Gaussian decoder p(x | z).

    A design is ``n x length`` int64 tokens when ``vocab_size`` is given, else ``n x d`` floats.

    Args:
        dim: design length (tokens) or dimension (floats).
        vocab_size: number of token values, or ``None`` for continuous designs.
        latent_size: dimension of z.
        hidden: hidden widths of the encoder and of the decoder (LeakyReLU).
        max_std, min_std: initial trainable bounds of every predicted std.
    """

    def __init__(
        self,
        dim: int,
        vocab_size: int | None,
        latent_size: int,
        hidden: tuple[int, ...],
        max_std: float = 0.2,
        min_std: float = 0.1,
    ):
        super().__init__()
        self.dim, self.vocab_size, self.latent_size = dim, vocab_size, latent_size
        width = dim * vocab_size if vocab_size else dim
        out = dim * vocab_size if vocab_size else 2 * dim
        self.encoder = mlp_layers(width, hidden, 2 * latent_size, "leaky_relu")
        self.decoder = mlp_layers(latent_size, hidden, out, "leaky_relu")
        bounds = torch.log(torch.tensor([min_std, max_std]))
        self.encoder_log_std_bounds = nn.Parameter(bounds.clone())
        self.decoder_log_std_bounds = nn.Parameter(bounds.clone())

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std (n x latent) of q(z | x)."""
        if self.vocab_size:
            x = nn.functional.one_hot(x, self.vocab_size).flatten(1).float()
        mean, log_std = self.encoder(x).chunk(2, dim=-1)
        low, high = self.encoder_log_std_bounds
        return mean, soft_clamp(log_std, low, high).exp()

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Decoder parameters: log-probabilities (n x length x vocab) for tokens, or
        mean and log-std stacked (n x d x 2) for floats."""
        out = self.decoder(z)
        if self.vocab_size:
            return out.view(len(z), self.dim, self.vocab_size).log_softmax(-1)
        mean, log_std = out.view(len(z), self.dim, 2).unbind(-1)
        low, high = self.decoder_log_std_bounds
        return torch.stack([mean, soft_clamp(log_std, low, high)], dim=-1)

    def log_likelihood(self, params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """log p(x | z) (n,) of designs ``x`` under decoder parameters ``params``."""
        if self.vocab_size:
            return params.gather(-1, x.unsqueeze(-1)).squeeze(-1).sum(-1)
        mean, log_std = params.unbind(-1)
        return -gaussian_nll(mean, log_std, x).sum(-1)

    def sample_designs(self, params: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One design per row of decoder parameters (Gumbel-max for tokens)."""
        if self.vocab_size:
            return (params + gumbel_noise(params.shape, generator, params.device)).argmax(-1)
        mean, log_std = params.unbind(-1)
        noise = torch.randn(mean.shape, generator=generator).to(mean.device)
        return mean + log_std.exp() * noise

    def loss(
        self, x: torch.Tensor, weights: torch.Tensor, beta: float, generator: torch.Generator
    ) -> torch.Tensor:
        """Weighted negative ELBO ``mean(w * (-log p(x | z) + beta * KL(q(z | x) || N(0, I))))``
        with one reparameterized z per design."""
        mean, std = self.encode(x)
        z = mean + std * torch.randn(mean.shape, generator=generator).to(mean.device)
        nll = -self.log_likelihood(self.decode(z), x)
        kl = (0.5 * (mean.pow(2) + std.pow(2) - 1.0) - std.log()).sum(-1)
        return (weights * (nll + beta * kl)).mean()


def train_vae(
    vae: DesignVAE,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    weights: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    beta: float,
    generator: torch.Generator,
) -> None:
    """Weighted maximum likelihood (ELBO) over shuffled mini-batches."""
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator).to(x.device)
        for start in range(0, len(x), batch_size):
            batch = order[start : start + batch_size]
            loss = vae.loss(x[batch], weights[batch], beta, generator)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


# --- 2. Importance weights of one round ---------------------------------------------------------


def probability_above(
    ensemble: GaussianEnsemble, features: torch.Tensor, gamma: float
) -> torch.Tensor:
    """P(y > gamma | x) (n,) under the equal-weight mixture of the members' Gaussians."""
    total = torch.zeros(len(features), device=features.device)
    for member in ensemble.members:
        mean, log_std = member(features)
        total += torch.special.ndtr((mean - gamma) / log_std.exp())
    return total / len(ensemble.members)


def cbas_weights(
    log_p: torch.Tensor, log_q: torch.Tensor, p_above: torch.Tensor, max_log_weight: float
) -> torch.Tensor:
    """CbAS weights ``p(x|z) / q(x|z) * P(y > gamma | x)`` (n,), the log-ratio clipped above.

    Args:
        log_p, log_q: log-likelihoods (n,) of the designs under the prior's and q's decoders,
            both at the latent z each design was decoded from.
        p_above: P(y > gamma | x) (n,) under the forward model.
        max_log_weight: upper clip of ``log_p - log_q``.
    """
    return (log_p - log_q).clamp(max=max_log_weight).exp() * p_above


def _stream_seed(seed: int, stream: int) -> int:
    """A torch seed for an independent random stream ``stream`` of run ``seed``."""
    return int(np.random.SeedSequence([seed, stream]).generate_state(1)[0])


# --- 3. The method -------------------------------------------------------------------------------


class CbAS(Method):
    """CbAS (Brookes et al., 2019): a VAE search distribution adapted toward high predicted y.

    Args:
        config: :class:`CbASConfig` (paper defaults when ``None``).
        seed: seeds the initializations, the bootstraps and every sample.
        progress: show progress bars on stderr.

    Attributes:
        ensemble_: the trained :class:`GaussianEnsemble` (normalized features -> normalized y).
        prior_: the prior VAE p; ``search_``: the adapted VAE q.
        encoder_: maps designs to normalized features and back.
        gammas_: the threshold gamma of every round (normalized y).
    """

    config_class = CbASConfig
    presets = {"paper": {}, "quick": QUICK}

    @fit_all_or_nothing
    def fit(self, data: OfflineData) -> CbAS:
        config = self.config_
        space = data.space
        self.encoder_ = DesignEncoder(space).fit(data.x, data.y)
        device = self.device_
        features = torch.from_numpy(self.encoder_.encode_x(data.x)).to(device)
        scores = torch.from_numpy(self.encoder_.encode_y(data.y)).to(device)
        designs = torch.tensor(data.x, device=device) if space.is_discrete else features
        generator = torch.Generator().manual_seed(self.seed)
        # 1. Forward ensemble on bootstraps.
        ensemble = GaussianEnsemble.trained(
            features,
            scores,
            n_models=config.n_models,
            hidden=config.ensemble_hidden,
            activation="leaky_relu",
            epochs=config.ensemble_epochs,
            batch_size=config.ensemble_batch_size,
            lr=config.ensemble_lr,
            seed=self.seed,
            progress=self.progress,
        )
        # 2. Prior p on the offline designs; q starts as a copy.
        prior = self._train_prior(designs, generator)
        search = copy.deepcopy(prior)
        for p in prior.parameters():
            p.requires_grad_(False)
        # 3. Adaptive sampling.
        self._adapt(ensemble, prior, search, generator)

        self.ensemble_, self.prior_, self.search_ = ensemble, prior, search
        self.data_ = data
        return self

    def _train_prior(self, designs: torch.Tensor, generator: torch.Generator) -> DesignVAE:
        """Step 2: the prior VAE p, trained on the offline ``designs`` (tokens, or normalized
        features) with batches drawn from ``generator``."""
        config = self.config_
        device = designs.device
        space = self.encoder_.space
        with seeded_torch_rng(self.seed):
            prior = DesignVAE(
                space.shape[0], space.vocab_size, config.latent_size, config.vae_hidden
            ).to(device)
        optimizer = torch.optim.Adam(prior.parameters(), lr=config.vae_lr)
        for _ in tqdm(
            range(config.prior_epochs), desc="CbAS prior", disable=not self.progress, leave=False
        ):
            train_vae(
                prior,
                optimizer,
                designs,
                torch.ones(len(designs), device=device),
                epochs=1,
                batch_size=config.vae_batch_size,
                beta=config.vae_beta,
                generator=generator,
            )
        return prior

    def _adapt(
        self,
        ensemble: GaussianEnsemble,
        prior: DesignVAE,
        search: DesignVAE,
        generator: torch.Generator,
    ) -> None:
        """Step 3, adaptive sampling: each round trains the search VAE q on its own samples
        weighted toward high predicted y; the round's threshold gamma goes to ``gammas_``."""
        config = self.config_
        optimizer = torch.optim.Adam(search.parameters(), lr=config.vae_lr)
        self.gammas_: list[float] = []
        for _ in tqdm(
            range(config.iterations), desc="CbAS rounds", disable=not self.progress, leave=False
        ):
            x, weights, gamma = self._weighted_samples(ensemble, prior, search, generator)
            self.gammas_.append(gamma)
            train_vae(
                search,
                optimizer,
                x,
                weights,
                epochs=config.online_epochs,
                batch_size=config.vae_batch_size,
                beta=config.vae_beta,
                generator=generator,
            )

    @torch.no_grad()
    def _weighted_samples(
        self,
        ensemble: GaussianEnsemble,
        prior: DesignVAE,
        search: DesignVAE,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor, float]:
        """One round's samples of the search model, their CbAS weights (prior over search
        likelihood times the probability of scoring above the round's threshold), and the
        threshold gamma (the ``percentile`` of the samples' predicted scores)."""
        config, device = self.config_, self.device_
        z = torch.randn(config.samples_per_iteration, config.latent_size, generator=generator).to(
            device
        )
        q_params = search.decode(z)
        x = search.sample_designs(q_params, generator)
        x_features = self._features(x)
        predicted = ensemble.predict_mean(x_features)
        quantile = torch.tensor(config.percentile / 100.0, device=device)
        gamma = float(torch.quantile(predicted, quantile, interpolation="nearest"))
        weights = cbas_weights(
            prior.log_likelihood(prior.decode(z), x),
            search.log_likelihood(q_params, x),
            probability_above(ensemble, x_features, gamma),
            config.max_log_weight,
        )
        return x, weights, gamma

    def _features(self, designs: torch.Tensor) -> torch.Tensor:
        """Ensemble features of VAE designs (tokens are mapped through the encoder)."""
        if not self.encoder_.space.is_discrete:
            return designs
        encoded = self.encoder_.encode_x(designs.cpu().numpy())
        return torch.from_numpy(encoded).to(designs.device)

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs sampled from the adapted search distribution q."""
        check_fitted(self)
        generator = torch.Generator().manual_seed(_stream_seed(self.seed, 1))
        device = next(self.search_.parameters()).device
        with torch.no_grad():
            z = torch.randn(n, self.config_.latent_size, generator=generator).to(device)
            x = self.search_.sample_designs(self.search_.decode(z), generator).cpu()
        if self.data_.space.is_discrete:
            return x.numpy().astype(np.int64)
        return self.encoder_.decode_x(x.numpy())
