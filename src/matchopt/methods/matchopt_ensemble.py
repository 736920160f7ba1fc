"""MATCH-OPT ensemble: gradient-matching surrogates, searched along paths that keep their best.

matchopt's own extension of MATCH-OPT (Hoang et al., ICML 2024); not a published method. Read
top to bottom:

1. **Surrogates**: ``n_models`` MLPs, each trained exactly as MATCH-OPT trains its one
   (:meth:`MatchOpt._train_loop`: monotonic trajectories over rank buckets, the line-integral
   matching loss of eq. 13 plus the value regularizer of eq. 14), from its own seed, so members
   differ in initialization and trajectories. ``rank_weight`` adds a ListNet ranking term over
   each trajectory (as RaM, ICLR 2025). Each member trains at most ``max_steps`` optimizer steps:
   the paper's 200 epochs on small data, fewer epochs on large data (TF-Bind-8: 257 trajectories
   an epoch), which bounds the cost of a run.
2. **Score**: ``mean_m g_m(x) - pessimism * std_m g_m(x)`` over the members (the development
   suite chose ``pessimism`` 1).
3. **Search**: Adam ascent of that score from the ``n_starts`` best offline designs,
   ``search_steps`` steps whose length does not depend on the dimension (Adam moves every
   coordinate by about its learning rate, so the rate is ``search_step / sqrt(d)``). Every
   ``path_every`` steps the point is a candidate (decoded to a design, for tokens, and scored
   as decoded). **Selection**: each path keeps its candidate of best score, so each design
   stops where its own path peaks, with no step count tuned per task; the ``n`` best paths give
   the designs (one per path, none equal to an offline row or to another design).
4. **Where the search may go**: continuous designs stay inside the box the offline rows span
   (``clip_to_data``) and within ``trust_radius`` (root-mean-square change per normalized
   feature) of their start; token designs may only hold pairs of neighbouring tokens seen in
   offline rows above the minimum score (``support="pairs"``: a feasibility prior for sequences
   whose infeasible rows score the minimum, as the Ehrlich functions').
5. **Portfolio** (``bold_designs``, off by default): that many of the designs come from a
   second search with less pessimism and a wider per-feature trust region, selected the same
   way among designs not taken yet; the cautious search gives the others.
6. **Options for noisy tables and labs** (off by default): ``average_replicates`` fits on one
   row per distinct design (the mean of its replicates); ``min_distance`` keeps continuous
   designs at least that far apart; ``max_changes`` bounds how many positions a token design
   changes from its path's start.

Nothing here reads an oracle. The search defaults were chosen on the development suite
(docs/suite-rounds.md: the search settings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm.auto import tqdm

from matchopt.config_fields import count, optional_count, step_length
from matchopt.config_fields import pessimism as pessimism_field
from matchopt.config_fields import trust_radius as trust_radius_field
from matchopt.data import OfflineData, top_rows
from matchopt.encodings import DesignEncoder
from matchopt.methods.base import MIN_ROWS, search_starts
from matchopt.methods.matchopt import GradientMatchingConfig, MatchOpt, rank_buckets
from matchopt.methods.wrappers import check_fitted, fit_all_or_nothing, in_default_threads
from matchopt.search import gradient_ascent_path, select_per_path


@dataclass(frozen=True)
class MatchOptEnsembleConfig(GradientMatchingConfig):
    """MATCH-OPT ensemble hyperparameters (training fields as MATCH-OPT's paper config).

    The search defaults (``pessimism``, ``search_step``, ``n_starts``, ``trust_radius``,
    ``support``) are frozen from the search-settings study of docs/suite-rounds.md (``matchopt study
    search-settings`` on the development suite, results/study-search-settings-dev); they were
    chosen there by a criterion written before the study ran.
    """

    n_models: int = count(5)
    """Number of gradient-matching surrogates in the ensemble."""
    max_steps: int | None = optional_count(8000)
    """Most optimizer steps (trajectories) per member; None: all ``epochs``."""
    rank_weight: float = 0.0
    """Weight of the ListNet ranking term over each trajectory; 0: MATCH-OPT's loss only."""
    backend: str = field(default="fused", metadata={"choices": ("fused", "autograd")})
    """How the loss gradient is computed (both exact)."""
    pessimism: float = pessimism_field(1.0)
    """The score is mean - pessimism * std over members (0: the ensemble mean)."""
    n_starts: int = count(512)
    """Search paths, from the best offline designs (at least the number of designs asked)."""
    search_steps: int = count(200, minimum=0)
    """Adam steps of every path."""
    search_step: float = step_length(1.0)
    """Length (L2, normalized features) of one search step: Adam's rate is this / sqrt(d)."""
    path_every: int = count(10)
    """Every this many steps a path's point becomes a candidate design."""
    clip_to_data: bool = True
    """Continuous designs stay in the box the offline rows span (projected after each step)."""
    support: str = field(default="pairs", metadata={"choices": ("none", "pairs")})
    """Token designs: ``pairs`` drops candidates holding a pair of neighbouring tokens that no
    offline row scoring above the offline minimum holds (a feasibility prior); none: no check."""
    trust_radius: float | None = trust_radius_field(0.5)
    """Continuous designs: each path stays within this root-mean-square change per normalized
    feature of its start (projected after each step); None: no bound. Tokens use ``support``."""
    trust_radius_l2: float | None = trust_radius_field(None)
    """Continuous designs: each path also stays within this Euclidean distance (normalized
    features) of its start, whatever the dimension (a bound on the whole move, where
    ``trust_radius`` bounds the move per feature); None: no bound."""
    bold_designs: int = count(0, minimum=0)
    """How many of the designs come from a second, bolder search (a portfolio: the others
    come from the search above); 0: none."""
    bold_pessimism: float = pessimism_field(0.0)
    """The bolder search's ``pessimism``."""
    bold_trust_radius: float | None = trust_radius_field(None)
    """The bolder search's ``trust_radius`` (``trust_radius_l2`` and the box are kept)."""
    max_changes: int | None = optional_count()
    """Token designs: a candidate may differ from its path's start (an offline row) in at most
    this many positions; None: no bound (continuous designs use the trust radii)."""
    average_replicates: bool = False
    """Fit on one row per distinct design, its score the mean of its rows (tables of replicated,
    noisy measurements); False: every row as it is."""
    min_distance: float = field(default=0.0, metadata={"range": (0.0, 1.0)})
    """Continuous designs: no two designs closer than this root-mean-square difference per
    feature, in units of the width of the box the offline rows span (0: any distinct designs)."""


QUICK = {
    "n_models": 2,
    "hidden": (64, 32, 16),
    "epochs": 4,
    "trajectory_length": 32,
    "n_starts": 32,
    "search_steps": 20,
    "path_every": 5,
}


class MatchOptEnsemble(MatchOpt):
    """An ensemble of MATCH-OPT surrogates, searched by pessimistic gradient ascent with a
    trust region chosen per path (module notes).

    Attributes:
        models_: the trained members (a ``ModuleList`` of :class:`~matchopt.models.mlp.MLP`).
        encoder_: maps designs to normalized features and back.
        member_losses_: mean training loss of every epoch, per member.
        member_epochs_: epochs each member trained (``epochs`` cut to ``max_steps``).
    """

    config_class = MatchOptEnsembleConfig
    presets = {"paper": {}, "quick": QUICK}

    @fit_all_or_nothing
    def fit(self, data: OfflineData) -> MatchOptEnsemble:
        """Train ``n_models`` gradient-matching surrogates (Algorithm 1 each, own seed)."""
        self.__dict__.pop("_candidate_cache", None)
        config = self.config_
        if config.average_replicates:
            data = data.replicates_averaged()
        self.encoder_ = DesignEncoder(data.space).fit(data.x, data.y)
        features = torch.from_numpy(self.encoder_.encode_x(data.x)).to(self.device_)
        scores = torch.from_numpy(self.encoder_.encode_y(data.y)).to(self.device_)
        rows = np.arange(len(data))
        epochs = self.member_epochs(config, len(data))
        self.validation_seconds_ = 0.0
        models, self.member_losses_ = [], []
        # One bar for the whole fit: every member's epochs, with the time left for all of them.
        bar = tqdm(
            total=config.n_models * epochs,
            desc="MATCH-OPT ensemble",
            unit="epoch",
            disable=not self.progress,
            leave=False,
        )
        for member in range(config.n_models):
            bar.set_description(f"MATCH-OPT ensemble, member {member + 1} of {config.n_models}")
            model = self._train_loop(
                features,
                scores,
                data,
                rows,
                epochs,
                stage=f"member{member}",
                seed=self.member_seed(member),
                rank_weight=config.rank_weight,
                bar=bar,
            )
            model.eval()
            models.append(model)
            self.member_losses_.append(list(self.losses_))
        bar.close()
        self.models_ = torch.nn.ModuleList(models)
        self.member_epochs_ = epochs
        self.data_ = data
        return self

    def __matchopt_state__(self) -> dict:
        """The model file leaves out the candidates of the last search (recomputed on demand)."""
        state = super().__matchopt_state__()
        state.pop("_candidate_cache", None)
        return state

    def member_seed(self, member: int) -> int:
        """Seed of member ``member``: its own stream of the run's seed."""
        return int(np.random.SeedSequence([self.seed, member]).generate_state(1)[0])

    @staticmethod
    def member_epochs(config: MatchOptEnsembleConfig, n_rows: int) -> int:
        """``epochs``, cut so that a member takes at most ``max_steps`` optimizer steps."""
        if config.max_steps is None:
            return config.epochs
        per_epoch = len(rank_buckets(np.zeros(n_rows), config.trajectory_length)[0])
        return max(1, min(config.epochs, config.max_steps // per_epoch))

    @classmethod
    def min_rows(cls, config: MatchOptEnsembleConfig) -> tuple[int, str]:
        """One row per rank bucket (``trajectory_length``)."""
        length = int(config.trajectory_length)
        return max(MIN_ROWS, length), (
            f"one row per rank bucket, trajectory_length={length}; "
            "a smaller trajectory_length lowers it"
        )

    def proposal_cap(self, n_rows: int) -> int | None:
        """One design per search path, and paths start from distinct offline rows."""
        return n_rows

    def fit_report(self) -> dict:
        """Epochs each member trained and its last training loss."""
        check_fitted(self)
        return {
            "member_epochs": self.member_epochs_,
            "member_final_loss": [losses[-1] if losses else None for losses in self.member_losses_],
        }

    # -- the score ------------------------------------------------------------------------------

    def member_values(self, x: torch.Tensor) -> torch.Tensor:
        """Every member's prediction (n_models x n) of normalized features ``x`` (n x d)."""
        return torch.stack([model(x) for model in self.models_])

    def pessimistic_score(self, x: torch.Tensor, pessimism: float | None = None) -> torch.Tensor:
        """``mean - pessimism * std`` over members (n,), differentiable in ``x`` (``pessimism``:
        the config's when None)."""
        pessimism = self.config_.pessimism if pessimism is None else pessimism
        values = self.member_values(x)
        score = values.mean(0)
        if pessimism and len(self.models_) > 1:
            score = score - pessimism * values.std(0, correction=0)
        return score

    # -- search ---------------------------------------------------------------------------------

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs: pessimistic ascent from the best rows, each path's best candidate;
        ``bold_designs`` of them from the bolder search (module notes, 5)."""
        check_fitted(self)
        config = self.config_
        offline = self.data_.x.reshape(len(self.data_), -1)
        n_bold = min(config.bold_designs, n - 1)
        # One bar for the whole search: both searches' steps (a cached search adds none).
        with tqdm(
            total=config.search_steps * (2 if n_bold else 1),
            desc="MATCH-OPT ensemble search",
            unit="step",
            disable=not self.progress,
            leave=False,
        ) as bar:
            designs = self._select(
                n - n_bold, offline, config.pessimism, config.trust_radius, bar=bar
            )
            if n_bold:
                taken = designs.reshape(len(designs), -1)
                bold = self._select(
                    n_bold, offline, config.bold_pessimism, config.bold_trust_radius, taken, bar
                )
                designs = np.concatenate([designs, bold])
        return designs

    def _select(
        self,
        n: int,
        offline: np.ndarray,
        pessimism: float,
        trust_radius: float | None,
        taken: np.ndarray | None = None,
        bar: tqdm | None = None,
    ) -> np.ndarray:
        """``n`` designs of one search (:func:`select_per_path`): none an offline row or among
        ``taken`` (designs another search gave), none within ``min_distance`` of another."""
        designs, scores, n_paths = self._candidates(n, pessimism, trust_radius, bar)
        if self.config_.support == "pairs" and self.data_.space.is_discrete:
            scores = np.where(self._pairs_seen(designs), scores, -np.inf)
        if self.config_.max_changes is not None and self.data_.space.is_discrete:
            scores = np.where(
                self._changes(designs, n_paths) <= self.config_.max_changes, scores, -np.inf
            )
        excluded = offline if taken is None else np.concatenate([offline, taken])
        continuous = not self.data_.space.is_discrete
        picked = select_per_path(
            designs.reshape(len(designs), -1),
            scores,
            np.tile(np.arange(n_paths), len(designs) // n_paths),
            excluded,
            n,
            min_distance=self.config_.min_distance if continuous else 0.0,
            keep_apart=taken if continuous else None,
        )
        return designs[picked]

    def _candidates(
        self, n: int, pessimism: float, trust_radius: float | None, bar: tqdm | None = None
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Every path's candidates (checkpoint-major), their scores as proposed, and the number
        of paths, of the search with this ``pessimism`` and per-feature ``trust_radius``.

        The last two searches are kept (a portfolio's two), so that selections with another
        ``support`` (a study's grid) do not search again; ``fit`` forgets them.
        """
        config = self.config_
        n_starts = min(max(config.n_starts, n), len(self.data_))
        key = (
            n_starts,
            pessimism,
            config.search_step,
            config.search_steps,
            config.path_every,
            # Both only bound continuous designs: token searches of any value are the same.
            None
            if self.data_.space.is_discrete
            else (config.clip_to_data, trust_radius, config.trust_radius_l2),
        )
        cache = self.__dict__.setdefault("_candidate_cache", {})
        if key in cache:
            cache[key] = cache.pop(key)  # now the most recently used
            return cache[key]
        starts = search_starts(self, n_starts, "topk")
        device = self._model_device()
        lr = config.search_step / math.sqrt(starts.shape[1])
        low = high = radius = radius_l2 = None
        if not self.data_.space.is_discrete:
            radius, radius_l2 = trust_radius, config.trust_radius_l2
            if config.clip_to_data:
                features = torch.from_numpy(self.encoder_.encode_x(self.data_.x)).to(device)
                low, high = features.min(0).values, features.max(0).values

        def score(x: torch.Tensor) -> torch.Tensor:
            return self.pessimistic_score(x, pessimism)

        path = gradient_ascent_path(
            score,
            torch.from_numpy(starts).to(device),
            config.search_steps,
            lr,
            every=config.path_every,
            low=low,
            high=high,
            radius=radius,
            radius_l2=radius_l2,
            bar=bar,
        )  # checkpoints x paths x d, the starts first
        n_points, n_paths, d = path.shape
        designs = self.encoder_.decode_x(path.reshape(-1, d).cpu().numpy())
        with torch.no_grad():  # score designs as proposed (tokens: decoded, then encoded)
            as_proposed = torch.from_numpy(self.encoder_.encode_x(designs)).to(device)
            scores = score(as_proposed).cpu().numpy()
        if len(cache) == 2:  # drop the least recently used
            del cache[next(iter(cache))]
        cache[key] = (designs, scores, n_paths)
        return cache[key]

    def _changes(self, designs: np.ndarray, n_paths: int) -> np.ndarray:
        """Positions (n,) in which each candidate (checkpoint-major) differs from its path's
        start, the offline row it started from (the paths start from the best rows)."""
        starts = self.data_.x[top_rows(self.data_.y, n_paths)].reshape(n_paths, -1)
        flat = designs.reshape(-1, n_paths, starts.shape[1])
        return (flat != starts[None]).sum(axis=2).reshape(-1)

    def _pairs_seen(self, designs: np.ndarray) -> np.ndarray:
        """Whether every pair of neighbouring tokens of each design (n,) occurs in an offline
        row that scores above the offline minimum (at any position)."""
        x, y, k = self.data_.x, self.data_.y, self.data_.space.vocab_size
        good = x[y > y.min()] if (y > y.min()).any() else x
        seen = np.zeros((k, k), dtype=bool)
        seen[good[:, :-1].reshape(-1), good[:, 1:].reshape(-1)] = True
        designs = designs.reshape(len(designs), -1)
        return seen[designs[:, :-1], designs[:, 1:]].all(axis=1)

    def predict(self, designs: np.ndarray) -> np.ndarray:
        """The ensemble mean (n,) of designs, in the units of the offline y."""
        check_fitted(self)
        designs = self.data_.space.validate(designs)
        x = torch.from_numpy(self.encoder_.encode_x(designs)).to(self._model_device())
        with torch.no_grad():
            return self.encoder_.decode_y(self.member_values(x).mean(0).cpu().numpy())

    def _model_device(self) -> torch.device:
        return next(self.models_.parameters()).device
