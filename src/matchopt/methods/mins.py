"""MINs: model inversion networks, a score-conditioned generator of designs.

Kumar & Levine, "Model Inversion Networks for Model-Based Optimization", NeurIPS 2020; the
configuration is design-baselines' (``design_baselines/mins``, the "Final Version" experiments).

Read top to bottom:

1. **Reweighting** (paper Sec. 3.3): each offline row gets the weight of
   :func:`matchopt.weighting.score_bin_weights` (20 bins of the z-scored y, temperature 0.1,
   clipped to [0, 5]); every loss below is a weighted mean over the batch.
2. **Inverse map** G(z, y), z ~ N(0, I_32), trained as a conditional WGAN-GP against a critic
   D(x, y). Both are :class:`ConditionalMLP`: y is embedded by one dense layer and concatenated
   to the input of every layer; 3 x [dense 1024, LayerNorm, LeakyReLU 0.2], then a dense output.
   Critic loss ``mean(w * (D(x_fake, y) - D(x_real, y) + 10 * (1 - |grad D(x_mix, y)|)^2))``
   on random interpolations x_mix; the generator minimizes ``mean(w * -D(G(z, y), y))`` once
   every 10 critic steps (on batches 0, 10, 20, ... of each epoch, after that batch's critic
   step), with the y of the real batch. Adam 2e-4, betas (0, 0.9), batch 128, 200 epochs.
3. **Inference**: 128 samples G(z, max offline y).

Designs. Continuous designs are z-scored (as design-baselines' ``normalize_xs``). Discrete designs
are one-hot vectors, not logits, as in design-baselines (whose TF-Bind config has
``normalize_xs=False``): the generator outputs K logits per token and a Gumbel-softmax
("relaxed one-hot") sample at temperature tau; real rows are relaxed the same way (one-hot
smoothed to ``0.99 * onehot + 0.01 / K``, then a Gumbel-softmax sample at tau) so that the critic
cannot tell them apart by sharpness alone; tau goes linearly from 5 (first epoch) to 1 (last).
At the end a token is the argmax of the Gumbel-perturbed generator log-probabilities, i.e. the
limit of design-baselines' relaxed sample at temperature 0.001 followed by argmax (a categorical
sample from the generator's output), returned as int64 tokens.

Cost: on TF-Bind-8 (32,898 rows, 258 batches per epoch) the 200 epochs are 51,600 critic steps
(two 5.3M-parameter networks, a double backward for the penalty): measured 0.31 s of CPU per step
on one thread, about 4.4 CPU-hours per seed, before a run alone became the seed stack of one
(10-15% more on a CPU; docs/benchmarks.md).

Deviations from baselines.md / design-baselines:
* design-baselines trains two identical GANs ("exploration" and "exploitation") and samples from
  the second; with its final settings (0 extra iterations) the first is unused, so we train one.
* design-baselines holds out 200 rows for validation (only logged); we train on every row.
* PyTorch default layer initialization and LayerNorm epsilon (1e-5); Keras uses Glorot-uniform
  and 1e-3.
* Final discrete sample: Gumbel-max argmax (the temperature-0 limit of design-baselines' 0.001).
* Not in baselines.md, taken from design-baselines: discrete real rows are smoothed (keep 0.99)
  and Gumbel-relaxed at the generator's temperature before the critic sees them; discrete
  designs are one-hot (no logits, no z-scoring).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from matchopt.config_fields import count, learning_rate, widths
from matchopt.data import OfflineData
from matchopt.encodings import DesignEncoder
from matchopt.methods.base import search_rng
from matchopt.methods.engine import TrainingRun
from matchopt.methods.seed_batch import end_seed_epoch, seed_loop
from matchopt.methods.training import Resumable, SeedBatchable
from matchopt.methods.wrappers import check_fitted, in_default_threads
from matchopt.models import LossTotal, adam
from matchopt.models.sampling import gumbel_noise
from matchopt.models.stacked import SeedDraws, SeedStack
from matchopt.runtime import seeded_torch_rng
from matchopt.weighting import score_bin_weights


@dataclass(frozen=True)
class MinsConfig:
    """MINs hyperparameters; defaults are design-baselines' final configuration."""

    latent_size: int = count(32)
    """Dimension of the generator's noise z."""
    hidden: tuple[int, ...] = widths((1024, 1024, 1024))
    """Widths of the [dense, LayerNorm, LeakyReLU] blocks of the generator and of the critic."""
    embedding: int = count(1024)
    """Width of the y embedding concatenated to every block's input."""
    negative_slope: float = 0.2
    """LeakyReLU slope."""
    epochs: int = count(200)
    """Passes over the offline data."""
    batch_size: int = count(128)
    """Rows per critic step."""
    critic_steps: int = count(10)
    """One generator step per this many critic steps."""
    penalty_weight: float = 10.0
    """Weight of the WGAN-GP gradient penalty."""
    lr: float = learning_rate(2e-4)
    """Adam learning rate (generator and critic)."""
    beta1: float = 0.0
    """Adam beta1 (generator and critic)."""
    beta2: float = 0.9
    """Adam beta2 (generator and critic)."""
    n_bins: int = count(20)
    """Histogram bins of the sample reweighting."""
    weight_temperature: float = 0.1
    """Softmax temperature of the reweighting, on z-scored y."""
    weight_clip: float = 5.0
    """Upper bound of a sample weight."""
    start_temperature: float = 5.0
    """Discrete designs: Gumbel-softmax temperature in the first epoch."""
    final_temperature: float = 1.0
    """Discrete designs: Gumbel-softmax temperature in the last epoch."""
    keep: float = 0.99
    """Discrete designs: real one-hot rows become ``keep * onehot + (1 - keep) / K`` before
    relaxation."""


QUICK = {"hidden": (64, 64, 64), "embedding": 64, "epochs": 3}


# --- 1. Networks -------------------------------------------------------------------------------


class ConditionalMLP(nn.Module):
    """MINs' generator / critic body: y embedded once and concatenated to every layer's input.

    ``e = W_e y + b_e``; ``h_0 = input``; ``h_l = LeakyReLU(LayerNorm(W_l [h_{l-1}, e] + b_l))``;
    output ``W_o [h_L, e] + b_o``.

    Args:
        in_features: dimension of the input (z for the generator, a design for the critic).
        out_features: dimension of the output (design features or logits; 1 for the critic).
        hidden: widths of the hidden layers.
        embedding: width of the embedding e.
        negative_slope: LeakyReLU slope.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        hidden: tuple[int, ...] = (1024, 1024, 1024),
        embedding: int = 1024,
        negative_slope: float = 0.2,
    ):
        super().__init__()
        self.embed = nn.Linear(1, embedding)
        widths = [in_features, *hidden]
        self.layers = nn.ModuleList(
            nn.Linear(w + embedding, out) for w, out in zip(widths[:-1], widths[1:])
        )
        self.norms = nn.ModuleList(nn.LayerNorm(width) for width in hidden)
        self.output = nn.Linear(widths[-1] + embedding, out_features)
        self.negative_slope = negative_slope

    def forward(self, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Outputs (n x out_features) for inputs ``h`` (n x in_features) and scores ``y`` (n,)."""
        e = self.embed(y[:, None])
        for layer, norm in zip(self.layers, self.norms):
            h = nn.functional.leaky_relu(norm(layer(torch.cat([h, e], 1))), self.negative_slope)
        return self.output(torch.cat([h, e], 1))


def gumbel_softmax(
    log_probs: torch.Tensor, temperature: float, generator: torch.Generator
) -> torch.Tensor:
    """A relaxed one-hot sample ``softmax((log_probs + Gumbel noise) / temperature)``.

    Args:
        log_probs: (... x K) log-probabilities (or logits) of K classes.
        temperature: relaxation temperature (-> 0: a one-hot categorical sample).
        generator: source of the Gumbel noise.
    """
    return relaxed_onehot(
        log_probs, temperature, gumbel_noise(log_probs.shape, generator, log_probs.device)
    )


def relaxed_onehot(
    log_probs: torch.Tensor, temperature: float, noise: torch.Tensor
) -> torch.Tensor:
    """``softmax((log_probs + noise) / temperature)`` over the last dimension, for Gumbel
    ``noise`` of the same shape (:func:`gumbel_softmax` with its noise drawn)."""
    return torch.softmax((log_probs + noise) / temperature, dim=-1)


# --- 2. WGAN-GP losses ------------------------------------------------------------------------


def critic_loss(
    critic: nn.Module,
    x_real: torch.Tensor,
    x_fake: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor,
    penalty_weight: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """Weighted WGAN-GP critic loss (Gulrajani et al. 2017) on one batch.

    ``mean_i w_i * (D(x_fake_i) - D(x_real_i) + penalty_weight * (1 - |grad D(x_mix_i)|)^2)``
    with ``x_mix = e * x_real + (1 - e) * x_fake``, e ~ U(0, 1) per row (all D's conditioned on y).

    Args:
        critic: D(x, y) -> (n x 1).
        x_real, x_fake: real and generated designs (n x d); x_fake carries no generator graph.
        y: normalized scores (n,).
        w: sample weights (n,).
        penalty_weight: weight of the gradient penalty.
        generator: source of the interpolation coefficients.
    """
    e = torch.rand(len(x_real), 1, generator=generator).to(x_real.device)
    return wgan_gp_loss(critic, x_real, x_fake, y, w, penalty_weight, e)


def wgan_gp_loss(
    critic: nn.Module,
    x_real: torch.Tensor,
    x_fake: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor,
    penalty_weight: float,
    e: torch.Tensor,
) -> torch.Tensor:
    """:func:`critic_loss` with its interpolation coefficients ``e`` (n x 1) given.

    Shape-agnostic: with a leading seed dimension on every argument (a
    :class:`~matchopt.models.stacked.SeedStack` critic) it returns each seed's loss; a seed's
    penalty gradient is its own, since a seed's output depends on its own inputs only.
    """
    n = x_real.shape[-2]
    x_mix = (e * x_real + (1 - e) * x_fake).requires_grad_(True)
    # One pass over real, fake and mixed rows (LayerNorm acts per row, so rows do not interact).
    out = critic(torch.cat([x_real, x_fake, x_mix], -2), torch.cat([y, y, y], -1))[..., 0]
    d_real, d_fake, d_mix = out[..., :n], out[..., n : 2 * n], out[..., 2 * n :]
    (grad,) = torch.autograd.grad(d_mix.sum(), x_mix, create_graph=True)
    penalty = (1.0 - grad.norm(dim=-1)) ** 2
    return _mean_over_rows(w * (d_fake - d_real + penalty_weight * penalty))


def _mean_over_rows(values: torch.Tensor) -> torch.Tensor:
    """The mean over a batch's rows (the last dimension): of each seed, for a batch of seeds."""
    return values.mean() if values.dim() == 1 else values.mean(-1)


def generator_loss(
    critic: nn.Module, x_fake: torch.Tensor, y: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    """Weighted generator loss ``mean_i w_i * -D(x_fake_i, y_i)`` (shape-agnostic, as
    :func:`wgan_gp_loss`)."""
    return -_mean_over_rows(w * critic(x_fake, y)[..., 0])


# --- 3. The method -----------------------------------------------------------------------------


class Mins(Resumable, SeedBatchable):
    """MINs (Kumar & Levine, NeurIPS 2020): conditional WGAN-GP G(z, y), sampled at max offline y.

    Args:
        config: :class:`MinsConfig` (design-baselines' defaults when ``None``).
        seed: seeds the networks' initialization, the batches, all noise and the samples.
        progress: show a training progress bar on stderr.

    Attributes:
        generator_: the trained G(z, y) (:class:`ConditionalMLP`).
        critic_: the trained D(x, y).
        encoder_: maps y (and continuous designs) to the normalized space and back.
        weights_: the sample weights (N,).
        losses_: mean critic loss of every epoch.
    """

    config_class = MinsConfig
    presets = {"paper": {}, "quick": QUICK}

    def _real_features(self, data: OfflineData) -> np.ndarray:
        """Designs as the critic sees them: z-scored floats, or flattened one-hot tokens."""
        if data.space.is_discrete:
            onehot = np.eye(data.space.vocab_size, dtype=np.float32)[data.x]
            return onehot.reshape(len(data.x), -1)
        return self.encoder_.encode_x(data.x)

    def _generate(
        self, generator: nn.Module, z: torch.Tensor, y: torch.Tensor, tau: float, draws: SeedDraws
    ) -> torch.Tensor:
        """Generator samples (n x d): features, or relaxed one-hot tokens at temperature ``tau``
        (shape-agnostic: a seed dimension first, for a batch of seeds)."""
        out = generator(z, y)
        if not self.data_.space.is_discrete:
            return out
        k = self.data_.space.vocab_size
        log_probs = torch.log_softmax(out.view(*out.shape[:-1], -1, k), dim=-1)
        noise = draws.gumbel(*log_probs.shape[-3:])
        return relaxed_onehot(log_probs, tau, noise).view(out.shape)

    def _relax_real(self, x: torch.Tensor, tau: float, draws: SeedDraws) -> torch.Tensor:
        """Discrete designs: smoothed one-hot rows relaxed at temperature ``tau``
        (design-baselines' ``disc_noise``); continuous designs unchanged."""
        if not self.data_.space.is_discrete:
            return x
        k, keep = self.data_.space.vocab_size, self.config_.keep
        probs = keep * x.view(*x.shape[:-1], -1, k) + (1.0 - keep) / k
        noise = draws.gumbel(*probs.shape[-3:])
        return relaxed_onehot(probs.log(), tau, noise).view(x.shape)

    def _prepare(self, data: OfflineData) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encoder, reweighting and the training tensors on the device: the critic's view of
        the designs (N x d), z-scored scores (N,) and sample weights (N,)."""
        config = self.config_
        self.data_ = data
        self.encoder_ = DesignEncoder(data.space).fit(data.x, data.y)
        features = torch.from_numpy(self._real_features(data))
        scores = torch.from_numpy(self.encoder_.encode_y(data.y))
        self.weights_ = score_bin_weights(
            scores.numpy(), config.weight_temperature, config.n_bins, clip=config.weight_clip
        )
        device = self.device_
        return features.to(device), scores.to(device), torch.from_numpy(self.weights_).to(device)

    def _new_networks(self, n_features: int) -> tuple[ConditionalMLP, ConditionalMLP]:
        """The seed's untrained generator and critic (initialized on the CPU, then moved)."""
        config = self.config_
        with seeded_torch_rng(self.seed):
            generator = ConditionalMLP(
                config.latent_size,
                n_features,
                config.hidden,
                config.embedding,
                config.negative_slope,
            )
            critic = ConditionalMLP(
                n_features, 1, config.hidden, config.embedding, config.negative_slope
            )
        return generator.to(self.device_), critic.to(self.device_)

    @classmethod
    def _train(cls, methods: Sequence[Mins], data: OfflineData, run: TrainingRun) -> None:
        """The WGAN-GP training loop (module notes, 2) of ``methods`` (one seed each) as one
        seed stack.

        A run alone is the stack of one: its Adam has beta1 = 0, so a step moves each weight by
        about lr times the sign of its gradient and a gradient near zero whose sign round-off
        flips moves it by 2 lr. Only the same kernels keep a batched seed on its run alone's
        path: on the CPU a stack computes each seed's slice as a stack of one does (measured:
        bit for bit, tests/methods/test_seed_batches.py); on CUDA, whose batched products may pick
        their kernel by the batch's size, that is unmeasured.
        """
        first = methods[0]
        config = first.config_
        features, scores, weights = first._prepare(data)
        for method in methods[1:]:
            method.data_, method.encoder_, method.weights_ = data, first.encoder_, first.weights_
        noises = [torch.Generator().manual_seed(m.seed) for m in methods]
        networks = [m._new_networks(features.shape[1]) for m in methods]
        generator = SeedStack([g for g, _ in networks])
        critic = SeedStack([c for _, c in networks])
        draws = SeedDraws(noises, features.device, batched=True)
        betas = (config.beta1, config.beta2)
        g_opt = adam(generator.parameters(), lr=config.lr, betas=betas)
        d_opt = adam(critic.parameters(), lr=config.lr, betas=betas)
        # Gumbel-softmax temperature of each epoch: linear from start to final (discrete only).
        temperatures = np.linspace(
            config.start_temperature, config.final_temperature, config.epochs
        )
        snapshots, losses, bar = seed_loop(
            run, data, "MINs", len(methods), config.epochs, first.progress,
            generator=generator, critic=critic, generator_optimizer=g_opt,
            critic_optimizer=d_opt, **{f"noise{k}": g for k, g in enumerate(noises)},
        )  # fmt: skip
        n_rows = len(features)
        for epoch in bar:
            tau = float(temperatures[epoch])
            order = draws.randperm(n_rows)
            totals = [LossTotal() for _ in methods]
            for step, batch in enumerate(order.split(config.batch_size, dim=-1)):
                first._gan_step(
                    (generator, critic, g_opt, d_opt),
                    (features[batch], scores[batch], weights[batch]),
                    tau,
                    draws,
                    totals,
                    step % config.critic_steps == 0,
                )
            end_seed_epoch(snapshots, losses, totals, n_rows, bar, epoch + 1, config.epochs)
        bar.close()
        generator.unstack_into([g for g, _ in networks])
        critic.unstack_into([c for _, c in networks])
        for method, (own_generator, own_critic), own in zip(methods, networks, losses):
            method.generator_, method.critic_ = own_generator.eval(), own_critic.eval()
            method.losses_ = own

    def _gan_step(
        self,
        networks: tuple[SeedStack, SeedStack, torch.optim.Optimizer, torch.optim.Optimizer],
        batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        tau: float,
        draws: SeedDraws,
        totals: list[LossTotal],
        generator_turn: bool,
    ) -> None:
        """One batch of the WGAN-GP loop: a critic step (its loss added to ``totals``), then,
        on the generator's turn, a generator step."""
        config = self.config_
        generator, critic, g_opt, d_opt = networks
        features, y, w = batch
        rows = y.shape[-1]
        x_real = self._relax_real(features, tau, draws)
        with torch.no_grad():
            z = draws.randn(rows, config.latent_size)
            x_fake = self._generate(generator, z, y, tau, draws)
        d_opt.zero_grad()
        e = draws.rand(rows, 1)  # the interpolation coefficients of critic_loss
        loss = wgan_gp_loss(critic, x_real, x_fake, y, w, config.penalty_weight, e)
        loss.sum().backward()
        d_opt.step()
        for total, value in zip(totals, loss):
            total.add(value, rows)
        if generator_turn:
            critic.requires_grad_(False)
            g_opt.zero_grad()
            z = draws.randn(rows, config.latent_size)
            fake = self._generate(generator, z, y, tau, draws)
            generator_loss(critic, fake, y, w).sum().backward()
            g_opt.step()
            critic.requires_grad_(True)

    @torch.no_grad()
    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` samples G(z, y_max) with y_max the best offline score, in the data's format."""
        check_fitted(self)
        rng = search_rng(self)
        device = next(self.generator_.parameters()).device
        z = torch.from_numpy(rng.standard_normal((n, self.config_.latent_size), np.float32))
        y_max = torch.full((n,), float(self.encoder_.encode_y(self.data_.y).max()))
        out = self.generator_(z.to(device), y_max.to(device)).cpu().numpy()
        if not self.data_.space.is_discrete:
            return self.encoder_.decode_x(out)
        length, k = self.data_.space.shape[0], self.data_.space.vocab_size
        logits = out.reshape(n, length, k).astype(np.float64)
        # Gumbel-max: argmax(log p + Gumbel) is a sample of p (log-softmax shifts cancel).
        return (logits + rng.gumbel(size=logits.shape)).argmax(-1).astype(np.int64)
