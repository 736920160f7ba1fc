"""Hold-out validation of a surrogate during training, and checkpoint selection from it.

Offline data only: a part of the offline rows is held out of training and the surrogate's
predictions on it are scored after every few epochs. Nothing here calls an oracle, so choosing a
checkpoint by these metrics is a legitimate part of a method (choosing it by oracle score is not).

Two kinds of split:

* ``random``: a seeded sample stratified by rank (the rows sorted by y are cut into blocks of
  ``1 / fraction`` rows and one row is drawn from each block), so the held-out rows cover the
  whole range of y.
* ``top``: the rows with the highest y. The surrogate trained on the rest must rank these above
  the rows it has seen, and among themselves: the extrapolation a search needs. The metrics are
  computed on the held-out rows together with an equal number of training rows (drawn as in
  ``random``), so that "above the others" is measured too.

Metrics (``METRICS``; every one a forward pass on the validation rows, plus what a method adds,
e.g. MATCH-OPT's gradient-matching loss on held-out trajectories):

* ``spearman``: Spearman rank correlation of prediction and y.
* ``kendall``: Kendall's tau-b (pairwise ordering accuracy is ``(1 + tau) / 2`` without ties).
* ``ndcg``: normalized discounted cumulative gain, relevance ``y - min(y)`` (scikit-learn).
* ``top-precision``: share of the true top decile among the predicted top decile.
* ``mse``: mean squared error of the normalized prediction.

:class:`CheckpointSelector` keeps the parameters of the best evaluated epoch for one metric.
The surrogate families that train by epochs (MATCH-OPT, the Gaussian ensembles behind GA and
Ens-Mean/Min) use the same two pieces.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from matchopt.errors import MatchoptError
from matchopt.names import SPLITS

#: Metric name -> True where larger is better.
METRICS: dict[str, bool] = {
    "spearman": True,
    "kendall": True,
    "ndcg": True,
    "top-precision": True,
    "mse": False,
}
#: Selection rules: the paper's last epoch, or the best epoch by one validation metric.
SELECTIONS = ("last", *METRICS, "matching-loss")


def larger_is_better(metric: str) -> bool:
    """Direction of a validation metric (method losses such as ``matching-loss``: smaller)."""
    return METRICS.get(metric, False)


def holdout_rows(
    y: np.ndarray, fraction: float, kind: str, seed: int, groups: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Split row indices of the offline data into (training, held-out), both sorted.

    Args:
        y: offline scores (N,).
        fraction: share of the rows held out, in (0, 0.5].
        kind: ``random`` (stratified by rank) or ``top`` (the highest y).
        seed: seeds the ``random`` draw; same seed, same split.
        groups: the design of each row (N,), e.g. :func:`matchopt.data.design_groups`: rows of
            one design (replicated measurements) are held out together, so that no design sits
            on both sides. The split is then drawn over designs, each scored by the mean of its
            rows, and ``fraction`` is the share of designs held out. None, or one design per
            row: the split of the rows themselves.

    Returns:
        Disjoint sorted index arrays whose union is ``range(N)``.
    """
    if groups is not None:
        ids, inverse = np.unique(np.asarray(groups), return_inverse=True)
        if len(ids) < len(y):
            means = np.bincount(inverse, weights=y) / np.bincount(inverse)
            _, held_designs = holdout_rows(means, fraction, kind, seed)
            held = np.isin(inverse, held_designs)
            return np.flatnonzero(~held), np.flatnonzero(held)
    if kind not in SPLITS:
        raise MatchoptError(f"unknown validation split {kind!r}; choose one of {', '.join(SPLITS)}")
    if not 0 < fraction <= 0.5:
        raise MatchoptError(f"validation_fraction must be in (0, 0.5], got {fraction}")
    n = len(y)
    n_held = int(round(fraction * n))
    if n_held < 2 or n - n_held < 2:
        raise MatchoptError(
            f"validation_fraction={fraction} of {n} rows leaves {n_held} held-out rows; "
            "at least 2 held-out and 2 training rows are needed"
        )
    order = np.argsort(y, kind="stable")
    if kind == "top":
        held = order[n - n_held :]
    else:
        held = _stratified_sample(order, n_held, np.random.default_rng([seed, 7]))
    mask = np.zeros(n, dtype=bool)
    mask[held] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)


def evaluation_rows(
    y: np.ndarray, train_rows: np.ndarray, held_rows: np.ndarray, kind: str, seed: int
) -> np.ndarray:
    """The rows the metrics are computed on, sorted.

    ``random``: the held-out rows. ``top``: the held-out rows and as many training rows, drawn
    stratified by rank, so that ranking the held-out rows above the others counts.
    """
    if kind != "top":
        return np.sort(held_rows)
    k = min(len(held_rows), len(train_rows))
    order = train_rows[np.argsort(y[train_rows], kind="stable")]
    others = _stratified_sample(order, k, np.random.default_rng([seed, 9]))
    return np.sort(np.concatenate([held_rows, others]))


def _stratified_sample(order: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """One row from each of ``k`` consecutive rank blocks of ``order`` (block sizes differ by 1)."""
    edges = np.linspace(0, len(order), k + 1).round().astype(int)
    picks = edges[:-1] + (rng.random(k) * (edges[1:] - edges[:-1])).astype(int)
    return order[picks]


def ranking_metrics(predictions: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Every metric of :data:`METRICS` for predictions against true (normalized) scores."""
    # Imported here: scipy.stats and sklearn.metrics take about a second to import, and most
    # runs never compute a metric.
    from scipy import stats
    from sklearn.metrics import ndcg_score

    predictions = np.asarray(predictions, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if not np.isfinite(predictions).all():
        nan = float("nan")
        return {"spearman": nan, "kendall": nan, "ndcg": nan, "top-precision": nan, "mse": nan}
    n_top = max(1, int(math.ceil(0.1 * len(y))))
    true_top = set(np.argsort(-y, kind="stable")[:n_top].tolist())
    predicted_top = np.argsort(-predictions, kind="stable")[:n_top]
    relevance = y - y.min()
    constant = np.ptp(predictions) == 0
    return {
        "spearman": 0.0 if constant else float(stats.spearmanr(predictions, y).statistic),
        "kendall": 0.0 if constant else float(stats.kendalltau(predictions, y).statistic),
        "ndcg": float(ndcg_score(relevance[None], predictions[None])) if relevance.any() else 1.0,
        "top-precision": len(true_top.intersection(predicted_top.tolist())) / n_top,
        "mse": float(np.mean((predictions - y) ** 2)),
    }


@dataclass
class Validator:
    """Scores a surrogate on held-out rows; the result of each call is appended to ``history``.

    Args:
        features: normalized features of the validation rows (n x d).
        y: their normalized scores (n,).
        extra_metrics: name -> function of the model giving one more number (smaller or larger
            is better as :data:`SELECTIONS` says), e.g. a method's own loss on held-out data.
    """

    features: torch.Tensor
    y: np.ndarray
    extra_metrics: Mapping[str, Callable[[torch.nn.Module], float]] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module, epoch: int) -> dict[str, float]:
        was_training = model.training
        model.eval()
        predictions = model(self.features).reshape(-1).cpu().double().numpy()
        metrics = {"epoch": epoch, **ranking_metrics(predictions, self.y)}
        for name, metric in self.extra_metrics.items():
            metrics[name] = float(metric(model))
        model.train(was_training)
        self.history.append(metrics)
        return metrics

    def __matchopt_state__(self) -> dict:
        """What a model file keeps (:mod:`matchopt.state`): all but the metric functions, which
        cannot be saved; a loaded validator reports its history but measures nothing new."""
        return {"features": self.features, "y": self.y, "history": self.history}

    def curves(self) -> dict[str, list[float]]:
        """The history as metric name -> values over the evaluated epochs (JSON-ready)."""
        if not self.history:
            return {}
        return {key: [row[key] for row in self.history] for key in self.history[0]}


class CheckpointSelector:
    """Keeps a copy of the parameters at the best evaluated epoch for one metric.

    Args:
        selection: a name of :data:`SELECTIONS`; ``last`` keeps nothing (the final parameters
            stand).
        keep_all: also keep the parameters of every evaluated epoch (for studies).
    """

    def __init__(self, selection: str, keep_all: bool = False):
        if selection not in SELECTIONS:
            raise MatchoptError(
                f"unknown selection {selection!r}; choose one of {', '.join(SELECTIONS)}"
            )
        self.selection = selection
        self.larger_is_better = larger_is_better(selection)
        self.best_epoch: int | None = None
        self.best_value: float | None = None
        self._state: dict[str, torch.Tensor] | None = None
        self.keep_all = keep_all
        #: With ``keep_all``, a copy of the parameters at every evaluated epoch, in order.
        self.checkpoints: list[dict[str, torch.Tensor]] = []

    def update(self, model: torch.nn.Module, metrics: Mapping[str, float]) -> None:
        """Remember the model if ``metrics`` (with an ``epoch``) beat the best so far.

        Ties keep the earlier epoch; NaN never wins.
        """
        if self.keep_all:
            self.checkpoints.append(copy.deepcopy(model.state_dict()))
        if self.selection == "last":
            return
        value = float(metrics[self.selection])
        if math.isnan(value):
            return
        better = self.best_value is None or (
            value > self.best_value if self.larger_is_better else value < self.best_value
        )
        if better:
            self.best_value = value
            self.best_epoch = int(metrics["epoch"])
            self._state = copy.deepcopy(model.state_dict())

    def state(self) -> dict:
        """What a training snapshot keeps of the selector (tensors and plain data)."""
        return {
            "best_epoch": self.best_epoch,
            "best_value": self.best_value,
            "parameters": self._state,
            "checkpoints": list(self.checkpoints),
        }

    def state_problem(
        self, state: object, model: torch.nn.Module, epoch: int, evaluations: int
    ) -> str | None:
        """What keeps ``state`` (from a training snapshot after ``epoch`` epochs and
        ``evaluations`` evaluations) from being a :meth:`state` of this selector on ``model``, or
        None. Checked before anything is restored from the snapshot."""
        from matchopt.checkpoints import is_integer, is_number, shown, state_problem

        keys = ("best_epoch", "best_value", "parameters", "checkpoints")
        if not isinstance(state, Mapping) or any(key not in state for key in keys):
            return f"snapshot selector {shown(state)} is not a selector state"
        best_epoch, best_value, parameters = (state[key] for key in keys[:3])
        live = model.state_dict()
        if best_epoch is None:
            if best_value is not None or parameters is not None:
                return "snapshot selector has a best value or parameters but no best epoch"
        else:
            if self.selection == "last":
                return "snapshot selector has a best epoch, but selection 'last' keeps none"
            if not is_integer(best_epoch) or not 1 <= best_epoch <= epoch:
                return f"snapshot selector best epoch {shown(best_epoch)} is outside 1..{epoch}"
            if not is_number(best_value) or best_value != best_value:  # NaN never wins
                return f"snapshot selector best value {shown(best_value)} is not a number"
            problem = state_problem(parameters, live, "snapshot selector parameters")
            if problem:
                return problem
        kept = state["checkpoints"]
        expected = evaluations if self.keep_all else 0
        if not isinstance(kept, list) or len(kept) != expected:
            return f"snapshot selector checkpoints are not a list of {expected} parameter sets"
        for i, parameters in enumerate(kept):
            problem = state_problem(parameters, live, f"snapshot selector checkpoint {i}")
            if problem:
                return problem
        return None

    def load_state(self, state: dict) -> None:
        """Continue from :meth:`state` (a resumed training run)."""
        self.best_epoch = state["best_epoch"]
        self.best_value = state["best_value"]
        self._state = state["parameters"]
        self.checkpoints = list(state["checkpoints"])

    def restore(self, model: torch.nn.Module) -> int | None:
        """Load the best parameters into ``model``; returns their epoch (None: nothing kept)."""
        if self._state is not None:
            model.load_state_dict(self._state)
        return self.best_epoch
