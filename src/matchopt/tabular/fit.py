"""Fitting on a table: the method, the ensemble that predicts and ranks, its calibration.

:func:`fit_method` fits the chosen method on the table's designs; :func:`fit_ensemble` fits an
ensemble of Gaussian MLPs on the same data: the spread of its members is each proposal's
``predicted_<target>_std``, and it ranks proposals of methods without a surrogate (the surrogate
CMA-ES and BO-qEI use: 5 members, 256 hidden units, 100 epochs; smaller with the ``quick``
preset). :func:`calibrate` cross-validates that ensemble by design and fits the intervals and
the extrapolation limits (:mod:`matchopt.tabular.calibration`); :func:`fit_summary` says what
was fitted, in the lines ``matchopt optimize`` prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from matchopt.data import OfflineData, design_groups
from matchopt.encodings import DesignEncoder
from matchopt.errors import printable
from matchopt.methods.base import has_surrogate
from matchopt.models import EnsembleConfig, GaussianEnsemble
from matchopt.state_checks import is_number
from matchopt.tabular.calibration import Calibration, cross_validate, design_folds, far_distance
from matchopt.tabular.schema import TableSchema
from matchopt.validation import ranking_metrics

if TYPE_CHECKING:
    from matchopt.methods.base import Method
    from matchopt.tabular.fitted import FittedTable

#: Ranking surrogate for methods without ``predict``, per preset (as CMA-ES / BO-qEI's ensemble).
RANKER_PRESETS: dict[str, EnsembleConfig] = {
    "paper": EnsembleConfig(),
    "quick": EnsembleConfig(n_models=2, hidden=(32,), epochs=3),
}
#: What a per-table choice's report keeps (files of older versions lack the design counts).
CHOICE_KEYS = ("choice", "protocol", "left_out", "held_out_designs", "lower_designs")


def fit_method(method: Method, data: OfflineData) -> tuple[Method, dict | None]:
    """``method`` (:func:`~matchopt.tabular.optimizer.new_method`, unfitted) fitted on
    ``data``, and the report of its per-table choice
    (:class:`~matchopt.methods.auto.AutoChoice`: its pick and why; None for other methods)."""
    method.fit(data)
    report = method.fit_report() if has_surrogate(method) else {}
    choice = {key: report[key] for key in CHOICE_KEYS if key in report}
    return method, choice if "choice" in report else None


def is_choice_report(choice: dict) -> bool:
    """Whether ``choice`` is what :class:`~matchopt.methods.auto.AutoChoice` reports."""
    protocol, left_out = choice.get("protocol"), choice.get("left_out")
    counts = [choice[key] for key in ("held_out_designs", "lower_designs") if key in choice]
    return (
        {"choice", "protocol", "left_out"} <= set(choice) <= set(CHOICE_KEYS)
        and isinstance(choice["choice"], str)
        and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
        and isinstance(protocol, dict)
        and all(isinstance(k, str) and is_number(v) for k, v in protocol.items())
        and isinstance(left_out, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in left_out.items())
    )


# --- The ensemble ---------------------------------------------------------------------------------


def ensemble_params(preset: str) -> EnsembleConfig:
    """The ensemble fitted beside a method of ``preset`` (:data:`RANKER_PRESETS`)."""
    return RANKER_PRESETS["quick" if preset.endswith("quick") else "paper"]


def ensemble_words(preset: str) -> str:
    """The ensemble of ``preset``, in words."""
    params = ensemble_params(preset)
    return (
        f"an ensemble of {params.n_models} Gaussian MLPs (hidden {params.hidden}, "
        f"{params.epochs} epochs)"
    )


def fit_ensemble(
    data: OfflineData, preset: str, seed: int, progress: bool, device: torch.device
) -> tuple[DesignEncoder, GaussianEnsemble]:
    """An encoder and an ensemble of Gaussian MLPs (:func:`ensemble_params`) fitted on
    ``data``."""
    encoder = DesignEncoder(data.space).fit(data.x, data.y)
    ensemble = GaussianEnsemble.from_config(
        torch.from_numpy(encoder.encode_x(data.x)).to(device),
        torch.from_numpy(encoder.encode_y(data.y)).to(device),
        ensemble_params(preset),
        seed,
        progress,
    )
    return encoder, ensemble


def ensemble_prediction(
    designs: np.ndarray, encoder: DesignEncoder, ensemble: GaussianEnsemble, device: torch.device
) -> tuple[np.ndarray, np.ndarray]:
    """(mean, spread) of an ensemble's members for ``designs``, in matchopt's units."""
    features = torch.from_numpy(encoder.encode_x(designs)).to(device)
    with torch.no_grad():
        members = ensemble.member_means(features).cpu().numpy().astype(np.float64)
    scaler = encoder.y_scaler_
    scale = 1.0 if scaler is None else np.abs(np.asarray(scaler.std, dtype=np.float64))
    # The mean is decoded; the spread is taken in standardized units and scaled after (the
    # std of decoded values squares them, which overflows near the float64 limit).
    mean = encoder.decode_y(members.mean(0))
    return np.asarray(mean, dtype=np.float64), members.std(axis=0) * scale


# --- Calibration ----------------------------------------------------------------------------------


def calibrate(
    schema: TableSchema,
    data: OfflineData,
    preset: str,
    seed: int,
    progress: bool,
    device: torch.device,
) -> tuple[dict[str, Any], Calibration | None, dict | None]:
    """Cross-validate the ensemble by design, fit the intervals and the extrapolation limits.

    Returns the cross-validation (``splits``, ``n_rows``, ``n_designs``; with held-out folds
    also each row's ``predicted``, ``low``, ``high`` and ``fold``, ``spearman`` and ``r2``), the
    :class:`~matchopt.tabular.calibration.Calibration` and the fit quality the optimizer
    reports (``spearman``, ``r2``, ``n_test``, ``coverage``, ``what``); the last two are None
    for tables too small to hold designs out."""
    groups = design_groups(data.x)
    folds, splits = design_folds(groups, seed)
    cross: dict[str, Any] = {
        "splits": splits,
        "n_rows": len(data),
        "n_designs": int(groups.max()) + 1,
    }
    if not folds:
        return cross, None, None

    def fit_predict(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        part = OfflineData(data.x[train], data.y[train], data.space)
        encoder, ensemble = fit_ensemble(part, preset, seed, False, device)
        return ensemble_prediction(data.x[test], encoder, ensemble, device)

    folds_bar = tqdm(
        folds, desc="cross-validation by design", unit="fold", disable=not progress, leave=False
    )
    mean, spread, fold_of = cross_validate(folds_bar, len(data), fit_predict)
    distinct = data.x[np.unique(groups, return_index=True)[1]]
    far = far_distance(
        lambda rows: schema.nearest_other_distances(distinct, rows), len(distinct), seed
    )
    y = np.asarray(data.y, dtype=np.float64)
    calibration = Calibration.from_cross_validation(y, mean, spread, fold_of, groups, far)
    held = fold_of >= 0
    low, high = calibration.interval(mean, spread)
    # Spearman and R^2 of scaled values: the same numbers, and huge targets cannot overflow.
    scale = float(np.max(np.abs(y[held]))) or 1.0
    metrics = ranking_metrics(mean[held] / scale, y[held] / scale)
    variance = float(np.var(y[held] / scale))
    r2 = 1.0 - metrics["mse"] / variance if variance > 0 else float("nan")
    cross.update(
        predicted=mean, low=low, high=high, fold=fold_of, spearman=metrics["spearman"], r2=r2
    )
    quality = {
        "spearman": metrics["spearman"],
        "r2": r2,
        "n_test": int(held.sum()),
        "coverage": calibration.coverage,
        "what": f"{ensemble_words(preset)}, {splits}",
    }
    return cross, calibration, quality


# --- What was fitted, in words --------------------------------------------------------------------


def fit_summary(optimizer: FittedTable, source: str) -> list[str]:
    """The lines ``matchopt optimize`` prints once the fit is done: the table and its design,
    the ignored columns, the per-table choice, the held-out fit."""
    schema = optimizer.schema_
    lines = [
        f"[{printable(source)}: {len(optimizer.data_)} rows / {optimizer.method} / seed "
        f"{optimizer.seed}] design: {printable(schema.describe())}"
    ]
    if schema.ignored:
        lines.append(f"  ignored columns: {printable(', '.join(schema.ignored))}")
    if optimizer.choice_:
        lines.append(choice_line(optimizer.choice_))
    lines.append(fit_line(optimizer))
    return lines


def fit_line(optimizer: FittedTable) -> str:
    """How the table was split and how well the predictor did on the held-out designs."""
    quality, cross = optimizer.fit_quality_, optimizer.cross_validation_
    if quality is None:
        return f"  {cross['splits']}: no held-out fit, no intervals"
    return (
        f"  held-out fit: Spearman {quality['spearman']:.2f}, R^2 {quality['r2']:.2f}, "
        f"{optimizer.calibration_.confidence:.0%} intervals cover {quality['coverage']:.0%} of "
        f"{quality['n_test']} held-out rows ({printable(quality['what'])})"
    )


def choice_line(choice: dict) -> str:
    """What a per-table choice picked and why: each member's protocol score."""
    scores = ", ".join(f"{name} {value:.3f}" for name, value in choice["protocol"].items())
    held = choice.get("held_out_designs")
    top = f"the {held} top designs" if held is not None else "the table's top designs"
    why = (
        f"protocol scores (share of {top}, held out by design, that each member's designs "
        f"reach when it is fitted without them; 0 to 1): {scores}"
        if scores
        else "too few rows to judge the members on the table: the first member"
    )
    left = "".join(f"; {name} left out ({reason})" for name, reason in choice["left_out"].items())
    return f"  chose {choice['choice']}: {why}{left}"
