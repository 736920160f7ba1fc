"""BO-qEI: batch Bayesian optimization against a learned surrogate (design-baselines' ``bo_qei``).

Wilson, Hutter, Deisenroth, "Maximizing acquisition functions for Bayesian optimization",
NeurIPS 2018 (qEI), run offline as in Trabucco et al., "Design-Bench", ICML 2022; one of
MATCH-OPT's baselines. The learned ensemble plays the black box that BO queries.

1. **Surrogate**: 5 probabilistic MLPs (Gaussian head, one hidden layer of 256, leaky ReLU),
   each trained by negative log likelihood on its own bootstrap (Adam 1e-3, batch 100,
   100 epochs), on z-scored features and z-scored y. "Observing" x = mean of the member means
   plus N(0, 0.1^2) noise.
2. **BO**: a GP (constant mean, Matern-5/2 ARD kernel with Gamma priors, fixed noise variance
   0.1^2 = 0.01) starts on the 500 best offline designs with their z-scored y. 10 rounds: fit the
   GP hyperparameters, maximize qEI (q = 32, best_f = largest observed value, 128 Sobol QMC
   samples; ``optimize_acqf`` with 10 restarts, 128 raw samples, batch limit 5, 200 L-BFGS-B
   iterations) inside the box of per-feature min/max of the offline features, observe the 32
   candidates.
3. **Output**: the n points (offline starts included) with the largest observed values.

Discrete designs are searched as z-scored design-bench logits and decoded by argmax.

Deviations from design-baselines:
* BoTorch's ``SingleTaskGP`` with ``train_Yvar`` and ``get_matern_kernel_with_gamma_prior``,
  no outcome transform: the model of the old ``FixedNoiseGP`` design-baselines used (removed from
  BoTorch); a single-output GP instead of a one-model ``ModelListGP`` (same posterior).
* Each round's GP starts from the previous round's hyperparameters (design-baselines passes a
  whole ``state_dict``); the GP and the acquisition work in float64 (BoTorch's advice) where
  design-baselines used float32.
* qEI as published, although BoTorch now recommends qLogEI (its warning is silenced).
* A round whose acquisition optimization fails ends the BO loop (design-baselines does the same
  for a ``RuntimeError``); fewer than n points in all is an error.
* No 200-row validation split (design-baselines holds out 200 rows that only feed its logs);
  otherwise the surrogate matches (weighted NLL ``sum(w_i nll_i) / sum(w_i)``, leaky ReLU 0.3).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from matchopt.config_fields import count
from matchopt.errors import MatchoptError
from matchopt.methods.base import search_rng
from matchopt.methods.surrogate import EnsembleSurrogateMethod
from matchopt.methods.wrappers import check_fitted, in_default_threads
from matchopt.models import EnsembleConfig
from matchopt.runtime import seeded_torch_rng


@dataclass(frozen=True)
class BoQeiConfig(EnsembleConfig):
    """BO-qEI hyperparameters (after the ensemble's, :class:`EnsembleConfig`); defaults are
    design-baselines'."""

    gp_samples: int = count(500)
    """The GP starts on this many best offline designs."""
    noise_se: float = 0.1
    """Observation noise std: GP fixed noise variance noise_se^2, noise added to observations."""
    rounds: int = count(10)
    """BO rounds (acquisitions)."""
    q: int = count(32)
    """Candidates per round (the qEI batch size)."""
    mc_samples: int = count(128)
    """Sobol QMC samples of the qEI estimate."""
    num_restarts: int = count(10)
    """Restarts of the acquisition optimization."""
    raw_samples: int = count(128)
    """Raw samples for the restarts' initialization heuristic."""
    batch_limit: int = count(5)
    """Restarts optimized jointly at a time."""
    maxiter: int = count(200)
    """L-BFGS-B iterations per acquisition optimization."""


QUICK = {
    "hidden": (32,),
    "epochs": 3,
    "gp_samples": 128,
    "rounds": 2,
    "q": 4,
    "mc_samples": 32,
    "num_restarts": 2,
    "raw_samples": 16,
    "batch_limit": 2,
    "maxiter": 10,
}


# --- The BO loop ---------------------------------------------------------------------------------


def fit_gp(train_x: torch.Tensor, train_y: torch.Tensor, noise_var: float, previous=None):
    """Fixed-noise GP (Matern-5/2 ARD, Gamma priors) on ``train_x`` (n x d), ``train_y`` (n,).

    Hyperparameters start from ``previous`` (a GP of the same dimension) when given, then are
    fitted by maximizing the exact marginal log likelihood.
    """
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.utils.gpytorch_modules import get_matern_kernel_with_gamma_prior
    from gpytorch.mlls import ExactMarginalLogLikelihood

    y = train_y[:, None]
    model = SingleTaskGP(
        train_x,
        y,
        train_Yvar=torch.full_like(y, noise_var),
        covar_module=get_matern_kernel_with_gamma_prior(train_x.shape[1]),
        outcome_transform=None,
    )
    if previous is not None:
        model.mean_module.load_state_dict(previous.mean_module.state_dict())
        model.covar_module.load_state_dict(previous.covar_module.state_dict())
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def qei_candidates(
    model, best_f: float, bounds: torch.Tensor, config: BoQeiConfig, seed: int
) -> torch.Tensor:
    """The q-batch (q x d) that maximizes qEI of ``model`` inside ``bounds`` (2 x d)."""
    from botorch.acquisition.monte_carlo import qExpectedImprovement
    from botorch.optim import optimize_acqf
    from botorch.sampling.normal import SobolQMCNormalSampler

    sampler = SobolQMCNormalSampler(torch.Size([config.mc_samples]), seed=seed)
    acquisition = qExpectedImprovement(model, best_f=best_f, sampler=sampler)
    candidates, _ = optimize_acqf(
        acquisition,
        bounds=bounds,
        q=config.q,
        num_restarts=config.num_restarts,
        raw_samples=config.raw_samples,
        options={"batch_limit": config.batch_limit, "maxiter": config.maxiter, "seed": seed},
    )
    return candidates.detach()


# --- The method ----------------------------------------------------------------------------------


class BoQei(EnsembleSurrogateMethod):
    """Batch BO with qEI on a GP, observing candidates through a learned Gaussian ensemble.

    Args:
        config: :class:`BoQeiConfig` (design-baselines defaults when ``None``).
        seed: seeds the ensemble, the bootstraps, batch order, the acquisition optimization and
            the observation noise.
        progress: show progress bars on stderr.

    Attributes:
        ensemble_: the trained :class:`~matchopt.models.GaussianEnsemble` (frozen).
        encoder_: maps designs to normalized features and back.
        observed_x_, observed_y_: after :meth:`propose`, every point of the BO run (starts first)
            in the normalized space and its observed value (z-scored y units).
        bo_rounds_, bo_stopped_: after :meth:`propose`, the BO rounds run and why the run
            stopped early (None: it ran every round).
    """

    config_class = BoQeiConfig
    presets = {"paper": {}, "quick": QUICK}

    def _observe(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Ensemble mean of ``x`` (m x d, float64) plus N(0, noise_se^2), float64 (m,).

        The ensemble runs on the method's device; the GP and the acquisition stay on the CPU
        in float64 (a 500-832 point GP is small, and GPU float64 is slow on most cards)."""
        device = next(self.ensemble_.parameters()).device
        mean = self.ensemble_.predict_mean(x.float().to(device)).cpu().double()
        return mean + self.config_.noise_se * torch.randn(
            mean.shape, generator=generator, dtype=mean.dtype
        )

    ranked_proposals = True

    def fit_report(self) -> dict[str, Any]:
        """After :meth:`propose`: the BO rounds run and why the run stopped early, if it did
        (a run cut short by a failed Cholesky decomposition shows in its record)."""
        report = super().fit_report()  # the shared ensemble's provenance
        if hasattr(self, "bo_rounds_"):
            report.update(bo_rounds=self.bo_rounds_, bo_stopped=self.bo_stopped_)
        return report

    def proposal_cap(self, n_rows: int) -> int | None:
        """Every point of the BO run: its starting rows plus ``rounds * q``."""
        config = self.config_
        return min(config.gp_samples, n_rows) + config.rounds * config.q

    def propose_up_to(self, n: int) -> np.ndarray:
        """The best ``min(n, points observed)`` points: a failed GP fit stops the run early."""
        try:
            return self.propose(n)
        except MatchoptError:
            observed = len(getattr(self, "observed_y_", ()))
            if not 0 < observed < n:
                raise
            return self.propose(observed)

    @in_default_threads
    def propose(self, n: int = 128) -> np.ndarray:
        """The ``n`` points with the largest observed values after the BO rounds."""
        from botorch.exceptions import BadInitialCandidatesWarning, InputDataWarning
        from botorch.exceptions.warnings import NumericsWarning
        from linear_operator.utils.errors import NotPSDError

        check_fitted(self)
        config = self.config_
        features = self.encoder_.encode_x(self.data_.x)
        scores = self.encoder_.encode_y(self.data_.y)
        top = self.data_.top_k(min(config.gp_samples, len(self.data_)))
        train_x = torch.from_numpy(features[top]).double()
        train_y = torch.from_numpy(scores[top]).double()
        bounds = torch.from_numpy(np.stack([features.min(0), features.max(0)])).double()
        rng = search_rng(self)
        generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
        model, rounds, stopped = None, 0, None
        with seeded_torch_rng(int(rng.integers(2**31))), warnings.catch_warnings():
            quiet = (InputDataWarning, BadInitialCandidatesWarning, NumericsWarning, RuntimeWarning)
            for category in quiet:
                warnings.simplefilter("ignore", category)
            bar = tqdm(range(config.rounds), desc="BO-qEI", disable=not self.progress, leave=False)
            for _ in bar:
                model = fit_gp(train_x, train_y, config.noise_se**2, previous=model)
                try:
                    new_x = qei_candidates(
                        model, float(train_y.max()), bounds, config, int(rng.integers(2**31))
                    )
                except (NotPSDError, torch.linalg.LinAlgError) as error:
                    # A failed Cholesky decomposition ends the run, as in the original; any
                    # other error (out of memory, a device mismatch) is a bug and propagates.
                    stopped = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
                    break
                rounds += 1
                new_y = self._observe(new_x, generator)
                train_x = torch.cat([train_x, new_x])
                train_y = torch.cat([train_y, new_y])
                bar.set_postfix(best=f"{float(train_y.max()):.3f}", refresh=False)
            bar.close()
        self.observed_x_, self.observed_y_ = train_x.numpy(), train_y.numpy()
        self.bo_rounds_, self.bo_stopped_ = rounds, stopped
        if len(train_y) < n:
            raise MatchoptError(
                f"BO-qEI observed {len(train_y)} points in all, fewer than the {n} requested; "
                "raise gp_samples, rounds or q"
            )
        best = np.argsort(-self.observed_y_, kind="stable")[:n]
        return self.encoder_.decode_x(self.observed_x_[best])
