"""CMA-ES on a learned surrogate (design-baselines' ``cma_es``).

Hansen, "The CMA Evolution Strategy: A Tutorial", 2016, run on the prediction of a learned
ensemble as in Trabucco et al., "Design-Bench", ICML 2022; one of MATCH-OPT's baselines.

1. **Surrogate**: 5 probabilistic MLPs (Gaussian head, one hidden layer of 256, leaky ReLU),
   each trained by negative log likelihood on its own bootstrap (Adam 1e-3, batch 100,
   100 epochs), on z-scored features and z-scored y. Prediction = mean of the member means.
2. **Search**: one CMA-ES run (pycma, ``x0`` = the design, ``sigma0 = 0.5``, default population
   ``4 + floor(3 ln d)``, at most 100 iterations or pycma's own stopping rules) minimizing the
   negative prediction from each of the 128 best offline designs; each run returns the best
   point it evaluated (``es.result.xbest``).

Discrete designs are searched as z-scored design-bench logits and decoded by argmax; continuous
ones in the z-scored space, unbounded (as design-baselines).

Deviations from design-baselines:
* The 128 runs advance in lockstep so that one forward pass scores all their populations; each
  run draws from its own seeded generator (pycma's ``randn`` option), so this is the same as 128
  sequential runs (up to float rounding of batched matrix products). design-baselines scores one
  candidate per forward pass and leaves pycma's seed to the clock.
* No 200-row validation split (design-baselines holds out 200 rows that only feed its logs).

With a snapshot file (:meth:`~matchopt.methods.training.Resumable.resume_from`) the search
keeps the results of its finished groups of runs, so that a killed search (hours on hopper)
continues with the next group.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from matchopt.checkpoints import TrainingCheckpoint, shown
from matchopt.config_fields import count, optional_count
from matchopt.errors import MatchoptError
from matchopt.methods.base import search_rng, search_starts
from matchopt.methods.engine import TrainingRun
from matchopt.methods.surrogate import EnsembleSurrogateMethod
from matchopt.methods.training import Resumable
from matchopt.methods.wrappers import check_fitted, in_default_threads
from matchopt.models import EnsembleConfig
from matchopt.search import search_start


@dataclass(frozen=True)
class CmaEsConfig(EnsembleConfig):
    """CMA-ES hyperparameters (after the ensemble's, :class:`EnsembleConfig`); defaults are
    design-baselines'."""

    sigma0: float = 0.5
    """Initial CMA-ES step size (in the z-scored space)."""
    max_iterations: int = count(100)
    """Most CMA-ES iterations (generations) per run."""
    popsize: int | None = optional_count()
    """Population size; None = pycma's default 4 + floor(3 ln d)."""
    init: str = search_start()
    """Run starts: topk (design-baselines), random offline rows, or gaussian N(0, I)."""
    runs_at_once: int | None = optional_count()
    """Runs advanced in lockstep (one surrogate call for their populations); None = as many as
    keep their d x d matrices within 4 GiB (all 128 up to d = 1,448; 10 on hopper, d = 5,126,
    where each run holds 2 x 210 MB)."""


QUICK = {"hidden": (32,), "epochs": 3, "max_iterations": 5}
#: Memory the d x d matrices of the runs advancing together may take when ``runs_at_once`` is
#: None (128 runs at once on hopper's d = 5,126 would take 54 GB).
LOCKSTEP_MEMORY = 4 << 30


# --- CMA-ES runs in lockstep --------------------------------------------------------------------


def cma_maximize(
    score: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    sigma0: float,
    max_iterations: int,
    seeds: np.ndarray,
    popsize: int | None = None,
    progress: bool = False,
    runs_at_once: int | None = None,
    done: Sequence[np.ndarray] = (),
    group_done: Callable[[list[np.ndarray]], None] | None = None,
) -> np.ndarray:
    """One CMA-ES run per row of ``x0`` maximizing ``score``; the best point each run evaluated.

    Args:
        score: maps candidates (m x d, float32) to scores (m,), higher is better.
        x0: starting means (n x d).
        sigma0: initial step size of every run.
        max_iterations: most iterations per run (pycma's stopping rules may end a run earlier).
        seeds: (n,) seeds of the runs' own normal generators.
        popsize: population size, None = pycma's default.
        progress: show a progress bar over iterations.
        runs_at_once: runs advanced together (None: as many as fit in
            :data:`LOCKSTEP_MEMORY`); the others wait their turn.
        done: the results of the first groups of runs, from an interrupted call with the same
            arguments (each run has its own seed, so the other groups do not depend on them).
        group_done: called with the results of the groups so far after each group.

    Returns:
        (n x d) float32: each run's best evaluated candidate.
    """
    if max_iterations < 1:
        raise MatchoptError(f"max_iterations must be >= 1, got {max_iterations}")
    size = group_size(len(x0), x0.shape[1], runs_at_once)
    starts = range(0, len(x0), size)
    groups = list(done)
    if len(groups) > len(starts) or any(
        len(g) != len(x0[i : i + size]) for g, i in zip(groups, starts)
    ):
        raise MatchoptError("the finished CMA-ES runs given do not match these runs' groups")
    for i in starts[len(groups) :]:
        groups.append(
            _lockstep_runs(
                score,
                x0[i : i + size],
                sigma0,
                max_iterations,
                seeds[i : i + size],
                popsize,
                progress,
            )  # fmt: skip
        )
        if group_done is not None:
            group_done(groups)
    return np.concatenate(groups)


def group_size(n: int, d: int, runs_at_once: int | None) -> int:
    """Runs of :func:`cma_maximize` advanced together: ``runs_at_once``, or (None) as many of
    the ``n`` runs in ``d`` dimensions as :data:`LOCKSTEP_MEMORY` holds."""
    if runs_at_once is None:
        # pycma keeps a covariance matrix and its eigenbasis per run: 2 d^2 float64.
        per_run = 2 * 8 * d**2
        runs_at_once = max(1, min(n, LOCKSTEP_MEMORY // per_run))
    return max(1, int(runs_at_once))


def finished_groups_problem(groups: object, n: int, d: int, size: int) -> str | None:
    """What keeps ``groups`` (a search snapshot's finished groups of runs) from being the first
    groups of :func:`cma_maximize`'s ``n`` runs in ``d`` dimensions, ``size`` at once, or None:
    float32 tensors of the groups' shapes, finite."""
    if not isinstance(groups, list) or len(groups) > -(-n // size):
        return f"snapshot groups {shown(groups)} are not a list of at most {-(-n // size)} groups"
    for i, group in enumerate(groups):
        shape = (min(size, n - i * size), d)
        if not isinstance(group, torch.Tensor) or tuple(group.shape) != shape:
            return f"snapshot group {i} is {shown(group)}, not one of shape {shape}"
        if group.dtype != torch.float32 or not torch.isfinite(group).all():
            return f"snapshot group {i} is not finite float32 values"
    return None


def _lockstep_runs(
    score: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    sigma0: float,
    max_iterations: int,
    seeds: np.ndarray,
    popsize: int | None,
    progress: bool,
) -> np.ndarray:
    """:func:`cma_maximize` of runs that all advance together."""
    with warnings.catch_warnings():  # pycma warns at import when matplotlib is missing
        warnings.simplefilter("ignore")
        import cma

    runs = []
    for start, seed in zip(x0, seeds):
        generator = np.random.default_rng(int(seed))
        options = {
            "randn": lambda *shape, g=generator: g.standard_normal(shape),
            "seed": np.nan,  # pycma leaves numpy's global generator alone
            "maxiter": max_iterations,
            "verbose": -9,
        }
        if popsize is not None:
            options["popsize"] = popsize
        runs.append(cma.CMAEvolutionStrategy(start.astype(np.float64), sigma0, options))

    for _ in tqdm(range(max_iterations), desc="CMA-ES", disable=not progress, leave=False):
        active = [es for es in runs if not es.stop()]
        if not active:
            break
        populations = [es.ask() for es in active]
        values = score(np.concatenate([np.asarray(p) for p in populations]).astype(np.float32))
        offset = 0
        for es, population in zip(active, populations):
            # pycma minimizes: tell it the negated scores.
            es.tell(population, (-values[offset : offset + len(population)]).tolist())
            offset += len(population)
    return np.stack([es.result.xbest for es in runs]).astype(np.float32)


# --- The method ----------------------------------------------------------------------------------


class CmaEs(EnsembleSurrogateMethod, Resumable):
    """CMA-ES from each of the top-128 designs on the mean prediction of a Gaussian ensemble.

    Resumable: the search keeps the finished groups of runs in the run's snapshot file (the
    stage ``search-<n>``): on hopper's d = 5,126 the 128 runs take hours, ten at a time; a
    killed search redoes only its current group.

    Args:
        config: :class:`CmaEsConfig` (design-baselines defaults when ``None``).
        seed: seeds the ensemble, the bootstraps, batch order and the CMA-ES runs.
        progress: show progress bars on stderr.

    Attributes:
        ensemble_: the trained :class:`~matchopt.models.GaussianEnsemble` (frozen).
        encoder_: maps designs to normalized features and back.
    """

    config_class = CmaEsConfig
    presets = {"paper": {}, "quick": QUICK}

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """``n`` designs: the best point of one CMA-ES run per starting design."""
        check_fitted(self)
        config = self.config_
        rng = search_rng(self)
        starts = search_starts(self, n, config.init, rng)
        seeds = rng.integers(1, 2**31 - 1, size=n)
        # The run's identity (config, seed, data) fixes the ensemble and every run's start.
        checkpoint = TrainingRun.of([self]).checkpoint(self.data_)
        stage, size = f"search-{n}", group_size(n, starts.shape[1], config.runs_at_once)
        done = _finished_groups(checkpoint, stage, n, starts.shape[1], size)

        def group_done(groups: list[np.ndarray]) -> None:
            # When due, and after the last group: the finished search stays until the designs
            # are scored (a kill while scoring does not redo it).
            finished = sum(len(g) for g in groups)
            if checkpoint is not None and (finished == n or checkpoint.due()):
                checkpoint.save(stage, {"groups": [torch.from_numpy(g) for g in groups]})

        best = cma_maximize(
            self._predict_features,
            starts,
            config.sigma0,
            config.max_iterations,
            seeds,
            config.popsize,
            self.progress,
            config.runs_at_once,
            done,
            group_done,
        )
        return self.encoder_.decode_x(best)


def _finished_groups(
    checkpoint: TrainingCheckpoint | None, stage: str, n: int, d: int, size: int
) -> list[np.ndarray]:
    """The finished groups of runs that the search snapshot ``stage`` holds (none without a
    snapshot file, or where it holds none of this search)."""
    if checkpoint is None:
        return []
    saved = checkpoint.load(
        stage,
        lambda state: finished_groups_problem(state.get("groups"), n, d, size),
        "the search starts from scratch",
    )
    return [group.numpy() for group in saved["groups"]] if saved else []
