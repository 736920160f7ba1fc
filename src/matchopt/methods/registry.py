"""The methods that fit one surrogate (or generator) and search it one way, by name, and the
one way to build a registered method. :data:`matchopt.methods.METHODS` adds the per-table
choice (``auto``), which draws its members from here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matchopt.errors import MatchoptError
from matchopt.methods.base import Method, MethodEntry, build_config
from matchopt.methods.bdi import BDI
from matchopt.methods.bo_qei import BoQei
from matchopt.methods.bonet import BONET
from matchopt.methods.cbas import CbAS
from matchopt.methods.cma_es import CmaEs
from matchopt.methods.coms import Coms
from matchopt.methods.ddom import Ddom
from matchopt.methods.gradient_ascent import GradientAscent
from matchopt.methods.matchopt import MatchOpt
from matchopt.methods.matchopt_ensemble import MatchOptEnsemble
from matchopt.methods.mins import Mins
from matchopt.methods.random_designs import RandomDesigns
from matchopt.methods.roma import Roma
from matchopt.methods.untrained import Untrained

SINGLE_METHODS: dict[str, MethodEntry] = {
    "matchopt": MethodEntry(
        MatchOpt, "MATCH-OPT: gradient-matching surrogate + gradient ascent", kind="matchopt"
    ),
    "matchopt-noreg": MethodEntry(
        MatchOpt,
        "MATCH-OPT without the value regularizer (ablation, alpha = 0)",
        {"alpha": 0.0},
        kind="matchopt",
    ),
    "matchopt-ens": MethodEntry(
        MatchOptEnsemble,
        "MATCH-OPT ensemble: 5 gradient-matching surrogates, each search path kept at its best",
        kind="matchopt",
    ),
    "matchopt-ens-rank": MethodEntry(
        MatchOptEnsemble,
        "MATCH-OPT ensemble with a ListNet ranking term in every member's loss",
        {"rank_weight": 1.0},
        kind="matchopt",
    ),
    "matchopt-ens-l2": MethodEntry(
        MatchOptEnsemble,
        "MATCH-OPT ensemble whose search paths also stay within Euclidean distance 4 of their "
        "starts",
        {"trust_radius_l2": 4.0},
        kind="matchopt",
    ),
    "matchopt-ens-mix": MethodEntry(
        MatchOptEnsemble,
        "MATCH-OPT ensemble whose search paths stay within Euclidean distance 4 of their starts, "
        "16 of the designs from a bolder search (pessimism 0, no per-feature radius)",
        {"trust_radius_l2": 4.0, "bold_designs": 16},
        kind="matchopt",
    ),
    "matchopt-ens-mix-near": MethodEntry(
        MatchOptEnsemble,
        "MATCH-OPT ensemble as matchopt-ens-mix, token designs at most 8 positions from their "
        "start row, no two continuous designs closer than 0.01 (RMS per feature over the box)",
        {"trust_radius_l2": 4.0, "bold_designs": 16, "max_changes": 8, "min_distance": 0.01},
        kind="matchopt",
    ),
    "matchopt-ens-mix-near-k1": MethodEntry(
        MatchOptEnsemble,
        "MATCH-OPT ensemble as matchopt-ens-mix-near, its line integrals by the trapezoid rule on "
        "one interval (input gradients at the trajectory points only, none between them)",
        {
            "trust_radius_l2": 4.0,
            "bold_designs": 16,
            "max_changes": 8,
            "min_distance": 0.01,
            "kappa": 1,
        },
        kind="matchopt",
    ),
    "matchopt-ens-mix-near-mid": MethodEntry(
        MatchOptEnsemble,
        "MATCH-OPT ensemble as matchopt-ens-mix-near, its line integrals by the midpoint rule on "
        "one interval (one input gradient per segment, halfway between its two designs)",
        {
            "trust_radius_l2": 4.0,
            "bold_designs": 16,
            "max_changes": 8,
            "min_distance": 0.01,
            "quadrature": "midpoint",
            "kappa": 1,
        },
        kind="matchopt",
    ),
    "matchopt-ens-mix-near-k2": MethodEntry(
        MatchOptEnsemble,
        "MATCH-OPT ensemble as matchopt-ens-mix-near, its line integrals by the trapezoid rule on "
        "two intervals (input gradients at the trajectory points and halfway between them)",
        {
            "trust_radius_l2": 4.0,
            "bold_designs": 16,
            "max_changes": 8,
            "min_distance": 0.01,
            "kappa": 2,
        },
        kind="matchopt",
    ),
    "matchopt-ens-mix-near-short": MethodEntry(
        MatchOptEnsemble,
        "MATCH-OPT ensemble as matchopt-ens-mix-near, each member trained for at most 800 "
        "optimizer steps (8,000) at ten times the learning rate (1e-3)",
        {
            "trust_radius_l2": 4.0,
            "bold_designs": 16,
            "max_changes": 8,
            "min_distance": 0.01,
            "max_steps": 800,
            "lr": 1e-3,
        },
        kind="matchopt",
    ),
    "matchopt-ens-mix-near-avg": MethodEntry(
        MatchOptEnsemble,
        "MATCH-OPT ensemble as matchopt-ens-mix-near, fitted on one row per distinct design (the "
        "mean of its replicated measurements)",
        {
            "trust_radius_l2": 4.0,
            "bold_designs": 16,
            "max_changes": 8,
            "min_distance": 0.01,
            "average_replicates": True,
        },
        kind="matchopt",
    ),
    "coms": MethodEntry(Coms, "COMs: conservative objective model + gradient ascent"),
    "bdi": MethodEntry(BDI, "BDI: bidirectional NTK losses minimized from the top designs"),
    "roma": MethodEntry(Roma, "RoMA: robust warm-up + search with model adaptation"),
    "mins": MethodEntry(Mins, "MINs: score-conditioned WGAN-GP, sampled at the best offline y"),
    "ddom": MethodEntry(Ddom, "DDOM: score-conditioned diffusion with guidance, at the best y"),
    "cbas": MethodEntry(CbAS, "CbAS: VAE search distribution adapted by conditioning on high y"),
    "ga": MethodEntry(
        GradientAscent,
        "GA: gradient ascent on one Gaussian forward model",
        {"n_models": 1, "aggregation": "mean"},
    ),
    "ens-mean": MethodEntry(
        GradientAscent,
        "Ens-Mean: gradient ascent on the mean of 5 bootstrapped models",
        {"n_models": 5, "aggregation": "mean"},
    ),
    "ens-min": MethodEntry(
        GradientAscent,
        "Ens-Min: gradient ascent on the min of 5 bootstrapped models",
        {"n_models": 5, "aggregation": "min"},
    ),
    "ens-mean-small": MethodEntry(
        GradientAscent,
        "Ens-Mean on CMA-ES's small ensemble (5 MLPs of 256): gradient ascent on their mean",
        {"n_models": 5, "aggregation": "mean", "hidden": (256,), "lr": 1e-3, "batch_size": 100},
    ),
    "cma-es": MethodEntry(CmaEs, "CMA-ES from each top-128 design on a learned ensemble"),
    "bo-qei": MethodEntry(BoQei, "BO-qEI: GP + batch expected improvement against an ensemble"),
    "random": MethodEntry(
        RandomDesigns, "uniform random designs (tokens / offline box)", kind="sanity"
    ),
    "untrained": MethodEntry(Untrained, "MATCH-OPT's search on its untrained MLP", kind="sanity"),
    "bonet": MethodEntry(BONET, "BONET: transformer rolled out on sorted trajectories at low RTG"),
}


def get_entry(name: str, registry: Mapping[str, MethodEntry]) -> MethodEntry:
    """The entry of ``name`` in ``registry``, or one error naming the known methods."""
    if name not in registry:
        raise MatchoptError(f"unknown method {name!r}; known methods: {', '.join(registry)}")
    return registry[name]


def build_method(
    entry: MethodEntry,
    preset: str = "paper",
    overrides: dict[str, Any] | None = None,
    seed: int = 0,
    progress: bool = False,
    device: str | None = None,
) -> Method:
    """A method of a registry entry with a preset and ``--set``-style overrides."""
    config = build_config(entry, preset, overrides or {})
    return entry.cls(config, seed=seed, progress=progress, device=device)
