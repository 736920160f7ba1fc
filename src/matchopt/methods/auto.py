"""A per-table choice among complementary methods, judged on the user's table alone.

No single method leads on every kind of table: an ensemble of gradient-matching surrogates
(``matchopt-ens-mix``) leads on the development suite, CMA-ES and gradient ascent on learned
ensembles on others. This method fits a small pool of them and lets the table say which one to
trust, by a pseudo-offline protocol (as the validation metrics measured by Beckham et al.,
"Exploring validation metrics for offline model-based optimisation with diffusion models",
TMLR 2024: a reward under a model fitted on more data than the candidate saw). Read top to
bottom:

1. **Pool**: the registered methods named in ``pool``, each with the run's seed and the
   ``member_preset``. A member that cannot run on the table is left out, with the reason
   (CMA-ES above ``cma_max_features`` features: its covariance is d x d per run).
2. **Pseudo-offline fits**: the table is split by design (identical rows are replicates of
   one design and never fall on both sides): the designs whose mean score is above the
   ``judge_quantile`` of the designs' mean scores are held out (the table's top designs; where
   that quantile is the best mean, the designs at it), and every member is fitted on the rows
   of the other designs and proposes ``judged_designs`` designs.
3. **Full fits**: every member is fitted on all rows. Members with the same Gaussian-ensemble
   training fields share one ensemble (CMA-ES and Ens-Mean-Small do).
4. **Judge**: every distinct full-data surrogate (members sharing one ensemble count once), its
   predictions standardized by the table's scores; a design's judge score is their mean minus
   ``pessimism`` times their spread (far designs, where the surrogates disagree, score low).
   Token designs holding a pair of neighbouring tokens that no row above the minimum holds
   score the table's minimum (the feasibility prior of ``matchopt-ens``'s
   ``support="pairs"``). Judge scores are only compared with each other (steps 5 and 6).
5. **Choice**: each pseudo-offline design scores the share of the held-out top designs whose
   judge score (the same judge, on the design itself) it reaches or exceeds, from 0 to 1; a
   member's protocol score is the mean over its designs, from 0 to 1 (how many of the table's
   best designs, which its fit never saw, its proposals reach). The member with the highest
   protocol score is chosen (ties: pool order). The scale is free of the table's units and
   bounded: a design far beyond the data, where the judge's standardized score is unbounded,
   counts at most 1, as one that reaches the best held-out design.
6. **Designs**: the chosen member's full-data fit proposes twice the designs asked (as many as
   it can), ranked by the judge, and kept greedily so that no two continuous designs lie within
   ``min_distance`` of each other (root-mean-square difference per feature over the widths of
   the box the rows span) and no two token designs are equal.

Everything is seeded: the same table and seed give the same choice and designs. With a snapshot
file (:meth:`~matchopt.methods.training.Resumable.resume_from`, ``matchopt run``, ``bench``),
every fit of steps 2 and 3 keeps its own training snapshots beside it and the shared Gaussian
ensembles are kept in a folder beside it, so a killed run continues where it stopped and makes
the same choice and designs. Nothing here reads an oracle.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from matchopt.checkpoints import TrainingCheckpoint, is_integer, shown
from matchopt.config_fields import count
from matchopt.config_fields import pessimism as pessimism_field
from matchopt.data import OfflineData, design_groups
from matchopt.errors import MatchoptError
from matchopt.methods.base import (
    MIN_ROWS,
    Method,
    build_config,
    has_surrogate,
    resumed_seconds,
)
from matchopt.methods.cma_es import CmaEs
from matchopt.methods.engine import RunContext, TrainingRun
from matchopt.methods.registry import SINGLE_METHODS, build_method, get_entry
from matchopt.methods.training import Resumable
from matchopt.methods.wrappers import check_fitted, fit_all_or_nothing, in_default_threads
from matchopt.search import box_widths, scaled_distances
from matchopt.state_checks import check_int, check_number, check_str, check_type, is_number


@dataclass(frozen=True)
class AutoConfig:
    """Per-table choice hyperparameters (module notes)."""

    pool: str = "matchopt-ens-mix,cma-es,ens-mean-small"
    """Registered methods to choose among, separated by commas (the first wins ties)."""
    member_preset: str = field(default="paper", metadata={"choices": ("paper", "quick")})
    """The preset every member runs with."""
    judge_quantile: float = field(default=0.8, metadata={"range": (0.1, 0.95)})
    """Members are judged after a fit without the designs whose mean score is above this
    quantile of the designs' mean scores (the held-out top designs they must reach)."""
    judged_designs: int = count(128)
    """Designs each pseudo-offline fit proposes for the judge."""
    pessimism: float = pessimism_field(1.0)
    """The judge score is the surrogates' mean minus this times their spread (it ranks the
    members' designs against the held-out top designs)."""
    min_distance: float = field(default=0.01, metadata={"range": (0.0, 1.0)})
    """No two continuous designs closer than this (root-mean-square difference per feature, in
    units of the widths of the box the rows span)."""
    cma_max_features: int = count(2048)
    """CMA-ES is left out of the pool above this many features (tokens: length x vocabulary)."""


QUICK = {"member_preset": "quick", "judged_designs": 16}


def pseudo_offline_split(x: np.ndarray, y: np.ndarray, quantile: float) -> np.ndarray:
    """Which rows the pseudo-offline fits hold out (module notes, 2), decided per design.

    Args:
        x: the designs of the rows (n x shape); equal rows are replicates of one design.
        y: their scores (n,).
        quantile: designs whose mean score is above this quantile of the designs' mean scores
            are held out; where that quantile is the best mean (tables of few score levels),
            the designs at it.

    Returns:
        A boolean mask (n,), True for held-out rows; the rows of one design share one value.
    """
    groups = design_groups(x)
    means = np.bincount(groups, weights=np.asarray(y, dtype=np.float64)) / np.bincount(groups)
    cut = np.quantile(means, quantile)
    held = means > cut if cut < means.max() else means >= cut
    return held[groups]


def _finished_fits(checkpoint: TrainingCheckpoint | None, fits: int) -> int:
    """How many of a pool's ``fits`` an earlier sitting of this run finished (its snapshot's
    count; 0 without one). Loading it gives the checkpoint those sittings' seconds."""
    if checkpoint is None:
        return 0

    def check(state: dict[str, Any]) -> str | None:
        count = state.get("finished")
        if not is_integer(count) or not 0 <= count <= fits:
            return f"snapshot count of finished fits {shown(count)} is not one of 0..{fits}"
        return None

    saved = checkpoint.load("main", check)
    return int(saved["finished"]) if saved is not None else 0


def protocol_score(judged: np.ndarray, held_out: np.ndarray) -> float:
    """A member's protocol score (module notes, 5), from 0 to 1.

    Args:
        judged: judge scores (m,) of the member's pseudo-offline designs.
        held_out: judge scores (k,) of the held-out top designs, k >= 1.

    Returns:
        The mean over the member's designs of the share of ``held_out`` each reaches or exceeds.
    """
    ranked = np.sort(np.asarray(held_out, dtype=np.float64))
    reached = np.searchsorted(ranked, np.asarray(judged, dtype=np.float64), side="right")
    return float(np.mean(reached / len(ranked)))


class AutoChoice(Resumable):
    """Fits a pool of methods, judges them on the table (module notes), proposes with the best.

    Attributes:
        members_: the pool members fitted on all rows, by name.
        choice_: the name of the member whose designs :meth:`propose` returns.
        protocol_: each member's protocol score, from 0 to 1 (the mean share of the held-out
            top designs that its pseudo-offline designs reach), by name; members left out are
            absent (all of them where the split leaves too few rows to fit every member).
        held_out_designs_: how many designs the pseudo-offline split held out (the top ones).
        lower_designs_: how many designs the pseudo-offline fits saw.
        left_out_: members left out of the pool, with the reason.
        earlier_seconds_: seconds the members' fits trained in earlier sittings, where this fit
            continued a killed run (0: one sitting).
    """

    config_class = AutoConfig
    presets = {"paper": {}, "quick": QUICK}

    def pool_names(self) -> list[str]:
        """The pool's method names, checked against the registry of single methods."""
        names = [name.strip() for name in self.config_.pool.split(",") if name.strip()]
        if not names:
            raise MatchoptError("pool names no method")
        for name in names:
            if name not in SINGLE_METHODS:  # unknown, or a per-table choice itself
                raise MatchoptError(
                    f"pool member {name!r} is not a single method; choose among "
                    f"{', '.join(SINGLE_METHODS)}"
                )
        if len(set(names)) != len(names):
            raise MatchoptError(f"pool names a method twice: {self.config_.pool}")
        return names

    def _member(
        self, name: str, folder: str | os.PathLike | None = None, stage: str | None = None
    ) -> Method:
        """Pool member ``name``, built with the member preset; with ``folder``, its Gaussian
        ensembles shared through there; with ``stage`` and a snapshot file in this run's
        context, its fit keeps its own snapshots in the file of that stage
        (:meth:`~matchopt.checkpoints.TrainingCheckpoint.part`)."""
        entry = get_entry(name, SINGLE_METHODS)
        member = build_method(
            entry, self.config_.member_preset, seed=self.seed, progress=self.progress,
            device=self.device,
        )  # fmt: skip
        snapshot = self.run.snapshot
        if folder is not None:
            part = snapshot.part(stage) if snapshot is not None and stage is not None else None
            member.run = RunContext(snapshot=part, ensemble_folder=Path(folder))
        return member

    def _left_out(self, name: str, data: OfflineData) -> str | None:
        """Why member ``name`` cannot run on ``data`` (None: it can)."""
        features = int(np.prod(data.space.shape)) * (data.space.vocab_size or 1)
        cls = get_entry(name, SINGLE_METHODS).cls
        if cls is CmaEs and features > self.config_.cma_max_features:
            return f"{features} features > cma_max_features {self.config_.cma_max_features}"
        return None

    @fit_all_or_nothing
    def fit(self, data: OfflineData) -> AutoChoice:
        """The split, pseudo-offline fits, full fits, the judge and the choice (module notes,
        2-5)."""
        config = self.config_
        names = self.pool_names()
        self.left_out_ = {n: why for n in names if (why := self._left_out(n, data)) is not None}
        names = [n for n in names if n not in self.left_out_]
        if not names:
            raise MatchoptError(f"no pool member can run on this table: {self.left_out_}")
        groups = design_groups(data.x)
        held = pseudo_offline_split(data.x, data.y, config.judge_quantile)
        self.held_out_designs_ = len(np.unique(groups[held]))
        self.lower_designs_ = len(np.unique(groups[~held]))
        top = data.x[held][np.unique(groups[held], return_index=True)[1]]  # a row per design
        lower = self._lower_rows(data, held)
        with tempfile.TemporaryDirectory(prefix="matchopt-auto-") as scratch:
            judged = self._fit_pool(names, lower, data, scratch)
        self.data_ = data
        self._fit_judge(data)
        reach = self.judge(top) if judged else None
        self.protocol_ = {name: protocol_score(self.judge(d), reach) for name, d in judged.items()}
        self.choice_ = max(names, key=lambda n: self.protocol_.get(n, -np.inf))
        return self

    def _fit_pool(
        self, names: list[str], lower: OfflineData | None, data: OfflineData, scratch: str
    ) -> dict[str, np.ndarray]:
        """Steps 2 and 3: each member's pseudo-offline fit and designs (returned by name), then
        its fit on all rows (``members_``); Gaussian ensembles shared through one folder.

        With a snapshot file, each fit keeps snapshots of its own (stages ``lower<k>`` and
        ``full<k>``), the shared ensembles stay in the snapshot's shared folder, and this run's
        own snapshot counts the fits finished, with their seconds over all sittings;
        ``earlier_seconds_`` holds those of the fit a kill cut short."""
        checkpoint = TrainingRun.of([self]).checkpoint(data)
        shared = checkpoint.shared_folder if checkpoint is not None else scratch
        folder = self.run.ensemble_folder or shared
        fits = [("lower", k, name, lower) for k, name in enumerate(names) if lower is not None]
        fits += [("full", k, name, data) for k, name in enumerate(names)]
        finished = _finished_fits(checkpoint, len(fits))
        judged, self.members_, self.earlier_seconds_ = {}, {}, 0.0
        for index, (kind, k, name, rows) in enumerate(fits):
            member = self._member(name, folder, f"{kind}{k}").fit(rows)
            if kind == "lower":
                cap = member.proposal_cap(len(rows)) or 1 << 30
                judged[name] = member.propose_up_to(min(self.config_.judged_designs, cap))
            if index == finished:  # the others' earlier seconds are in this run's snapshot
                self.earlier_seconds_ = resumed_seconds(member)
            if kind == "full":
                member.run = RunContext()  # the folder is gone after fit
                self.members_[name] = member
            if checkpoint is not None:
                checkpoint.save("main", {"finished": index + 1})
        return judged

    def _lower_rows(self, data: OfflineData, held: np.ndarray) -> OfflineData | None:
        """The rows the pseudo-offline fits see: those not ``held`` out (n,) by
        :func:`pseudo_offline_split`. None where that leaves too few rows to fit every member
        (the first member is then chosen)."""
        lower = OfflineData(data.x[~held], data.y[~held], data.space)
        fewest = max(
            [MIN_ROWS, self.config_.judged_designs]
            + [self._member(n).min_rows(self._member(n).config_)[0] for n in self.pool_names()]
        )
        return lower if len(lower) >= fewest else None

    def _fit_judge(self, data: OfflineData) -> None:
        """The judges (one per distinct surrogate: members that share one ensemble and predict
        alike, as CMA-ES and Ens-Mean-Small, count once), the standardization of their
        predictions and the token-pair prior."""
        y = np.asarray(data.y, dtype=np.float64)
        self.judge_mean_ = float(y.mean())
        self.judge_std_ = float(y.std()) or 1.0
        rows = data.x[:256]
        kept: list[np.ndarray] = []
        self.judges_ = []
        for name, member in self.members_.items():
            predicted = np.asarray(member.predict(rows), dtype=np.float64)
            if not any(np.array_equal(predicted, other) for other in kept):
                kept.append(predicted)
                self.judges_.append(name)
        self.pairs_seen_ = None
        if data.space.is_discrete:
            good = data.x[y > y.min()] if (y > y.min()).any() else data.x
            k = data.space.vocab_size
            seen = np.zeros((k, k), dtype=bool)
            seen[good[:, :-1].reshape(-1), good[:, 1:].reshape(-1)] = True
            self.pairs_seen_ = seen

    def judge(self, designs: np.ndarray) -> np.ndarray:
        """Judge scores (n,) of designs: the full-data surrogates' standardized mean minus
        ``pessimism`` times their spread; token designs with an unseen pair of neighbours get
        the table's minimum (module notes, 4)."""
        check_fitted(self)
        designs = self.data_.space.validate(designs)
        predictions = np.stack(
            [
                (
                    np.asarray(self.members_[name].predict(designs), dtype=np.float64)
                    - self.judge_mean_
                )
                / self.judge_std_
                for name in self.judges_
            ]
        )
        score = predictions.mean(0) - self.config_.pessimism * predictions.std(0)
        if self.pairs_seen_ is not None:
            flat = designs.reshape(len(designs), -1)
            feasible = self.pairs_seen_[flat[:, :-1], flat[:, 1:]].all(axis=1)
            floor = (float(np.min(self.data_.y)) - self.judge_mean_) / self.judge_std_
            score = np.where(feasible, score, floor)
        return score

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs of the chosen member, ranked by the judge, none near another."""
        check_fitted(self)
        chosen = self.members_[self.choice_]
        cap = chosen.proposal_cap(len(self.data_))
        candidates = chosen.propose_up_to(2 * n if cap is None else max(n, min(2 * n, cap)))
        order = np.argsort(-self.judge(candidates), kind="stable")
        return candidates[self._apart(candidates, order, n)]

    def propose_up_to(self, n: int) -> np.ndarray:
        return self.propose(n)

    def _apart(self, candidates: np.ndarray, order: np.ndarray, n: int) -> np.ndarray:
        """The first ``n`` of ``order`` that are distinct and, for continuous designs, at least
        ``min_distance`` from each other; if fewer, the closest ones fill up, best first."""
        flat = candidates.reshape(len(candidates), -1)
        continuous = not self.data_.space.is_discrete and self.config_.min_distance > 0
        widths = box_widths(self.data_.x.reshape(len(self.data_), -1)) if continuous else None
        kept: list[int] = []
        seen: set[bytes] = set()
        for index in order:
            key = np.ascontiguousarray(flat[index]).tobytes()
            if key in seen:
                continue
            if continuous and kept:
                nearest = scaled_distances(flat[index : index + 1], flat[kept], widths).min()
                if nearest < self.config_.min_distance:
                    continue
            kept.append(int(index))
            seen.add(key)
            if len(kept) == n:
                return np.asarray(kept)
        rest = [int(i) for i in order if int(i) not in set(kept)]
        return np.asarray((kept + rest)[:n])

    def predict(self, designs: np.ndarray) -> np.ndarray:
        """The chosen member's surrogate (n,), in the units of the offline y."""
        check_fitted(self)
        chosen = self.members_[self.choice_]
        if not has_surrogate(chosen):
            raise MatchoptError(f"{type(chosen).__name__} has no surrogate to predict with")
        return chosen.predict(designs)

    def proposal_cap(self, n_rows: int) -> int | None:
        """The chosen member's (every member's, before a fit)."""
        if hasattr(self, "members_"):
            return self.members_[self.choice_].proposal_cap(n_rows)
        caps = [self._member(n).proposal_cap(n_rows) for n in self.pool_names()]
        return min((c for c in caps if c is not None), default=None)

    @classmethod
    def min_rows(cls, config: AutoConfig) -> tuple[int, str]:
        """The most any pool member needs."""
        need = (MIN_ROWS, "to see the score vary")
        for name in [n.strip() for n in config.pool.split(",") if n.strip()]:
            entry = get_entry(name, SINGLE_METHODS)
            member = entry.cls.min_rows(build_config(entry, config.member_preset, {}))
            need = max(need, (member[0], f"{name}: {member[1]}"))
        return need

    def __matchopt_check__(self) -> None:
        """Checks of a method read from a model file: the members are methods of the pool, the
        choice is one of them, the scores are numbers from 0 to 1, the split's design counts
        are whole numbers (the members check themselves)."""
        super().__matchopt_check__()
        if "members_" not in vars(self):
            return
        members = check_type(self, "members_", dict)
        names = self.pool_names()
        if not members or not set(members) <= set(names):
            raise MatchoptError(f"members_ {sorted(members)} are not of the pool {names}")
        if not all(isinstance(m, Method) for m in members.values()):
            raise MatchoptError("members_ holds something that is not a method")
        check_str(self, "choice_", choices=tuple(members))
        judges = check_type(self, "judges_", list)
        if not judges or not all(isinstance(j, str) and j in members for j in judges):
            raise MatchoptError(f"judges_ {judges!r} are not members")
        for name in ("protocol_", "left_out_"):
            check_type(self, name, dict)
        if not all(is_number(v) and 0.0 <= v <= 1.0 for v in self.protocol_.values()):
            raise MatchoptError("protocol_ holds something that is not a number from 0 to 1")
        check_int(self, "held_out_designs_", 0)
        check_int(self, "lower_designs_", 0)
        check_number(self, "judge_mean_")
        if "earlier_seconds_" in vars(self):  # absent from files of an older matchopt
            check_number(self, "earlier_seconds_", 0.0)
        check_number(self, "judge_std_", 0.0, above=True)
        pairs = check_type(self, "pairs_seen_", np.ndarray, none=True)
        k = self.data_.space.vocab_size
        if (pairs is None) == self.data_.space.is_discrete or (
            pairs is not None and (pairs.shape != (k, k) or pairs.dtype != bool)
        ):
            raise MatchoptError("pairs_seen_ does not fit the design space")

    def fit_report(self) -> dict[str, Any]:
        """The choice, every member's protocol score and what it measures, the split's design
        counts, and the members left out."""
        check_fitted(self)
        earlier = vars(self).get("earlier_seconds_")  # training of a killed run's sittings
        return {
            "choice": self.choice_,
            "protocol": dict(self.protocol_),
            "criterion": (
                f"share of the held-out top designs (by design, above the "
                f"{self.config_.judge_quantile:g} quantile of the designs' mean scores) that a "
                f"member's designs reach, 0 to 1"
            ),
            "held_out_designs": self.held_out_designs_,
            "lower_designs": self.lower_designs_,
            "left_out": dict(self.left_out_),
            "judges": list(self.judges_),
            "judge": dataclasses.asdict(self.config_),
        } | ({"earlier_seconds": earlier} if earlier else {})
