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
4. **Model**: a causal transformer (pre-LayerNorm layers as ``torch.nn.TransformerEncoderLayer``
   with a causal mask; embedding 128, 8 layers, 8 heads, dropout 0.1) over interleaved tokens
   ``RTG_1, x_1, RTG_2, x_2, ...`` in windows of 64 pairs; the output at ``RTG_t`` predicts
   ``x_t`` (MSE on features; a cross-entropy per token position for discrete designs). AdamW
   1e-4, weight decay 0.1, 75 epochs.
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

* the layers are those of ``torch.nn.TransformerEncoderLayer`` (pre-LayerNorm, GELU,
  feed-forward 4 x 128; dropout also inside the feed-forward block) instead of minGPT's blocks,
  written out with the seed dimension first (:class:`CausalBlock`): seeds then train as one
  batch (:func:`~matchopt.methods.training.fit_seeds`), each seed's initial weights and dropout
  masks drawn from its own generators, so that a batched seed trains as its run alone.
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

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from matchopt.config_fields import count, learning_rate, optional_count
from matchopt.data import OfflineData
from matchopt.encodings import DesignEncoder
from matchopt.errors import MatchoptError
from matchopt.methods.base import search_rng
from matchopt.methods.engine import TrainingRun
from matchopt.methods.seed_batch import end_seed_epoch, seed_loop
from matchopt.methods.training import Resumable, SeedBatchable
from matchopt.methods.wrappers import check_fitted, in_default_threads
from matchopt.models import LossTotal, adam
from matchopt.models.stacked import (
    SeedDropout,
    SeedLayerNorm,
    SeedLinear,
    check_shape,
    clip_seed_grad_norms,
    module_tensor,
)
from matchopt.state_checks import check_int


@dataclass(frozen=True)
class BONETConfig:
    """BONET hyperparameters; defaults are baselines.md's (the authors' TF-Bind-8 scripts)."""

    n_bins: int = count(64)
    """Equal-width regret bins."""
    trajectory_length: int = count(128, minimum=2)
    """Points per trajectory."""
    n_trajectories: int = count(800)
    """Training trajectories."""
    smoothing: float = 0.03
    """K = smoothing * N in the bin score n_b / (n_b + K) * exp((ybar_b - 1) / tau)."""
    temperature_percentile: float = 90.0
    """tau = 1 - this percentile of the regrets."""
    bin_value: str = field(default="mean", metadata={"choices": ("mean", "center")})
    """ybar_b: mean normalized y of the bin (baselines.md) or the bin centre (authors' code)."""
    embed_dim: int = count(128)
    """Transformer width."""
    n_layers: int = count(8)
    """Transformer layers."""
    n_heads: int = count(8)
    """Attention heads."""
    context_length: int = count(64)
    """(RTG, x) pairs the transformer sees at once."""
    dropout: float = 0.1
    """Dropout in the embeddings and every transformer layer."""
    epochs: int = count(75)
    """Training epochs (each visits every trajectory window once)."""
    batch_size: int = count(128)
    """Windows per optimizer step."""
    lr: float = learning_rate(1e-4)
    """AdamW learning rate."""
    weight_decay: float = 0.1
    """AdamW weight decay (linear and attention weights only)."""
    prompt_length: int = count(64)
    """Offline points that prompt each rollout; the rollout adds trajectory_length - this."""
    target_rtg: float = 0.0
    """Regret budget left after the prompt, held during the rollout."""
    micro_batch: int | None = optional_count()
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


class CausalBlock(nn.Module):
    """One pre-LayerNorm transformer layer of S seeds (``nn.TransformerEncoderLayer`` with
    ``norm_first=True``, GELU, feed-forward 4 x width, a causal mask), written out so that
    each seed's dropout masks come from its own generator:
    ``h + drop(attention(norm1(h)))``, then ``h + drop(W2 drop(gelu(W1 norm2(h))))``, the
    attention weights dropped too.
    """

    def __init__(self, n_seeds: int, width: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = SeedLayerNorm(n_seeds, width)
        self.qkv = SeedLinear(n_seeds, width, 3 * width)
        self.projection = SeedLinear(n_seeds, width, width)
        self.norm2 = SeedLayerNorm(n_seeds, width)
        self.expand = SeedLinear(n_seeds, width, 4 * width)
        self.contract = SeedLinear(n_seeds, 4 * width, width)

    def __matchopt_check__(self) -> None:
        """Checks of a block read from a model file (:mod:`matchopt.state`); its layers have
        checked themselves."""
        heads = check_int(self, "n_heads", 1)
        seeds, _, width = module_tensor(self, "norm1.weight").shape
        if width % heads:
            raise MatchoptError(f"width {width} is not divisible by n_heads={heads}")
        for name, shape in [
            ("norm2.weight", (seeds, 1, width)),
            ("qkv.weight", (seeds, width, 3 * width)),
            ("projection.weight", (seeds, width, width)),
            ("expand.weight", (seeds, width, 4 * width)),
            ("contract.weight", (seeds, 4 * width, width)),
        ]:
            check_shape(self, name, shape)

    def forward(self, h: torch.Tensor, future: torch.Tensor, drop: Callable) -> torch.Tensor:
        """``h`` (S x B x L x width); ``future`` (L x L) is True above the diagonal."""
        seeds, batch, length, width = h.shape
        heads = self.n_heads
        q, k, v = (
            self.qkv(self.norm1(h))
            .view(seeds, batch, length, 3, heads, width // heads)
            .permute(3, 0, 1, 4, 2, 5)  # 3 x S x B x heads x L x head width
        )
        scores = (q * (width // heads) ** -0.5) @ k.transpose(-1, -2)
        attention = drop(scores.masked_fill_(future, float("-inf")).softmax(-1))
        mixed = (attention @ v).transpose(2, 3).reshape(seeds, batch, length, width)
        h = h + drop(self.projection(mixed))
        hidden = drop(nn.functional.gelu(self.expand(self.norm2(h))))
        return h + drop(self.contract(hidden))


class TrajectoryTransformer(nn.Module):
    """Causal transformer over interleaved (RTG, x) tokens; predicts x_t at the RTG_t token.

    It holds the transformers of S seeds (every parameter with the seed dimension first; a
    single run is S = 1), each initialized from its own seed, so that a batch of seeds trains
    in one pass per step and seed k's slice trains as seed k alone.

    Args:
        in_features: width of a design's feature vector.
        out_features: prediction width (features, or length x vocab logits).
        context: maximum number of (RTG, x) pairs in a window.
        max_start: largest trajectory step a window may start at.
        embed_dim, n_layers, n_heads: transformer shape.
        seeds: one per transformer; seed k's initial weights are drawn from a CPU generator
            seeded with ``seeds[k]`` (the same start on every device).
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
        seeds: Sequence[int] = (0,),
    ):
        super().__init__()
        n = len(seeds)
        self.rtg_embedding = SeedLinear(n, 1, embed_dim)
        self.point_embedding = SeedLinear(n, in_features, embed_dim)
        self.token_position = nn.Parameter(torch.zeros(n, 1, 2 * context, embed_dim))
        self.step_position = nn.Parameter(torch.zeros(n, max_start + 1, embed_dim))
        self.blocks = nn.ModuleList(CausalBlock(n, embed_dim, n_heads) for _ in range(n_layers))
        self.norm = SeedLayerNorm(n, embed_dim)
        self.head = SeedLinear(n, embed_dim, out_features)
        with torch.no_grad():
            for k, seed in enumerate(seeds):
                self._initialize(k, torch.Generator().manual_seed(seed))

    def _initialize(self, k: int, generator: torch.Generator) -> None:
        """Seed k's initial weights: minGPT's N(0, 0.02) matrices and zero biases in the blocks
        and the head, a N(0, 0.02) point embedding, torch's default ``nn.Linear`` start
        U(-1/sqrt(fan in), 1/sqrt(fan in)) for the RTG embedding and the point embedding's bias
        (as the authors' model); positions start at 0, norms at (1, 0)."""

        def uniform(p: torch.Tensor, fan_in: int) -> None:
            bound = fan_in**-0.5
            p[k] = torch.rand(p.shape[1:], generator=generator) * (2 * bound) - bound

        def normal(p: torch.Tensor) -> None:
            p[k] = torch.randn(p.shape[1:], generator=generator) * 0.02

        uniform(self.rtg_embedding.weight, 1)
        uniform(self.rtg_embedding.bias, 1)
        normal(self.point_embedding.weight)
        uniform(self.point_embedding.bias, self.point_embedding.weight.shape[1])
        for linear in self.linears()[2:]:
            normal(linear.weight)
            linear.bias[k] = 0.0

    def __matchopt_check__(self) -> None:
        """Checks of a transformer read from a model file (:mod:`matchopt.state`): its layers
        and blocks have checked themselves; here they must fit each other."""
        seeds, _, width = module_tensor(self, "norm.weight").shape
        in_features = module_tensor(self, "point_embedding.weight").shape[1]
        out_features = module_tensor(self, "head.weight").shape[2]
        tokens = module_tensor(self, "token_position").shape[2]
        starts = module_tensor(self, "step_position").shape[1]
        for name, shape in [
            ("rtg_embedding.weight", (seeds, 1, width)),
            ("point_embedding.weight", (seeds, in_features, width)),
            ("token_position", (seeds, 1, tokens, width)),
            ("step_position", (seeds, starts, width)),
            ("head.weight", (seeds, width, out_features)),
        ]:
            check_shape(self, name, shape)
        if tokens % 2:
            raise MatchoptError(f"token_position holds {tokens} tokens, not (RTG, x) pairs")
        blocks = self._modules.get("blocks")
        if not isinstance(blocks, nn.ModuleList) or not all(
            isinstance(b, CausalBlock) for b in blocks
        ):
            raise MatchoptError("blocks is not a list of CausalBlock layers")
        for k in range(len(blocks)):
            check_shape(self, f"blocks.{k}.norm1.weight", (seeds, 1, width))

    def linears(self) -> list[SeedLinear]:
        """Every linear map: the two embeddings, the blocks' (in order) and the head."""
        return [m for m in self.modules() if isinstance(m, SeedLinear)]

    def forward(
        self,
        rtgs: torch.Tensor,
        points: torch.Tensor,
        starts: torch.Tensor,
        drop: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Predictions (S x B x T x out_features) of x_t from RTG_1..RTG_t and x_1..x_{t-1}.

        Args:
            rtgs: returns-to-go (S x B x T).
            points: features (S x B x T x in_features); the last row may be a placeholder when
                only the prediction of the last step is needed (causality hides it).
            starts: trajectory step of each window's first pair (S x B).
            drop: dropout (a :class:`~matchopt.models.stacked.SeedDropout`) in training; None
                for none.
        """
        drop = drop or (lambda x: x)
        seeds, batch, steps = rtgs.shape
        tokens = torch.stack(
            [
                torch.tanh(self.rtg_embedding(rtgs.unsqueeze(-1))),
                torch.tanh(self.point_embedding(points)),
            ],
            dim=3,
        ).reshape(seeds, batch, 2 * steps, -1)
        own = torch.arange(seeds, device=rtgs.device)[:, None]
        tokens = (
            tokens
            + self.token_position[:, :, : 2 * steps]
            + self.step_position[own, starts].unsqueeze(2)
        )
        future = torch.ones(2 * steps, 2 * steps, dtype=torch.bool, device=rtgs.device).triu(1)
        h = drop(tokens)
        for block in self.blocks:
            h = block(h, future, drop)
        return self.head(self.norm(h)[:, :, 0::2])

    @torch.no_grad()
    def seed_slice(self, k: int) -> TrajectoryTransformer:
        """Seed k's transformer alone (S = 1), a copy."""
        one = copy.deepcopy(self)
        for p in one.parameters():
            p.data = p.data[k : k + 1].clone()
        return one


def dropout_seed(seed: int) -> int:
    """Seed of a run's dropout generator: a stream apart from its initialization's (``seed``)."""
    return int(np.random.SeedSequence([seed, 2]).generate_state(1)[0])


def decay_groups(model: TrajectoryTransformer, weight_decay: float) -> list[dict]:
    """AdamW parameter groups as minGPT: decay the linear maps' matrices, not their biases, the
    norms or the positions."""
    matrices = {id(linear.weight) for linear in model.linears()}
    decay = [p for p in model.parameters() if id(p) in matrices]
    no_decay = [p for p in model.parameters() if id(p) not in matrices]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def trajectory_loss(
    predictions: torch.Tensor, features: torch.Tensor, tokens: torch.Tensor | None, vocab: int
) -> torch.Tensor:
    """Each seed's loss (S,): MSE on features (continuous), or the sum over positions of the
    mean cross-entropy of the tokens (discrete; ``tokens`` S x B x T x length), as the authors'
    discrete model. ``predictions`` and ``features`` are S x B x T x ...."""
    seeds = predictions.shape[0]
    if tokens is None:
        return (predictions - features).pow(2).reshape(seeds, -1).mean(1)
    length = tokens.shape[-1]
    entropy = nn.functional.cross_entropy(
        predictions.reshape(-1, vocab), tokens.reshape(-1), reduction="none"
    )
    return length * entropy.view(seeds, -1).mean(1)


# --- 5. Rollout ---------------------------------------------------------------------------------


@torch.no_grad()
def rollout(
    predict: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
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
        predict: one trained transformer, without dropout, on windows of R rollouts: returns-to-go
            (R x T), points (R x T x F) and start steps (R,) -> predictions (R x T x out).
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
        design, feature = decode(predict(rtgs[:, start:], window, starts)[:, -1])
        designs.append(design)
        points = torch.cat([points, feature.unsqueeze(1)], dim=1)
    return np.stack(designs, axis=1)


# --- 6. The method -------------------------------------------------------------------------------


class BONET(Resumable, SeedBatchable):
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

    @classmethod
    def _train(cls, methods: Sequence[BONET], data: OfflineData, run: TrainingRun) -> None:
        """Train the transformers of ``methods`` (one seed each) as one seed stack."""
        first = methods[0]
        config = first.config_
        first._validate(len(data))
        space = data.space
        device = first.device_
        encoder = DesignEncoder(space).fit(data.x, data.y)
        features = torch.from_numpy(encoder.encode_x(data.x)).to(device)
        tokens = torch.tensor(data.x, device=device) if space.is_discrete else None
        vocab = space.vocab_size or 0
        out_features = space.shape[0] * vocab if space.is_discrete else features.shape[1]

        # 1-3. Trajectories (row indices) and their returns-to-go, per seed.
        regrets, bins, quotas = first._regret_quotas(data.y)
        rngs = [np.random.default_rng(m.seed) for m in methods]
        trajectories = first._trajectories(regrets, bins, quotas, rngs)
        windows = window_starts(
            config.n_trajectories, config.trajectory_length, config.context_length
        )

        # 4. Train the transformers; each seed's dropout draws from its own generator.
        model = first._new_model(features.shape[1], out_features, [m.seed for m in methods])
        dropout_generators = [
            torch.Generator(device=device).manual_seed(dropout_seed(m.seed)) for m in methods
        ]
        drop = SeedDropout(config.dropout, dropout_generators)
        optimizer = adam(
            decay_groups(model, config.weight_decay),
            lr=config.lr,
            betas=(0.9, 0.95),
            decoupled=True,
        )
        snapshots, losses, bar = seed_loop(
            run, data, "BONET", len(methods), config.epochs, first.progress,
            model=model, optimizer=optimizer, **{f"rng{k}": r for k, r in enumerate(rngs)},
            **{f"dropout{k}": g for k, g in enumerate(dropout_generators)},
        )  # fmt: skip
        for epoch in bar:
            orders = np.stack([windows[r.permutation(len(windows))] for r in rngs])
            orders = torch.from_numpy(orders).to(device)  # S x windows x (trajectory, start)
            totals = [LossTotal() for _ in methods]
            for begin in range(0, orders.shape[1], config.batch_size):
                batch = orders[:, begin : begin + config.batch_size]
                batch_losses = first._batch_step(
                    model, optimizer, drop, batch, trajectories, features, tokens, vocab
                )
                for total, batch_loss in zip(totals, batch_losses):
                    total.add(batch_loss)
            end_seed_epoch(snapshots, losses, totals, len(windows), bar, epoch + 1, config.epochs)
        bar.close()
        model.eval()
        for k, method in enumerate(methods):
            method.encoder_ = encoder
            method.regrets_, method.bins_, method.quotas_ = regrets, bins, quotas
            method.model_ = model if len(methods) == 1 else model.seed_slice(k)
            method.losses_ = losses[k]
            method.data_ = data

    def _regret_quotas(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The offline rows' normalized regrets, their bins and each bin's quota of trajectory
        steps (module notes, 1-2)."""
        config = self.config_
        regrets = normalized_regrets(y)
        bins = regret_bins(regrets, config.n_bins)
        quotas = bin_quotas(
            regrets,
            bins,
            config.n_bins,
            config.trajectory_length,
            config.smoothing,
            config.temperature_percentile,
            config.bin_value,
        )
        return regrets, bins, quotas

    def _trajectories(
        self, regrets: np.ndarray, bins: np.ndarray, quotas: np.ndarray, rngs: list
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each seed's trajectories (row indices, S x trajectories x T, drawn from its own
        ``rngs`` entry) and their returns-to-go, on the device."""
        count = self.config_.n_trajectories
        rows = np.stack([sample_trajectories(bins, quotas, regrets, count, r) for r in rngs])
        device = self.device_
        rtgs = torch.from_numpy(returns_to_go(regrets[rows])).float().to(device)
        return torch.from_numpy(rows).to(device), rtgs

    def _new_model(
        self, in_features: int, out_features: int, seeds: list[int]
    ) -> TrajectoryTransformer:
        """The seeds' untrained transformers, as one stack, on the device."""
        config = self.config_
        return TrajectoryTransformer(
            in_features,
            out_features,
            config.context_length,
            config.trajectory_length - config.context_length,
            config.embed_dim,
            config.n_layers,
            config.n_heads,
            seeds=seeds,
        ).to(self.device_)

    def _batch_step(
        self,
        model: TrajectoryTransformer,
        optimizer: torch.optim.Optimizer,
        drop: SeedDropout,
        batch: torch.Tensor,
        trajectories: tuple[torch.Tensor, torch.Tensor],
        features: torch.Tensor,
        tokens: torch.Tensor | None,
        vocab: int,
    ) -> list[LossTotal]:
        """One optimizer step on a batch of windows per seed (S x B x (trajectory, start)), in
        micro-batches; each seed's mean loss over the batch."""
        config = self.config_
        rows, rtgs = trajectories
        offsets = torch.arange(config.context_length, device=batch.device)
        own = torch.arange(batch.shape[0], device=batch.device)[:, None, None]  # seed slices
        optimizer.zero_grad()
        batch_losses = [LossTotal() for _ in range(batch.shape[0])]
        for part in batch.split(config.micro_batch or batch.shape[1], dim=1):
            trajectory, start = part.unbind(-1)  # S x B each
            steps = start[..., None] + offsets  # S x B x context trajectory steps
            window = rows[own, trajectory[..., None], steps]  # their offline rows
            points = features[window]  # the inputs, and the targets one token later
            predictions = model(rtgs[own, trajectory[..., None], steps], points, start, drop)
            loss = trajectory_loss(
                predictions, points, None if tokens is None else tokens[window], vocab
            )
            # Each seed's loss is a mean over the part: weighted by its share of the batch, the
            # parts' gradients add up to the whole batch's; summed over the seeds, each seed's
            # slice gets its own gradient.
            (loss * (part.shape[1] / batch.shape[1])).sum().backward()
            for total, seed_loss in zip(batch_losses, loss):
                total.add(seed_loss, part.shape[1])
        clip_seed_grad_norms(list(model.parameters()), 1.0)
        optimizer.step()
        return batch_losses

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs from ``ceil(n / (T - prompt_length))`` rollouts (2 for the paper)."""
        check_fitted(self)
        config = self.config_
        device = next(self.model_.parameters()).device  # where fit left it (set_params may move)
        new_steps = config.trajectory_length - config.prompt_length
        n_rollouts = math.ceil(n / new_steps)
        rng = search_rng(self)
        rows = sample_trajectories(self.bins_, self.quotas_, self.regrets_, n_rollouts, rng)
        prompt = rows[:, : config.prompt_length]
        prompt_rtgs = returns_to_go(self.regrets_[prompt]) + config.target_rtg
        features = self.encoder_.encode_x(self.data_.x[prompt.reshape(-1)])
        points = torch.from_numpy(features).view(n_rollouts, config.prompt_length, -1).to(device)
        rtgs = torch.from_numpy(prompt_rtgs).float().to(device)
        designs = rollout(
            lambda r, x, s: self.model_(r[None], x[None], s[None])[0],
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
