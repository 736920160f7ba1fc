"""BONET: a generative pretrained transformer on sorted trajectories of offline designs.

Mashkaria, Krishnamoorthy, Grover. "Generative Pretraining for Black-Box Optimization",
ICML 2023; details from the authors' code (github.com/siddarthk97/bonet), as specified in
baselines.md.

Read top to bottom:

1. **Regrets and bins**: normalize y to [0, 1] and take regrets r = 1 - y; cut the regret range
   into 64 equal-width bins.
2. **Points per bin** (SORT-SAMPLE): bin b gets a share of the 128 trajectory points proportional
   to ``n_b / (n_b + K) * exp((ybar_b - 1) / tau)`` with K = 0.03 N and tau = 1 - (90th percentile
   of r): well-populated, high-y bins get more points.
3. **Trajectories**: 800 trajectories, each drawing its bins' quotas with replacement and sorted
   by increasing y; the return-to-go token ``RTG_t = sum_{s >= t} r_s`` is the regret still to be
   spent from step t on.
4. **Model**: a causal transformer (``torch.nn.TransformerEncoder`` with a causal mask; embedding
   128, 8 layers, 8 heads, dropout 0.1) over interleaved tokens ``RTG_1, x_1, RTG_2, x_2, ...``
   in windows of 64 pairs; the output at ``RTG_t`` predicts ``x_t`` (MSE on features; a
   cross-entropy per token position for discrete designs). AdamW 1e-4, weight decay 0.1, 75 epochs.
5. **Rollout**: prompt with the first 64 points of a fresh trajectory, their RTGs shifted so
   that the budget left after the prompt is the target RTG (0); roll out 64 points with the RTG
   held at the target. Two rollouts give the 128 designs (no oracle is used to choose among them).

Design representation: the transformer reads normalized features (:class:`DesignEncoder`:
z-scored floats, or z-scored logits of tokens); continuous designs are predicted as features,
discrete ones as logits over the vocabulary at every position (decoded by argmax).

Choices where the authors' code leaves a choice (documented in docs/baselines.md):

* normalization: y is scaled to [0, 1] with the OFFLINE min and max, so the best offline design
  has regret 0. The authors use the min and max of the full Design-Bench dataset, which a
  method must not see (it includes the hidden top designs).
* number of trajectories: 800 (the authors' data files for every task but TF-Bind-10, which uses
  1,000 or 4,000); the authors train on the first 90% and keep 10% for a validation loss used
  only to save a "best" checkpoint, while their evaluation loads the last one: we train on all.
* target RTG: 0.0. The authors' scripts roll out with RTG in {0, 0.01, 0.05, 0.1} and report the
  best by oracle score; choosing by oracle is not allowed here, so the target is fixed. With the
  offline normalization, 0 asks for designs as good as the best offline one (the authors' 0
  asked for the full dataset's best); a negative target asks for more.
* tau is floored at 1e-6: when 10% of the rows or more tie at the worst y the formula gives
  tau = 0, and then every trajectory point comes from the best bin.
* training windows: as the authors' dataset, every (trajectory, start) with start = min(s,
  T - 64) for s = 0..T-1, so the last window of each trajectory is seen T - 63 times per epoch.
* prompts: each rollout's prompt is a fresh trajectory from the same sampler (the authors draw
  one of 128 pre-generated evaluation trajectories at random).

Deviations from the authors' code:

* the transformer is ``torch.nn.TransformerEncoder`` (pre-LayerNorm, GELU, feed-forward 4 x 128)
  instead of minGPT's hand-written blocks; the library layer also applies dropout inside the
  feed-forward block.
* the trajectory-level position ("timestep") embedding is indexed by the first step of the
  window both in training and in rollouts; the authors' rollout indexes it by the current step,
  which reaches indices that training never updates.
* points per bin: largest-remainder rounding of the shares (sums to 128, never negative); the
  authors round each share and add the difference to the best bin, which can go negative.
* ``ybar_b`` is the mean normalized y of the bin (baselines.md); the authors use the bin's
  centre (``bin_value="center"``).
* discrete designs: the point embedding reads z-scored logits and the output is one linear head
  of length x vocab logits; the authors feed raw token ids as floats (their first discrete model
  also kept its per-position heads in a plain list, so they were never trained).
* batch size 128 (TF-Bind-8 and Superconductor scripts; Ant uses 64); no learning-rate schedule,
  gradients clipped to norm 1, AdamW betas (0.9, 0.95) as the authors' trainer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from matchopt.checkpoints import LoopSnapshots, TorchGlobalRNG
from matchopt.data import OfflineData
from matchopt.encodings import DesignEncoder
from matchopt.errors import MatchoptError
from matchopt.methods.base import Method
from matchopt.models import LossTotal, adam
from matchopt.runtime import cuda_indices, seeded_torch_rng


@dataclass(frozen=True)
class BONETConfig:
    """BONET hyperparameters; defaults are baselines.md's (the authors' TF-Bind-8 scripts)."""

    n_bins: int = 64
    """Equal-width regret bins."""
    trajectory_length: int = 128
    """Points per trajectory."""
    n_trajectories: int = 800
    """Training trajectories."""
    smoothing: float = 0.03
    """K = smoothing * N in the bin score n_b / (n_b + K) * exp((ybar_b - 1) / tau)."""
    temperature_percentile: float = 90.0
    """tau = 1 - this percentile of the regrets."""
    bin_value: str = field(default="mean", metadata={"choices": ("mean", "center")})
    """ybar_b: mean normalized y of the bin (baselines.md) or the bin centre (authors' code)."""
    embed_dim: int = 128
    """Transformer width."""
    n_layers: int = 8
    """Transformer layers."""
    n_heads: int = 8
    """Attention heads."""
    context_length: int = 64
    """(RTG, x) pairs the transformer sees at once."""
    dropout: float = 0.1
    """Dropout in the embeddings and every transformer layer."""
    epochs: int = 75
    """Training epochs (each visits every trajectory window once)."""
    batch_size: int = 128
    """Windows per optimizer step."""
    lr: float = 1e-4
    """AdamW learning rate."""
    weight_decay: float = 0.1
    """AdamW weight decay (linear and attention weights only)."""
    prompt_length: int = 64
    """Offline points that prompt each rollout; the rollout adds trajectory_length - this."""
    target_rtg: float = 0.0
    """Regret budget left after the prompt, held during the rollout."""
    micro_batch: int | None = None
    """Windows per forward pass: each batch's gradient is summed over batch_size / micro_batch
    passes before the step (the same gradient up to summation order, but other dropout masks);
    None = the whole batch in one pass, as the authors. 32 measured 1.04x faster on a 2-core
    CPU (benchmarks/speedups.py); it bounds activation memory on a small GPU."""


QUICK = {
    "n_bins": 8,
    "trajectory_length": 16,
    "n_trajectories": 16,
    "embed_dim": 16,
    "n_layers": 1,
    "n_heads": 2,
    "context_length": 8,
    "epochs": 1,
    "batch_size": 32,
    "prompt_length": 8,
}


# --- 1. Regrets and bins -----------------------------------------------------------------------


def normalized_regrets(y: np.ndarray) -> np.ndarray:
    """r = 1 - (y - min y) / (max y - min y) (N,): 0 for the best offline design, 1 the worst."""
    y = np.asarray(y, dtype=np.float64)
    span = y.max() - y.min()
    if span <= 0:
        raise MatchoptError("BONET needs at least two distinct y values in the offline data")
    return 1.0 - (y - y.min()) / span


def regret_bins(regrets: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin index (N,) of every regret in ``n_bins`` equal-width bins over [min r, max r].

    Bin b is the closed interval [min + b w, min + (b + 1) w]; a regret on an edge goes to the
    lower bin (the authors' first-match loop), and bin 0 holds the lowest regrets.
    """
    low, high = regrets.min(), regrets.max()
    upper_edges = low + (high - low) / n_bins * np.arange(1, n_bins + 1)
    return np.minimum(np.searchsorted(upper_edges, regrets, side="left"), n_bins - 1)


# --- 2. Points per bin ---------------------------------------------------------------------------


def bin_quotas(
    regrets: np.ndarray,
    bins: np.ndarray,
    n_bins: int,
    length: int,
    smoothing: float = 0.03,
    temperature_percentile: float = 90.0,
    bin_value: str = "mean",
) -> np.ndarray:
    """Points each bin contributes to a trajectory (n_bins,), summing to ``length``.

    Score of bin b: ``n_b / (n_b + K) * exp((ybar_b - 1) / tau)`` with K = smoothing * N,
    tau = 1 - percentile(r, temperature_percentile), ybar_b = 1 - (mean or centre regret of b).
    Shares ``length * s_b / sum(s)`` are rounded by largest remainders.
    """
    counts = np.bincount(bins, minlength=n_bins).astype(np.float64)
    if bin_value == "mean":
        bar_regret = np.bincount(bins, weights=regrets, minlength=n_bins) / np.maximum(counts, 1)
    elif bin_value == "center":
        width = (regrets.max() - regrets.min()) / n_bins
        bar_regret = regrets.min() + width * (np.arange(n_bins) + 0.5)
    else:
        raise MatchoptError(f"unknown bin_value {bin_value!r}; choose 'mean' or 'center'")
    tau = max(1.0 - np.percentile(regrets, temperature_percentile), 1e-6)
    k = smoothing * len(regrets)
    with np.errstate(divide="ignore"):  # empty bins: log 0 = -inf, share 0
        log_score = np.log(counts / (counts + k)) - bar_regret / tau
    shares = np.exp(log_score - log_score.max())
    shares = length * shares / shares.sum()
    quotas = np.floor(shares).astype(np.int64)
    remainder = length - quotas.sum()
    quotas[np.argsort(-(shares - quotas), kind="stable")[:remainder]] += 1
    return quotas


# --- 3. Trajectories and returns-to-go -----------------------------------------------------------


def sample_trajectories(
    bins: np.ndarray,
    quotas: np.ndarray,
    regrets: np.ndarray,
    n_trajectories: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Row indices (n_trajectories x sum(quotas)): each trajectory draws ``quotas[b]`` rows of
    bin b with replacement, then is sorted by decreasing regret (increasing y)."""
    members = [np.flatnonzero(bins == b) for b in range(len(quotas))]
    out = np.empty((n_trajectories, int(quotas.sum())), dtype=np.int64)
    for i in range(n_trajectories):
        rows = np.concatenate([rng.choice(m, size=q) for m, q in zip(members, quotas) if q > 0])
        out[i] = rows[np.argsort(-regrets[rows], kind="stable")]
    return out


def returns_to_go(regrets: np.ndarray) -> np.ndarray:
    """``RTG_t = sum_{s >= t} r_s`` along the last axis (same shape as ``regrets``)."""
    return np.flip(np.cumsum(np.flip(regrets, -1), -1), -1).copy()


def window_starts(n_trajectories: int, length: int, context: int) -> np.ndarray:
    """(n_trajectories * length x 2) (trajectory, start) pairs of the training windows.

    As the authors' dataset: start = min(s, length - context) for every step s, so windows
    never run past the end of a trajectory.
    """
    steps = np.minimum(np.arange(length), length - context)
    return np.stack(
        [np.repeat(np.arange(n_trajectories), length), np.tile(steps, n_trajectories)], axis=1
    )


# --- 4. The transformer --------------------------------------------------------------------------


class TrajectoryTransformer(nn.Module):
    """Causal transformer over interleaved (RTG, x) tokens; predicts x_t at the RTG_t token.

    Args:
        in_features: width of a design's feature vector.
        out_features: prediction width (features, or length x vocab logits).
        context: maximum number of (RTG, x) pairs in a window.
        max_start: largest trajectory step a window may start at.
        embed_dim, n_layers, n_heads, dropout: transformer shape.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        context: int,
        max_start: int,
        embed_dim: int = 128,
        n_layers: int = 8,
        n_heads: int = 8,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.rtg_embedding = nn.Sequential(nn.Linear(1, embed_dim), nn.Tanh())
        self.point_embedding = nn.Sequential(nn.Linear(in_features, embed_dim), nn.Tanh())
        self.token_position = nn.Parameter(torch.zeros(1, 2 * context, embed_dim))
        self.step_position = nn.Parameter(torch.zeros(max_start + 1, embed_dim))
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(
            embed_dim,
            n_heads,
            dim_feedforward=4 * embed_dim,
            dropout=dropout,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.blocks = nn.TransformerEncoder(
            layer, n_layers, norm=nn.LayerNorm(embed_dim), enable_nested_tensor=False
        )
        self.head = nn.Linear(embed_dim, out_features)
        # minGPT's initialization of the blocks and the head; the RTG embedding keeps torch's
        # default and the point embedding gets N(0, 0.02) weights, as in the authors' model.
        for module in (self.blocks, self.head):
            for name, p in module.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)
        nn.init.normal_(self.point_embedding[0].weight, std=0.02)

    def forward(
        self, rtgs: torch.Tensor, points: torch.Tensor, starts: torch.Tensor
    ) -> torch.Tensor:
        """Predictions (B x T x out_features) of x_t from RTG_1..RTG_t and x_1..x_{t-1}.

        Args:
            rtgs: returns-to-go (B x T).
            points: features (B x T x in_features); the last row may be a placeholder when
                only the prediction of the last step is needed (causality hides it).
            starts: trajectory step of each window's first pair (B,).
        """
        batch, steps = rtgs.shape
        tokens = torch.stack(
            [self.rtg_embedding(rtgs.unsqueeze(-1)), self.point_embedding(points)], dim=2
        ).reshape(batch, 2 * steps, -1)
        tokens = tokens + self.token_position[:, : 2 * steps] + self.step_position[starts, None]
        mask = nn.Transformer.generate_square_subsequent_mask(2 * steps, device=rtgs.device)
        hidden = self.blocks(self.dropout(tokens), mask=mask, is_causal=True)
        return self.head(hidden[:, 0::2])


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups as minGPT: decay matrices, not biases, norms or positions."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_matrix = p.dim() == 2 and "position" not in name
        (decay if is_matrix and "norm" not in name else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def trajectory_loss(
    predictions: torch.Tensor, features: torch.Tensor, tokens: torch.Tensor | None, vocab: int
) -> torch.Tensor:
    """MSE on features (continuous), or the sum over positions of the mean cross-entropy of the
    tokens (discrete; ``tokens`` B x T x length), as the authors' discrete model."""
    if tokens is None:
        return nn.functional.mse_loss(predictions, features)
    length = tokens.shape[-1]
    logits = predictions.reshape(-1, vocab)
    return length * nn.functional.cross_entropy(logits, tokens.reshape(-1))


# --- 5. Rollout ---------------------------------------------------------------------------------


@torch.no_grad()
def rollout(
    model: nn.Module,
    points: torch.Tensor,
    rtgs: torch.Tensor,
    steps: int,
    target_rtg: float,
    context: int,
    decode: Callable[[torch.Tensor], tuple[np.ndarray, torch.Tensor]],
) -> np.ndarray:
    """Extend R prompts by ``steps`` points each, with the RTG held at ``target_rtg``.

    Each step feeds the last ``context`` (RTG, x) pairs, the new step's x being a placeholder
    (causality hides it), and appends the prediction at the new RTG token.

    Args:
        model: the trained :class:`TrajectoryTransformer` (in eval mode).
        points: prompt features (R x P x F).
        rtgs: prompt returns-to-go (R x P), shifted so that the budget after the prompt is
            ``target_rtg``.
        steps: points to add to every prompt.
        target_rtg: RTG token of every new step.
        context: pairs the model sees at once.
        decode: maps predictions (R x out) to designs (R x ...) and their features (R x F).

    Returns:
        The new designs (R x steps x ...), in the data's format.
    """
    n_rollouts = len(points)
    placeholder = torch.zeros_like(points[:, :1])
    held = torch.full((n_rollouts, 1), target_rtg, dtype=rtgs.dtype, device=rtgs.device)
    designs = []
    for _ in range(steps):
        rtgs = torch.cat([rtgs, held], dim=1)
        start = max(0, rtgs.shape[1] - context)
        window = torch.cat([points, placeholder], dim=1)[:, start:]
        starts = torch.full((n_rollouts,), start, dtype=torch.long, device=rtgs.device)
        design, feature = decode(model(rtgs[:, start:], window, starts)[:, -1])
        designs.append(design)
        points = torch.cat([points, feature.unsqueeze(1)], dim=1)
    return np.stack(designs, axis=1)


# --- 6. The method -------------------------------------------------------------------------------


class BONET(Method):
    """BONET (Mashkaria et al., ICML 2023): roll out a transformer trained on sorted trajectories.

    Args:
        config: :class:`BONETConfig` (paper defaults when ``None``).
        seed: seeds the trajectories, the initialization, dropout and the prompts.
        progress: show a training progress bar on stderr.

    Attributes:
        model_: the trained :class:`TrajectoryTransformer`.
        encoder_: maps designs to normalized features and back.
        regrets_, bins_, quotas_: normalized regrets of the offline rows, their bins, and the
            points each bin gives a trajectory.
        losses_: mean training loss of every epoch.
    """

    config_class = BONETConfig
    resumable = True
    presets = {"paper": {}, "quick": QUICK}

    def _validate(self, n_rows: int) -> None:
        c = self.config_
        if not 0 < c.context_length <= c.trajectory_length:
            raise MatchoptError("BONET needs 0 < context_length <= trajectory_length")
        if not 0 < c.prompt_length < c.trajectory_length:
            raise MatchoptError("BONET needs 0 < prompt_length < trajectory_length")
        if c.embed_dim % c.n_heads:
            raise MatchoptError(f"embed_dim={c.embed_dim} is not divisible by n_heads={c.n_heads}")
        if n_rows < 2:
            raise MatchoptError("BONET needs at least two offline designs")

    def fit(self, data: OfflineData) -> BONET:
        config = self.config_
        self._validate(len(data))
        space = data.space
        device = self.device_
        self.encoder_ = DesignEncoder(space).fit(data.x, data.y)
        features = torch.from_numpy(self.encoder_.encode_x(data.x)).to(device)
        tokens = torch.tensor(data.x, device=device) if space.is_discrete else None
        vocab = space.vocab_size or 0
        out_features = space.shape[0] * vocab if space.is_discrete else features.shape[1]

        # 1-3. Trajectories (row indices) and their returns-to-go.
        self.regrets_ = normalized_regrets(data.y)
        self.bins_ = regret_bins(self.regrets_, config.n_bins)
        self.quotas_ = bin_quotas(
            self.regrets_,
            self.bins_,
            config.n_bins,
            config.trajectory_length,
            config.smoothing,
            config.temperature_percentile,
            config.bin_value,
        )
        rng = np.random.default_rng(self.seed)
        rows = sample_trajectories(
            self.bins_, self.quotas_, self.regrets_, config.n_trajectories, rng
        )
        rtgs = torch.from_numpy(returns_to_go(self.regrets_[rows])).float().to(device)
        rows = torch.from_numpy(rows).to(device)
        windows = window_starts(
            config.n_trajectories, config.trajectory_length, config.context_length
        )
        offsets = torch.arange(config.context_length, device=device)

        # 4. Train the transformer (dropout draws from the forked, seeded torch RNG).
        with seeded_torch_rng(self.seed, device):
            model = TrajectoryTransformer(
                features.shape[1],
                out_features,
                config.context_length,
                config.trajectory_length - config.context_length,
                config.embed_dim,
                config.n_layers,
                config.n_heads,
                config.dropout,
            ).to(device)
            optimizer = adam(
                decay_groups(model, config.weight_decay),
                lr=config.lr,
                betas=(0.9, 0.95),
                decoupled=True,
            )
            self.losses_: list[float] = []
            snapshots = LoopSnapshots(
                self,
                data,
                model=model,
                optimizer=optimizer,
                rng=rng,
                dropout=TorchGlobalRNG(cuda_indices(device)),
            )
            first = snapshots.start(self.losses_, config.epochs)  # a killed run: go on
            bar = tqdm(
                range(first, config.epochs),
                initial=first,
                total=config.epochs,
                desc="BONET training",
                unit="epoch",
                disable=not self.progress,
                leave=False,
            )
            for epoch in bar:
                order = torch.from_numpy(windows[rng.permutation(len(windows))]).to(device)
                total = LossTotal()
                for begin in range(0, len(order), config.batch_size):
                    batch = order[begin : begin + config.batch_size]
                    optimizer.zero_grad()
                    batch_loss = LossTotal()
                    for part in batch.split(config.micro_batch or len(batch)):
                        trajectory, start = part.unbind(1)
                        steps = start[:, None] + offsets  # (B x context) trajectory steps
                        window = rows[trajectory[:, None], steps]  # their offline rows
                        predictions = model(
                            rtgs[trajectory[:, None], steps], features[window], start
                        )
                        loss = trajectory_loss(
                            predictions,
                            features[window],
                            None if tokens is None else tokens[window],
                            vocab,
                        )
                        # The loss is a mean over the part: weighted by its share of the batch,
                        # the parts' gradients add up to the whole batch's.
                        (loss * (len(part) / len(batch))).backward()
                        batch_loss.add(loss, len(part))
                    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    total.add(batch_loss)
                self.losses_.append(total.value() / len(order))
                bar.set_postfix(loss=f"{self.losses_[-1]:.4f}", refresh=False)
                snapshots.save(epoch + 1, config.epochs, losses=list(self.losses_))
            bar.close()
        model.eval()
        self.model_ = model
        self.data_ = data
        return self

    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs from ``ceil(n / (T - prompt_length))`` rollouts (2 for the paper)."""
        self._check_fitted()
        config = self.config_
        device = next(self.model_.parameters()).device  # where fit left it (set_params may move)
        new_steps = config.trajectory_length - config.prompt_length
        n_rollouts = math.ceil(n / new_steps)
        rng = self._search_rng()
        rows = sample_trajectories(self.bins_, self.quotas_, self.regrets_, n_rollouts, rng)
        prompt = rows[:, : config.prompt_length]
        prompt_rtgs = returns_to_go(self.regrets_[prompt]) + config.target_rtg
        features = self.encoder_.encode_x(self.data_.x[prompt.reshape(-1)])
        points = torch.from_numpy(features).view(n_rollouts, config.prompt_length, -1).to(device)
        rtgs = torch.from_numpy(prompt_rtgs).float().to(device)
        designs = rollout(
            self.model_,
            points,
            rtgs,
            new_steps,
            config.target_rtg,
            config.context_length,
            self._decode_prediction,
        )
        return designs.reshape((n_rollouts * new_steps,) + designs.shape[2:])[:n]

    def _decode_prediction(self, prediction: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
        """Designs (data format) and features of one predicted step (n_rollouts x out)."""
        space = self.data_.space
        if space.is_discrete:
            tokens = prediction.view(len(prediction), space.shape[0], -1).argmax(-1)
            design = tokens.cpu().numpy().astype(np.int64)
            feature = torch.from_numpy(self.encoder_.encode_x(design)).to(prediction.device)
            return design, feature
        design = self.encoder_.decode_x(prediction.cpu().numpy())
        return design, prediction
