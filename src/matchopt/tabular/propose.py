"""Proposing on a fitted table optimizer: new designs, deduplicated, ranked, with predictions.

How proposals are made:

1. **The method's own designs.** ``propose(n)`` of the method (what a benchmark run scores),
   decoded to the user's format (:meth:`TableSchema.decode`). Search moves a categorical column
   only inside its one-hot block, and decoding takes the block's argmax, so a search that starts
   from a measured row almost always keeps that row's category. With ``categories="search"``
   (the default) each design's categories are then chosen by the ranking surrogate (step 4):
   one column at a time, every category is tried with the rest of the design fixed, and the
   best-predicted one is kept (the current one unless another is predicted strictly higher).
   ``categories="keep"`` leaves the method's categories as they are.
2. **Deduplication** against every measured row and among the proposals, after decoding (two
   designs that round to the same row count once).
3. **Top-up.** When duplicates leave fewer than ``n``, the method proposes more candidates,
   ``oversample * n`` (4 x n by default), and the best-predicted new ones fill the gap. Methods
   that start one search per offline row (``init`` topk or random, COMs, RoMA) give at most one
   candidate per row; BO-qEI gives every point of its BO run (its best points are often the
   measured rows it starts from). Methods that sample (MINs, DDOM, CbAS, BONET, random) are
   asked for 4x as many again, up to 3 rounds, while fewer than ``n`` new designs are found.
4. **Ranking** by a surrogate's prediction of the decoded designs, best first: the method's own
   surrogate when it has ``predict`` (MATCH-OPT, GA and the ensembles, CMA-ES, BO-qEI, BDI);
   otherwise an ensemble of Gaussian MLPs fitted on the same data for ranking only (the
   surrogate CMA-ES and BO-qEI use: 5 members, 256 hidden units, 100 epochs; smaller with the
   ``quick`` preset). Predictions are reported in the user's units and sign.
5. **Distance** of each proposal to its nearest measured row: Hamming (differing positions) for
   sequences, else Euclidean with numeric columns in units of their std and 1 per differing
   categorical column.

6. **Neighbours.** When fewer than ``n`` designs remain after deduplication and the
   ``min_distance`` / ``diversity`` limits (a search that converges to a few designs, a small
   sequence space), the search goes on around what it found: random neighbours of the kept
   designs and of the best measured rows (one more changed letter per round for sequences; a
   Gaussian step of a quarter of each numeric column's std per round, and other categories, for
   tables), ranked by the same surrogate, up to 16 rounds. Such rows are marked ``neighbour``
   in an ``origin`` column (the method's own: ``search``), and a warning gives the count.

If fewer than ``n`` new designs remain even then, :meth:`TableOptimizer.propose` returns those
and warns (:class:`ProposalWarning`) with the count and the cause.

:func:`predict_rows` and :func:`rank_rows` give the same columns for the user's own candidates.
Each function takes the fitted :class:`~matchopt.tabular.TableOptimizer` (``opt``) whose
settings and fitted parts it uses, and predicts through the optimizer's surrogates.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from matchopt.data import top_rows
from matchopt.errors import MatchoptError
from matchopt.tabular.schema import FLAG_NAME, RANKING_NAME, TableSchema, read_frame

if TYPE_CHECKING:
    from matchopt.tabular.fitted import FittedTable

#: Most proposal rounds of a method whose proposals are samples.
MAX_ROUNDS = 3
#: Neighbour search when the method's designs are too few: rounds (radii), candidates per
#: round in multiples of ``n`` (and at most about this many array entries), random stream.
NEIGHBOUR_RADII = 16
NEIGHBOURS_PER_ROUND = 8
NEIGHBOUR_ENTRIES = 4_000_000
NEIGHBOUR_STREAM = 7


class ProposalWarning(UserWarning):
    """Fewer new designs than asked for, or predictions the table does not support."""


def predict_rows(
    opt: FittedTable, data: pd.DataFrame | str | os.PathLike, source: str | None
) -> pd.DataFrame:
    """Predictions for the user's candidate designs, in their order
    (:meth:`TableOptimizer.predict <matchopt.tabular.TableOptimizer.predict>`)."""
    frame, designs = read_candidates(opt, data, source)
    ranking = opt._predict(designs)
    distances = opt.schema_.nearest_distances(designs, opt.data_.x)
    return with_predictions(opt, frame, designs, ranking, distances)


def rank_rows(opt: FittedTable, out: pd.DataFrame) -> pd.DataFrame:
    """Predicted candidates (:func:`predict_rows`), best first by the ranking surrogate; warns
    of extrapolated predictions as proposing does."""
    schema = opt.schema_
    score = out[RANKING_NAME if opt.ranker_ is None else schema.prediction_name].to_numpy()
    order = np.argsort(schema.user_scores(-score), kind="stable")  # best first
    out = out.iloc[order].reset_index(drop=True)
    warn_extrapolation(opt, out, stacklevel=4)
    return out


def propose_designs(opt: FittedTable, count: int) -> np.ndarray:
    """Up to ``count`` designs of the method's own search, checked, their categories chosen
    (:func:`choose_categories`)."""
    designs = opt.method_.propose_up_to(count)
    designs = opt.data_.space.validate(designs, f"designs returned by {opt.method}")
    return choose_categories(opt, designs)


def choose_categories(opt: FittedTable, designs: np.ndarray) -> np.ndarray:
    """With ``categories="search"``: each design's categories, one column at a time, the
    best predicted by the ranking surrogate with the rest of the design fixed (the current
    category unless another is predicted strictly higher); a design this would turn into a
    measured row or into an earlier design keeps its own categories."""
    blocks = opt.schema_.category_blocks()
    if getattr(opt, "categories", "keep") == "keep" or not blocks or len(designs) == 0:
        return designs
    _, designs = opt.schema_.canonical(designs)  # exact one-hot blocks, as decoded
    started = designs.copy()
    rows = np.arange(len(designs))
    for _, block in blocks:
        width = block.stop - block.start
        predicted = np.empty((len(designs), width))
        for category in range(width):
            trial = designs.copy()
            trial[:, block] = np.eye(width)[category]
            predicted[:, category] = opt._predict(trial)
        current = designs[:, block].argmax(1)
        best = predicted.argmax(1)
        better = predicted[rows, best] > predicted[rows, current]
        designs[better, block] = np.eye(width)[best[better]]
    # A design whose new categories make it a measured row or an earlier design of this
    # batch keeps the method's: many starts would otherwise collapse onto one best row.
    seen = {row.tobytes() for row in opt.data_.x.astype(designs.dtype)}
    for index in rows:
        if designs[index].tobytes() in seen:
            designs[index] = started[index]
        seen.add(designs[index].tobytes())
    return designs


def read_candidates(
    opt: FittedTable, data: pd.DataFrame | str | os.PathLike, source: str | None
) -> tuple[pd.DataFrame, np.ndarray]:
    """The candidates' feature columns as given, and their designs."""
    frame, source = read_frame(data, source, "candidates")
    designs = opt.schema_.encode_candidates(frame, source)
    frame = frame.set_axis([str(c) for c in frame.columns], axis=1)
    return frame[opt.schema_.feature_names].reset_index(drop=True), designs


def propose_rows(opt: FittedTable, n: int) -> pd.DataFrame:
    """Up to ``n`` new rows in the table's format, best predicted first
    (:meth:`TableOptimizer.propose <matchopt.tabular.TableOptimizer.propose>`, which checks
    ``n``) from a fitted optimizer."""
    pool = Pool(opt.schema_, opt.data_.x, unseen_tokens(opt))
    own = collect(opt, pool, n)
    warn_unseen(opt, pool)
    designs, table = pool.designs(), pool.table()
    predicted = opt._predict(designs) if len(designs) else np.empty(0)
    schema = opt.schema_
    distances = schema.nearest_distances(designs, opt.data_.x)
    # The method's own designs come first; the best-predicted extra candidates fill the rest.
    extra = np.arange(len(own), len(designs))
    ranked_extra = extra[np.argsort(-predicted[extra], kind="stable")]
    order = np.concatenate([np.arange(len(own)), ranked_extra]).astype(np.int64)
    order = order[distances[order] >= opt.min_distance]
    chosen = diverse(opt, designs, order, n)
    searched = len(chosen)
    radius = 0
    if searched < n:
        designs, table, predicted, distances, chosen, radius = fill_with_neighbours(
            opt, pool, designs, table, predicted, distances, chosen, n
        )
    opt.n_candidates_ = pool.candidates
    if len(chosen) == 0:
        warnings.warn(
            f"no new designs: {shortfall_cause(opt, pool, distances)}; try another "
            "method, --bounds or a smaller min_distance",
            ProposalWarning,
            stacklevel=3,
        )
        empty = np.empty((0, *opt.data_.x.shape[1:]), dtype=opt.data_.x.dtype)
        return with_predictions(opt, pool.empty(), empty, np.empty(0), np.empty(0))
    origin = np.where(np.isin(chosen, chosen[:searched]), "search", "neighbour")
    ranked = np.argsort(-predicted[chosen], kind="stable")
    chosen, origin = chosen[ranked], origin[ranked]
    out = with_predictions(
        opt,
        table.iloc[chosen].reset_index(drop=True),
        designs[chosen],
        predicted[chosen],
        distances[chosen],
    )
    if searched < len(out):
        out["origin"] = origin
    if getattr(opt, "choice_", None):
        # The member a per-table choice picked, in the file itself (CSV has no metadata);
        # Parquet files also keep the protocol scores in their pandas metadata.
        out["proposed_by"] = opt.choice_["choice"]
        out.attrs["matchopt"] = {"method": opt.method, **opt.choice_}
    warn_of_proposals(opt, out, n, searched, radius, lambda: shortfall_cause(opt, pool, distances))
    return out


def unseen_tokens(opt: FittedTable) -> np.ndarray:
    """Tokens of the sequence's alphabet that no measured row uses (``--alphabet`` letters
    the table never shows): the model knows nothing of them."""
    if opt.schema_.sequence is None:
        return np.empty(0, dtype=np.int64)
    tokens = np.arange(len(opt.schema_.sequence.alphabet))
    return np.setdiff1d(tokens, np.unique(opt.data_.x))


def warn_unseen(opt: FittedTable, pool: Pool) -> None:
    """One warning where the alphabet holds letters no measured row uses (left out)."""
    if pool.unseen.size:
        letters = "".join(opt.schema_.sequence.alphabet[t] for t in pool.unseen)
        warnings.warn(
            f"alphabet letters {letters!r} appear in no row of the table, which says nothing "
            f"of them: no proposal uses them ({pool.left_out:,} candidates with them left "
            "out); measure designs with them to propose them",
            ProposalWarning,
            stacklevel=5,
        )


def with_predictions(
    opt: FittedTable,
    rows: pd.DataFrame,
    designs: np.ndarray,
    ranking: np.ndarray,
    distances: np.ndarray,
) -> pd.DataFrame:
    """``rows`` (the designs in the user's format) with the prediction columns: the
    ensemble's mean, spread and interval in the user's units and sign, the extrapolation
    flag, the ranking surrogate's value where it is the method's own, and the distance to
    the nearest measured row."""
    schema = opt.schema_
    prediction = schema.prediction_name
    mean, spread = opt._ensemble_prediction(designs) if len(designs) else (ranking, ranking)
    bad = ~(np.isfinite(mean) & np.isfinite(spread) & np.isfinite(ranking))
    if bad.any():  # never an empty cell where a number is due
        raise MatchoptError(
            f"the fitted model predicts NaN or infinite values for {int(bad.sum())} of "
            f"{len(bad)} designs (a damaged model: fit it again)"
        )
    out = rows.copy()
    out[prediction] = schema.user_scores(mean)
    out[schema.spread_name] = spread  # a spread: the same in the user's sign
    calibration = getattr(opt, "calibration_", None)
    if calibration is not None:
        low, high = (schema.user_scores(v) for v in calibration.interval(mean, spread))
        out[f"{prediction}_low"] = np.minimum(low, high)  # minimizing swaps the ends
        out[f"{prediction}_high"] = np.maximum(low, high)
        beyond, far = calibration.flags(mean, distances)
        out[FLAG_NAME] = beyond | far
    else:
        out[f"{prediction}_low"] = out[f"{prediction}_high"] = np.nan
        out[FLAG_NAME] = False
    # A design with a letter no measured row uses: nothing supports its prediction.
    out[FLAG_NAME] = out[FLAG_NAME] | unseen_rows(designs, unseen_tokens(opt))
    if opt.ranker_ is None:
        out[RANKING_NAME] = schema.user_scores(ranking)
    out[schema.distance_name] = (
        distances.astype(np.int64) if schema.sequence is not None else distances
    )
    return out


def collect(opt: FittedTable, pool: Pool, n: int) -> np.ndarray:
    """The method's own designs into ``pool`` (returned), then the top-up candidates: more
    of its designs while fewer than ``n`` are new (module docstring, 1-3)."""
    cap = opt.method_.proposal_cap(len(opt.data_))
    first = n if cap is None else min(n, cap)
    count = opt.oversample * n if cap is None else min(opt.oversample * n, cap)
    if opt.method_.ranked_proposals:
        # One call gives both: its best `first` designs, then every design up to the cap.
        run = propose_designs(opt, count if cap is None else cap)
        own = pool.add(run[:first])
        if len(own) < n:
            pool.add(run)
        return own
    own = pool.add(propose_designs(opt, first))
    for _ in range(MAX_ROUNDS if cap is None else 1):
        if pool.size >= n:
            break
        if count > first:  # a call for `first` designs again would repeat them
            pool.add(propose_designs(opt, count))
        count *= 4
    return own


def warn_of_proposals(
    opt: FittedTable,
    out: pd.DataFrame,
    n: int,
    searched: int,
    radius: int,
    cause: Callable[[], str],
) -> None:
    """The warnings of a proposal table: neighbours used, fewer than ``n`` (``cause()``
    says why, computed only then), predictions below the best measured value."""
    schema = opt.schema_
    if searched < len(out):
        moved = "changed letters" if schema.sequence is not None else "steps of std/4"
        warnings.warn(
            f"{searched} of the {len(out)} proposals come from {opt.method}'s search (the "
            "others it returned repeat measured rows or each other, or fail the distance "
            f"limits); the other {len(out) - searched} are the best-predicted neighbours "
            f"(1 to {radius} {moved}) of them and of the best measured rows, ranked by "
            f"{opt.ranking_} (column origin)",
            ProposalWarning,
            stacklevel=5,
        )
    if len(out) < n:
        warnings.warn(
            f"only {len(out)} new designs (asked for {n}): {cause()}",
            ProposalWarning,
            stacklevel=5,
        )
    warn_extrapolation(opt, out, stacklevel=6)
    top = out[schema.prediction_name].max() if len(out) else None
    if schema.minimize and len(out):
        top = out[schema.prediction_name].min()
    best = schema.user_scores(np.array([opt.data_.y.max()]))[0]
    # In the user's sign: when minimizing, the best prediction is the lowest one.
    if top is not None and (top > best if schema.minimize else top < best):
        most, worse = ("at least", "above") if schema.minimize else ("at most", "below")
        warnings.warn(
            f"the surrogate predicts {most} {top:.4g} for the proposals, {worse} the best "
            f"measured value {best:.4g}: its predictions are shrunk toward the mean (or the "
            "proposals are worse); read them as a ranking, not as expected values",
            ProposalWarning,
            stacklevel=5,
        )


def warn_extrapolation(opt: FittedTable, out: pd.DataFrame, stacklevel: int) -> None:
    """A warning naming how many predictions the table does not support, and why."""
    calibration = getattr(opt, "calibration_", None)
    if calibration is None or not len(out) or not out[FLAG_NAME].any():
        return
    schema = opt.schema_
    mean = schema.user_scores(out[schema.prediction_name].to_numpy())  # its own inverse
    beyond, far = calibration.flags(mean, out[schema.distance_name].to_numpy())
    best = schema.user_scores(np.array([calibration.best]))[0]
    reasons = []
    if beyond.any():
        reasons.append(
            f"{int(beyond.sum())} predicted beyond the best measured value {best:.4g} by more "
            f"than the table supports ({calibration.half_width:.3g}, the "
            f"{calibration.confidence:.0%} interval's half-width at a typical held-out design)"
        )
    if far.any():
        reasons.append(
            f"{int(far.sum())} farther than {calibration.far:.3g} ({schema.distance_name}) "
            "from every measured row, where 95% of the measured designs have a neighbour"
        )
    warnings.warn(
        f"{int(out[FLAG_NAME].sum())} of the {len(out)} predictions are extrapolations "
        f"(column {FLAG_NAME}): {'; '.join(reasons)}. Cross-validation measured the model "
        "only inside the data: expect these to fall short of their predictions and outside "
        "their intervals more often",
        ProposalWarning,
        stacklevel=stacklevel,
    )


def diverse(
    opt: FittedTable, designs: np.ndarray, order: np.ndarray, n: int, kept: Sequence[int] = ()
) -> np.ndarray:
    """``kept``, then the first of ``order`` that are at least ``diversity`` from each other
    and from ``kept``, up to ``n`` in all."""
    kept = [int(i) for i in kept]
    diversity = opt.diversity_
    if not diversity:
        return np.asarray(kept + [int(i) for i in order[: max(0, n - len(kept))]], np.int64)
    for index in order:
        if len(kept) == n:
            break
        if not kept or (
            opt.schema_.nearest_distances(designs[index : index + 1], designs[kept])[0] >= diversity
        ):
            kept.append(int(index))
    return np.asarray(kept, dtype=np.int64)


def fill_with_neighbours(
    opt: FittedTable,
    pool: Pool,
    designs: np.ndarray,
    table: pd.DataFrame,
    predicted: np.ndarray,
    distances: np.ndarray,
    chosen: np.ndarray,
    n: int,
) -> tuple[np.ndarray, pd.DataFrame, np.ndarray, np.ndarray, np.ndarray, int]:
    """Search on until ``n`` designs pass the distance limits: random neighbours
    (:meth:`TableSchema.neighbours`) of the designs kept so far and of the best measured
    rows, one more changed letter (or a longer step) each round, the best-predicted first.

    Returns the pool's designs, table, predictions and distances, the chosen indices and
    the last radius tried."""
    schema = opt.schema_
    rng = np.random.default_rng([opt.seed, NEIGHBOUR_STREAM])
    best_rows = opt.data_.x[top_rows(opt.data_.y, min(len(opt.data_), n))]
    width = designs.shape[1] if designs.ndim == 2 else opt.data_.x.shape[1]
    count = min(NEIGHBOURS_PER_ROUND * n, max(1024, NEIGHBOUR_ENTRIES // max(1, width)))
    radius = 0
    most = NEIGHBOUR_RADII if schema.sequence is None else schema.sequence.length
    for radius in range(1, min(most, NEIGHBOUR_RADII) + 1):
        if len(chosen) >= n:
            break
        parents = np.concatenate([designs[chosen], best_rows.astype(designs.dtype)])
        new = pool.add(schema.neighbours(parents, radius, count, rng))
        if not len(new):
            continue
        new_predicted = opt._predict(new)
        new_distances = schema.nearest_distances(new, opt.data_.x)
        first = len(designs)
        designs = np.concatenate([designs, new.astype(designs.dtype)])
        predicted = np.concatenate([predicted, new_predicted])
        distances = np.concatenate([distances, new_distances])
        order = first + np.argsort(-new_predicted, kind="stable")
        order = order[distances[order] >= opt.min_distance]
        chosen = diverse(opt, designs, order, n, kept=chosen)
    return designs, pool.table(), predicted, distances, chosen, radius


def shortfall_cause(opt: FittedTable, pool: Pool, distances: np.ndarray) -> str:
    """Why fewer designs than asked for came back, in words."""
    schema = opt.schema_
    if schema.sequence is not None:
        k, length = len(schema.sequence.alphabet), schema.sequence.length
        if length * math.log10(k) < 15:
            left = k**length - len(np.unique(opt.data_.x, axis=0))
            if pool.size >= left:
                return f"the space holds only {left:,} sequences not measured"
    why = f"the {pool.candidates:,} candidates (the method's and their neighbours) "
    if opt.min_distance and (not len(distances) or distances.max() < opt.min_distance):
        farthest = f"{distances.max():.4g}" if len(distances) else "none"
        return why + (
            f"hold none at least min_distance {opt.min_distance:g} from every measured "
            f"row (the farthest is {farthest})"
        )
    why += "repeat measured rows or each other"
    if opt.min_distance or opt.diversity_:
        why += " or are closer than min_distance / diversity allow"
    return why


# -- the report --


class Pool:
    """New designs found so far, in the order found, deduplicated after decoding; designs that
    use a letter of ``unseen`` (tokens no measured row uses) are left out and counted."""

    def __init__(self, schema: TableSchema, measured: np.ndarray, unseen: np.ndarray):
        self.schema = schema
        self.seen = {row.tobytes() for row in measured}
        self.unseen = unseen
        self.rows: list[pd.DataFrame] = []
        self.parts: list[np.ndarray] = []
        self.size = self.candidates = self.left_out = 0

    def add(self, raw: np.ndarray) -> np.ndarray:
        """Decode candidates, keep the new ones; returns the designs kept from this batch."""
        decoded, canonical = self.schema.canonical(raw)
        self.candidates += len(canonical)
        unseen = unseen_rows(canonical, self.unseen)
        self.left_out += int(unseen.sum())
        keep = []
        for index, row in enumerate(canonical):
            if unseen[index]:
                continue
            key = row.tobytes()
            if key not in self.seen:
                self.seen.add(key)
                keep.append(index)
        self.rows.append(decoded.iloc[keep])
        self.parts.append(canonical[keep])
        self.size += len(keep)
        return canonical[keep]

    def designs(self) -> np.ndarray:
        return np.concatenate(self.parts)

    def table(self) -> pd.DataFrame:
        return pd.concat(self.rows, ignore_index=True)

    def empty(self) -> pd.DataFrame:
        """No rows, the table's columns."""
        return self.table().iloc[:0].copy()


def unseen_rows(designs: np.ndarray, unseen: np.ndarray) -> np.ndarray:
    """Rows (n,) of token designs (n x L) that use a token of ``unseen``."""
    if unseen.size == 0 or designs.ndim != 2:
        return np.zeros(len(designs), dtype=bool)
    return np.isin(designs, unseen).any(axis=1)
