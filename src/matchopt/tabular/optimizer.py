"""Optimize a user's own table: fit a method on it, propose new rows, save and reload the model.

:class:`TableOptimizer` chains the pieces (scikit-learn style: ``__init__`` stores parameters,
``fit`` validates and learns, learned state ends in ``_``)::

    opt = TableOptimizer(target="yield", categorical=["solvent"], method="matchopt", seed=0)
    proposals = opt.fit(frame).propose(128)  # a DataFrame in the table's own format

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

Saving (:meth:`TableOptimizer.save`) writes the whole fitted optimizer (schema, method with its
configuration, seed and trained networks, ranking surrogate) as JSON and tensors
(:mod:`matchopt.state`): loading a model file builds only matchopt's own objects and cannot run
code.
"""

from __future__ import annotations

import io
import math
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from matchopt._version import __version__
from matchopt.data import OfflineData, design_groups, top_rows
from matchopt.encodings import DesignEncoder
from matchopt.errors import MatchoptError, printable
from matchopt.io import atomic_write_bytes
from matchopt.methods import RECOMMENDED_METHOD, get_method_entry
from matchopt.methods.base import build_config, has_surrogate
from matchopt.methods.persistence import check_loaded
from matchopt.models import EnsembleConfig, GaussianEnsemble
from matchopt.runtime import MAX_SEED, limit_threads, resolve_device
from matchopt.safe_paths import as_path, name_max
from matchopt.state import (
    check_predictions,
    load_state,
    read_model_file,
    state_bytes,
)
from matchopt.state_checks import (
    check_bool,
    check_int,
    check_items,
    check_number,
    check_str,
    check_type,
    is_number,
)
from matchopt.tabular.calibration import (
    Calibration,
    cross_validate,
    design_folds,
    design_sample,
    far_distance,
)
from matchopt.tabular.report_page import ReportContext, write_report
from matchopt.tabular.schema import (
    CSV_SUFFIXES,
    PARQUET_SUFFIXES,
    TableSchema,
    check_column_names,
    read_table,
)
from matchopt.validation import ranking_metrics

#: Suffixes proposals can be written as.
OUTPUT_SUFFIXES = CSV_SUFFIXES + PARQUET_SUFFIXES
#: What a saved model file holds under "kind".
MODEL_KIND = "table-optimizer"
#: Most proposals one call returns: a batch for the lab, not a sampler (10^10 designs would need
#: hundreds of GiB before any check could run).
MAX_PROPOSALS = 100_000
#: Largest top-up pool, in multiples of ``n`` (a larger one only costs time and memory).
MAX_OVERSAMPLE = 100
#: Most proposal rounds of a method whose proposals are samples.
MAX_ROUNDS = 3
#: Neighbour search when the method's designs are too few: rounds (radii), candidates per
#: round in multiples of ``n`` (and at most about this many array entries), random stream.
NEIGHBOUR_RADII = 16
NEIGHBOURS_PER_ROUND = 8
NEIGHBOUR_ENTRIES = 4_000_000
NEIGHBOUR_STREAM = 7

#: Ranking surrogate for methods without ``predict``, per preset (as CMA-ES / BO-qEI's ensemble).
RANKER_PRESETS: dict[str, EnsembleConfig] = {
    "paper": EnsembleConfig(),
    "quick": EnsembleConfig(n_models=2, hidden=(32,), epochs=3),
}


#: Two proposals of a table with numeric columns are distinct experiments when they lie at least
#: this far apart (the distance column's units: numeric columns in units of their measured std,
#: 1 per differing category): the default ``diversity`` of such tables.
DISTINCT_DISTANCE = 0.5
#: The column flagging predictions the table does not support (:mod:`.calibration`).
FLAG_NAME = "extrapolated"
#: The column of the ranking surrogate's value, where it is the method's own.
RANKING_NAME = "ranking_score"


class ProposalWarning(UserWarning):
    """Fewer new designs than asked for, or predictions the table does not support."""


#: How proposals' categorical columns are set (:meth:`TableOptimizer._choose_categories`).
CATEGORY_CHOICES = ("search", "keep")


def output_columns(schema: TableSchema) -> list[str]:
    """The columns matchopt adds to proposals and predictions (no feature may take their
    names)."""
    prediction = schema.prediction_name
    return [
        prediction,
        schema.spread_name,
        f"{prediction}_low",
        f"{prediction}_high",
        FLAG_NAME,
        RANKING_NAME,
        schema.distance_name,
        "origin",
    ]


def resolve_preset(method: str, preset: str | None) -> str:
    """``preset``, or by default ``validated`` where ``method`` has it and ``paper`` elsewhere."""
    if preset is not None:
        return preset
    return "validated" if "validated" in get_method_entry(method).cls.presets else "paper"


# --- Paths ----------------------------------------------------------------------------------------


def check_output_path(
    path: str | Path,
    option: str,
    suffixes: Sequence[str] | None = None,
    inputs: Sequence[str | Path] = (),
) -> Path:
    """Fail early (before any fitting) when ``path`` cannot be written.

    Args:
        path: the output file.
        option: its name in messages (e.g. ``--out``).
        suffixes: the allowed file suffixes (None: any).
        inputs: files the command reads: the output must be none of them (nor a link to one),
            so that a user's measured table is never overwritten.

    Raises:
        MatchoptError: unknown suffix, a folder, a missing or unwritable parent folder, an
            input file, or Parquet output without pyarrow.
    """
    path = Path(path)
    longest, length = name_max(path.parent), len(os.fsencode(path.name))
    if length > longest:  # before any call on the path, which would fail on the name
        raise MatchoptError(
            f"{option} {printable(path.name, 80)}: a name of {length} bytes, over the "
            f"{longest} a file name may take in {path.parent}"
        )
    if path.is_dir():
        raise MatchoptError(f"{option} {path}: is a folder")
    for source in inputs:
        if _same_file(path, Path(source)):
            raise MatchoptError(
                f"{option} {path}: that is the input file {source}; write to another file"
            )
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise MatchoptError(
            f"{option} {path}: unknown output format {path.suffix or '(no suffix)'!r}; "
            f"use {', '.join(suffixes)}"
        )
    parent = path.parent
    if not parent.exists():
        raise MatchoptError(f"{option} {path}: folder {parent} does not exist")
    if not parent.is_dir():
        raise MatchoptError(f"{option} {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise MatchoptError(f"{option} {path}: folder {parent} is not writable")
    if path.suffix.lower() in PARQUET_SUFFIXES:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise MatchoptError(
                f"{option} {path}: Parquet needs pyarrow (pip install pyarrow)"
            ) from None
    return path


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file (same path, a symbolic or a hard link)."""
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


#: What a per-table choice's report keeps (files of older versions lack the design counts).
CHOICE_KEYS = ("choice", "protocol", "left_out", "held_out_designs", "lower_designs")


def _is_choice_report(choice: dict) -> bool:
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


def read_frame(
    data: pd.DataFrame | str | os.PathLike, source: str | None, name: str
) -> tuple[pd.DataFrame, str]:
    """A DataFrame, or the table of a CSV or Parquet file, and its name in messages (``source``,
    else the file's path, else ``name``)."""
    if isinstance(data, (str, os.PathLike)):
        return read_table(data), source or str(data)
    if isinstance(data, pd.DataFrame):
        return data, source or name
    raise MatchoptError(f"expected a DataFrame or a file path, got {type(data).__name__}")


def table_bytes(frame: pd.DataFrame, path: Path) -> bytes:
    """``frame`` as the bytes of a CSV or Parquet file (chosen by the suffix of ``path``)."""
    if path.suffix.lower() in PARQUET_SUFFIXES:
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        return buffer.getvalue()
    return frame.to_csv(index=False).encode()


def write_table(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write ``frame`` atomically (a temporary file, then a rename): never a partial file."""
    path = check_output_path(path, "output", OUTPUT_SUFFIXES)
    write_file(path, table_bytes(frame, path))
    return path


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; an OS error becomes a one-line MatchoptError."""
    try:
        atomic_write_bytes(path, data)
    except OSError as err:
        raise MatchoptError(f"cannot write {path}: {err.strerror or err}") from None


# --- The optimizer --------------------------------------------------------------------------------


class TableOptimizer:
    """Fit an optimization method on a table of measured designs and propose new rows.

    Args:
        target: name of the score column.
        features: feature columns; None = every column but the target.
        categorical: feature columns holding categories (others must be numeric).
        sequence: a fixed-length sequence column that is the whole design.
        alphabet: letters a sequence may use; None = the letters found in the column.
        minimize: lower target values are better.
        bounds: column -> (low, high) range of proposals for numeric columns (default: the
            observed range).
        method: a registered method name (``matchopt.METHODS``); default
            ``matchopt.methods.RECOMMENDED_METHOD``, the one ``matchopt methods`` marks.
        preset: a preset of the method; None = ``validated`` where the method has it
            (MATCH-OPT: the checkpoint chosen on held-out rows), else ``paper``.
        overrides: config field -> value (as ``--set``).
        seed: seed of every random choice (same seed, same table: same proposals).
        oversample: size of the top-up candidate pool, in multiples of ``n`` (used only when
            the method's own designs repeat measured rows or each other).
        progress: show training progress bars on stderr.
        threads: compute threads of fit and propose (default
            :func:`~matchopt.runtime.default_threads`: half the cores, 1 to 4).
        min_distance: keep only proposals at least this far from every measured row (in the
            units of the distance column: differing positions, or std units).
        diversity: keep the proposals at least this far from each other (same units; greedy,
            in ranking order). None (default): :data:`DISTINCT_DISTANCE` (half a std of one
            numeric column, or one other category) for tables of columns, so that the top rows
            are distinct experiments, not one design with jitter; 0 for sequences (two
            different sequences are distinct).
        device: torch device of fit and propose: cpu, cuda, cuda:N, mps or auto (default
            ``$MATCHOPT_DEVICE``, else cpu; :func:`~matchopt.runtime.resolve_device`). Random
            draws stay on the CPU, so a seed gives the same proposals on every device up to
            float rounding. A saved model is read back onto the CPU.
        categories: ``search`` (default): each proposal's categorical columns are chosen by the
            ranking surrogate, one column at a time (see the module docstring); ``keep``: as
            the method's search left them (almost always its start row's).

    Attributes:
        schema_: the :class:`TableSchema` of the fitted table.
        method_: the fitted :class:`~matchopt.methods.base.Method`.
        data_: the table as :class:`~matchopt.data.OfflineData` (target negated if minimizing).
        ensemble_: an ensemble of Gaussian MLPs fitted on the table: the spread of its members
            is each proposal's ``predicted_<target>_std``; it also ranks proposals of methods
            without a surrogate.
        ranker_: ``ensemble_`` when it ranks proposals, None when the method's own
            ``predict`` ranks.
        ranking_: which surrogate ranks proposals, in words.
        fit_quality_: how well the ranking surrogate predicts rows it was not fitted on:
            ``spearman``, ``r2``, ``n_test`` and ``what`` (in words); None for tiny tables.
        source_: the table's name in messages (its path, or "data").
        n_candidates_: candidate designs the last :meth:`propose` call looked at.
    """

    def __init__(
        self,
        target: str,
        *,
        features: Sequence[str] | None = None,
        categorical: Iterable[str] = (),
        sequence: str | None = None,
        alphabet: str | None = None,
        minimize: bool = False,
        bounds: Mapping[str, tuple[float, float]] | None = None,
        method: str = RECOMMENDED_METHOD,
        preset: str | None = None,
        overrides: Mapping[str, Any] | None = None,
        seed: int = 0,
        oversample: int = 4,
        progress: bool = False,
        threads: int | None = None,
        min_distance: float = 0.0,
        diversity: float | None = None,
        device: str | None = None,
        categories: str = "search",
    ):
        self.target = target
        self.features = features
        self.categorical = categorical
        self.sequence = sequence
        self.alphabet = alphabet
        self.minimize = minimize
        self.bounds = bounds
        self.method = method
        self.preset = preset
        self.overrides = overrides
        self.seed = seed
        self.oversample = oversample
        self.progress = progress
        self.threads = threads
        self.min_distance = min_distance
        self.diversity = diversity
        self.device = device
        self.categories = categories

    @property
    def device_(self) -> torch.device:
        """The torch device of fit and propose (``device``, else ``$MATCHOPT_DEVICE``, else the
        CPU)."""
        return resolve_device(self.device, "device")

    @property
    def diversity_(self) -> float:
        """The distance proposals keep from each other: ``diversity``, or by default
        :data:`DISTINCT_DISTANCE` for tables of columns and 0 for sequences."""
        if self.diversity is not None:
            return float(self.diversity)
        return 0.0 if self.schema_.sequence is not None else DISTINCT_DISTANCE

    # -- fitting --

    def fit(
        self, data: pd.DataFrame | str | os.PathLike, source: str | None = None
    ) -> TableOptimizer:
        """Validate the table, fit the method (and a ranking surrogate if needed); returns self.

        Args:
            data: a DataFrame, or the path of a CSV or Parquet file.
            source: the table's name in messages (default: its path, or "data").

        Raises:
            MatchoptError: bad options, a bad table (naming file, column, row, value), or too
                few rows for the method.
        """
        with limit_threads(self.threads):
            return self._fit(data, source)

    def _fit(
        self, data: pd.DataFrame | str | os.PathLike, source: str | None = None
    ) -> TableOptimizer:
        frame, source = read_frame(data, source, "data")
        check_column_names(list(frame.columns), source)
        # Columns are addressed by their text name everywhere (CLI options, output files).
        attrs = dict(frame.attrs)
        frame = frame.set_axis([str(c) for c in frame.columns], axis=1)
        frame.attrs.update(attrs)
        entry = get_method_entry(self.method)
        resolve_device(self.device, "device")  # an unknown or absent device fails first
        self.preset_ = resolve_preset(self.method, self.preset)
        config = build_config(entry, self.preset_, dict(self.overrides or {}))
        self._check_settings()

        schema = TableSchema.infer(
            frame,
            self.target,
            features=self.features,
            categorical=self.categorical,
            sequence=self.sequence,
            alphabet=self.alphabet,
            minimize=self.minimize,
            bounds=self.bounds,
            source=source,
        )
        for name in output_columns(schema):
            if name in schema.feature_names:
                raise MatchoptError(
                    f"{source}: feature column {name!r} has the name of an output column; rename it"
                )
        need, why = entry.cls.min_rows(config)
        if len(frame) < need:
            raise MatchoptError(
                f"{source}: method {self.method} (preset {self.preset_}) needs at least {need} "
                f"rows ({why}); {source} has {len(frame)}"
            )
        data_ = OfflineData(
            schema.encode(frame, source), schema.scores(frame, source), schema.space
        )

        method = entry.cls(config, seed=self.seed, progress=self.progress, device=self.device)
        method.fit(data_)
        # A method that chooses among others per table (``auto``) reports its pick and why.
        report = method.fit_report() if has_surrogate(method) else {}
        self.choice_ = (
            {key: report[key] for key in CHOICE_KEYS if key in report}
            if "choice" in report
            else None
        )
        self.ensemble_encoder_, self.ensemble_ = self._fit_ensemble(data_)
        ensemble_words = self._ensemble_words()
        if has_surrogate(method):
            self.ranker_ = None
            self.ranking_ = f"{self.method}'s own surrogate"
        else:
            self.ranker_ = self.ensemble_
            self.ranking_ = f"{ensemble_words} fitted for ranking ({self.method} has no surrogate)"
        self.schema_, self.method_, self.data_, self.source_ = schema, method, data_, source
        self._calibrate(ensemble_words)
        return self

    def _check_settings(self) -> None:
        """The constructor's settings that no config holds, before any work."""
        if isinstance(self.oversample, bool) or not isinstance(self.oversample, int):
            raise MatchoptError(f"oversample must be a whole number, got {self.oversample!r}")
        if not 1 <= self.oversample <= MAX_OVERSAMPLE:
            raise MatchoptError(
                f"oversample must be from 1 to {MAX_OVERSAMPLE}, got {self.oversample}"
            )
        if self.categories not in CATEGORY_CHOICES:
            raise MatchoptError(
                f"categories must be one of {', '.join(CATEGORY_CHOICES)}, got {self.categories!r}"
            )
        settings = [("min_distance", self.min_distance)]
        if self.diversity is not None:
            settings.append(("diversity", self.diversity))
        for name, value in settings:
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (np.isfinite(value) and value >= 0)
            ):
                raise MatchoptError(f"{name} must be a number >= 0, got {value!r}")

    def _ensemble_params(self) -> EnsembleConfig:
        return RANKER_PRESETS["quick" if self.preset_.endswith("quick") else "paper"]

    def _fit_ensemble(
        self, data: OfflineData, progress: bool | None = None
    ) -> tuple[DesignEncoder, GaussianEnsemble]:
        encoder = DesignEncoder(data.space).fit(data.x, data.y)
        ensemble = GaussianEnsemble.from_config(
            torch.from_numpy(encoder.encode_x(data.x)).to(self.device_),
            torch.from_numpy(encoder.encode_y(data.y)).to(self.device_),
            self._ensemble_params(),
            self.seed,
            self.progress if progress is None else progress,
        )
        return encoder, ensemble

    def _ensemble_prediction(
        self,
        designs: np.ndarray,
        encoder: DesignEncoder | None = None,
        ensemble: GaussianEnsemble | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(mean, spread) of an ensemble's members for ``designs``, in matchopt's units
        (default: the table's ``ensemble_``)."""
        encoder = self.ensemble_encoder_ if encoder is None else encoder
        ensemble = self.ensemble_ if ensemble is None else ensemble
        features = torch.from_numpy(encoder.encode_x(designs)).to(self.device_)
        with torch.no_grad():
            members = ensemble.member_means(features).cpu().numpy().astype(np.float64)
        scaler = encoder.y_scaler_
        scale = 1.0 if scaler is None else np.abs(np.asarray(scaler.std, dtype=np.float64))
        # The mean is decoded; the spread is taken in standardized units and scaled after (the
        # std of decoded values squares them, which overflows near the float64 limit).
        mean = encoder.decode_y(members.mean(0))
        return np.asarray(mean, dtype=np.float64), members.std(axis=0) * scale

    def _calibrate(self, ensemble_words: str) -> None:
        """Cross-validate the predictor by design, fit the intervals and the extrapolation
        limits (:mod:`matchopt.tabular.calibration`): sets ``cross_validation_``,
        ``calibration_`` and ``fit_quality_``."""
        data = self.data_
        groups = design_groups(data.x)
        folds, splits = design_folds(groups, self.seed)
        self.cross_validation_: dict[str, Any] = {
            "splits": splits,
            "n_rows": len(data),
            "n_designs": int(groups.max()) + 1,
        }
        self.calibration_: Calibration | None = None
        self.fit_quality_ = None
        if not folds:
            return

        def fit_predict(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            part = OfflineData(data.x[train], data.y[train], data.space)
            encoder, ensemble = self._fit_ensemble(part, progress=False)
            return self._ensemble_prediction(data.x[test], encoder, ensemble)

        folds_bar = tqdm(
            folds, desc="cross-validation by design", unit="fold", disable=not self.progress,
            leave=False,
        )  # fmt: skip
        mean, spread, fold_of = cross_validate(folds_bar, len(data), fit_predict)
        distinct = data.x[np.unique(groups, return_index=True)[1]]
        far = far_distance(
            lambda rows: self.schema_.nearest_other_distances(distinct, rows),
            len(distinct),
            self.seed,
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
        self.calibration_ = calibration
        self.cross_validation_.update(
            predicted=mean, low=low, high=high, fold=fold_of, spearman=metrics["spearman"], r2=r2
        )
        self.fit_quality_ = {
            "spearman": metrics["spearman"],
            "r2": r2,
            "n_test": int(held.sum()),
            "coverage": calibration.coverage,
            "what": f"{ensemble_words}, {splits}",
        }

    def _check_fitted(self) -> None:
        if not hasattr(self, "method_"):
            raise MatchoptError("TableOptimizer must be fitted before propose()")

    # -- proposing --

    def _predict(self, designs: np.ndarray) -> np.ndarray:
        """Predictions as matchopt maximizes them (negated target when minimizing)."""
        if self.ranker_ is None:
            return np.asarray(self.method_.predict(designs), dtype=np.float64)
        return self._ensemble_prediction(designs)[0]

    def _propose_designs(self, count: int) -> np.ndarray:
        designs = self.method_.propose_up_to(count)
        designs = self.data_.space.validate(designs, f"designs returned by {self.method}")
        return self._choose_categories(designs)

    def _choose_categories(self, designs: np.ndarray) -> np.ndarray:
        """With ``categories="search"``: each design's categories, one column at a time, the
        best predicted by the ranking surrogate with the rest of the design fixed (the current
        category unless another is predicted strictly higher); a design this would turn into a
        measured row or into an earlier design keeps its own categories."""
        blocks = self.schema_.category_blocks()
        if getattr(self, "categories", "keep") == "keep" or not blocks or len(designs) == 0:
            return designs
        _, designs = self.schema_.canonical(designs)  # exact one-hot blocks, as decoded
        started = designs.copy()
        rows = np.arange(len(designs))
        for _, block in blocks:
            width = block.stop - block.start
            predicted = np.empty((len(designs), width))
            for category in range(width):
                trial = designs.copy()
                trial[:, block] = np.eye(width)[category]
                predicted[:, category] = self._predict(trial)
            current = designs[:, block].argmax(1)
            best = predicted.argmax(1)
            better = predicted[rows, best] > predicted[rows, current]
            designs[better, block] = np.eye(width)[best[better]]
        # A design whose new categories make it a measured row or an earlier design of this
        # batch keeps the method's: many starts would otherwise collapse onto one best row.
        seen = {row.tobytes() for row in self.data_.x.astype(designs.dtype)}
        for index in rows:
            if designs[index].tobytes() in seen:
                designs[index] = started[index]
            seen.add(designs[index].tobytes())
        return designs

    def predict(
        self, data: pd.DataFrame | str | os.PathLike, source: str | None = None
    ) -> pd.DataFrame:
        """Predictions for designs the user gives (a library of candidates), in their order.

        Args:
            data: a DataFrame or the path of a CSV or Parquet file with the measured table's
                feature columns (other columns are ignored).
            source: its name in messages (default: its path, or "candidates").

        Returns:
            The feature columns, then ``predicted_<target>`` with its ``_std`` and its
            ``_low`` / ``_high`` interval, ``extrapolated``, ``ranking_score`` (the method's own
            surrogate, where it ranks) and the distance to the nearest measured row: the
            columns of :meth:`propose`.

        Raises:
            MatchoptError: a missing feature column, an unknown category or letter, a value that
                is not a number (naming file, column and row).
        """
        self._check_fitted()
        with limit_threads(self.threads):
            frame, designs = self._read_candidates(data, source)
            ranking = self._predict(designs)
            distances = self.schema_.nearest_distances(designs, self.data_.x)
            return self._with_predictions(frame, designs, ranking, distances)

    def rank(
        self, data: pd.DataFrame | str | os.PathLike, source: str | None = None
    ) -> pd.DataFrame:
        """:meth:`predict`, best first by the ranking surrogate (the one that orders
        :meth:`propose`); warns of extrapolated predictions as :meth:`propose` does."""
        out = self.predict(data, source)
        schema = self.schema_
        score = out[RANKING_NAME if self.ranker_ is None else schema.prediction_name].to_numpy()
        order = np.argsort(schema.user_scores(-score), kind="stable")  # best first
        out = out.iloc[order].reset_index(drop=True)
        self._warn_extrapolation(out, stacklevel=3)
        return out

    def _read_candidates(
        self, data: pd.DataFrame | str | os.PathLike, source: str | None
    ) -> tuple[pd.DataFrame, np.ndarray]:
        """The candidates' feature columns as given, and their designs."""
        frame, source = read_frame(data, source, "candidates")
        designs = self.schema_.encode_candidates(frame, source)
        frame = frame.set_axis([str(c) for c in frame.columns], axis=1)
        return frame[self.schema_.feature_names].reset_index(drop=True), designs

    def propose(self, n: int = 128) -> pd.DataFrame:
        """Up to ``n`` new rows in the table's format, best predicted first.

        The method's own ``n`` designs come first (what it returns for ``propose(n)``, as in
        a benchmark run); those that repeat a measured row or each other are replaced by the
        best-predicted new designs among further candidates (see the module docstring).

        Columns: the feature columns; ``predicted_<target>``, the prediction of the ensemble
        of Gaussian MLPs fitted on the table (user units), with ``_std`` (its members' spread)
        and ``_low`` / ``_high`` (its conformal interval, calibrated by cross-validation by
        design: :mod:`matchopt.tabular.calibration`); ``extrapolated`` (True where the table
        does not support the prediction); ``ranking_score``, the value of the method's own
        surrogate that orders the rows (absent when the ensemble ranks); and
        ``nearest_euclidean`` or ``nearest_hamming`` (distance to the nearest measured row).
        No row repeats another or a measured row, and rows of tables of columns lie at least
        ``diversity_`` from each other.

        Warns:
            ProposalWarning: fewer than ``n`` new designs were found (the count is given); when
                none is left (all repeat measured rows, or none is ``min_distance`` away), the
                result is empty (the CLI then exits with status 2 and writes nothing).
        """
        with limit_threads(self.threads):
            return self._propose(n)

    def _propose(self, n: int = 128) -> pd.DataFrame:
        self._check_fitted()
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise MatchoptError(f"the number of proposals must be a positive integer, got {n!r}")
        if n > MAX_PROPOSALS:
            raise MatchoptError(f"at most {MAX_PROPOSALS:,} proposals per call, got {n:,}")
        n = int(n)
        pool = _Pool(self.schema_, self.data_.x, self._unseen_tokens())
        own = self._collect(pool, n)
        self._warn_unseen(pool)
        designs, table = pool.designs(), pool.table()
        predicted = self._predict(designs) if len(designs) else np.empty(0)
        schema = self.schema_
        distances = schema.nearest_distances(designs, self.data_.x)
        # The method's own designs come first; the best-predicted extra candidates fill the rest.
        extra = np.arange(len(own), len(designs))
        ranked_extra = extra[np.argsort(-predicted[extra], kind="stable")]
        order = np.concatenate([np.arange(len(own)), ranked_extra]).astype(np.int64)
        order = order[distances[order] >= self.min_distance]
        chosen = self._diverse(designs, order, n)
        searched = len(chosen)
        radius = 0
        if searched < n:
            designs, table, predicted, distances, chosen, radius = self._fill_with_neighbours(
                pool, designs, table, predicted, distances, chosen, n
            )
        self.n_candidates_ = pool.candidates
        if len(chosen) == 0:
            warnings.warn(
                f"no new designs: {self._shortfall_cause(pool, distances)}; try another "
                "method, --bounds or a smaller min_distance",
                ProposalWarning,
                stacklevel=2,
            )
            empty = np.empty((0, *self.data_.x.shape[1:]), dtype=self.data_.x.dtype)
            return self._with_predictions(pool.empty(), empty, np.empty(0), np.empty(0))
        origin = np.where(np.isin(chosen, chosen[:searched]), "search", "neighbour")
        ranked = np.argsort(-predicted[chosen], kind="stable")
        chosen, origin = chosen[ranked], origin[ranked]
        out = self._with_predictions(
            table.iloc[chosen].reset_index(drop=True),
            designs[chosen],
            predicted[chosen],
            distances[chosen],
        )
        if searched < len(out):
            out["origin"] = origin
        if getattr(self, "choice_", None):
            # The member a per-table choice picked, in the file itself (CSV has no metadata);
            # Parquet files also keep the protocol scores in their pandas metadata.
            out["proposed_by"] = self.choice_["choice"]
            out.attrs["matchopt"] = {"method": self.method, **self.choice_}
        self._warn(out, n, searched, radius, lambda: self._shortfall_cause(pool, distances))
        return out

    def _unseen_tokens(self) -> np.ndarray:
        """Tokens of the sequence's alphabet that no measured row uses (``--alphabet`` letters
        the table never shows): the model knows nothing of them."""
        if self.schema_.sequence is None:
            return np.empty(0, dtype=np.int64)
        tokens = np.arange(len(self.schema_.sequence.alphabet))
        return np.setdiff1d(tokens, np.unique(self.data_.x))

    def _warn_unseen(self, pool: _Pool) -> None:
        """One warning where the alphabet holds letters no measured row uses (left out)."""
        if pool.unseen.size:
            letters = "".join(self.schema_.sequence.alphabet[t] for t in pool.unseen)
            warnings.warn(
                f"alphabet letters {letters!r} appear in no row of the table, which says nothing "
                f"of them: no proposal uses them ({pool.left_out:,} candidates with them left "
                "out); measure designs with them to propose them",
                ProposalWarning,
                stacklevel=4,
            )

    def _with_predictions(
        self,
        rows: pd.DataFrame,
        designs: np.ndarray,
        ranking: np.ndarray,
        distances: np.ndarray,
    ) -> pd.DataFrame:
        """``rows`` (the designs in the user's format) with the prediction columns: the
        ensemble's mean, spread and interval in the user's units and sign, the extrapolation
        flag, the ranking surrogate's value where it is the method's own, and the distance to
        the nearest measured row."""
        schema = self.schema_
        prediction = schema.prediction_name
        mean, spread = self._ensemble_prediction(designs) if len(designs) else (ranking, ranking)
        bad = ~(np.isfinite(mean) & np.isfinite(spread) & np.isfinite(ranking))
        if bad.any():  # never an empty cell where a number is due
            raise MatchoptError(
                f"the fitted model predicts NaN or infinite values for {int(bad.sum())} of "
                f"{len(bad)} designs (a damaged model: fit it again)"
            )
        out = rows.copy()
        out[prediction] = schema.user_scores(mean)
        out[schema.spread_name] = spread  # a spread: the same in the user's sign
        calibration = getattr(self, "calibration_", None)
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
        out[FLAG_NAME] = out[FLAG_NAME] | unseen_rows(designs, self._unseen_tokens())
        if self.ranker_ is None:
            out[RANKING_NAME] = schema.user_scores(ranking)
        out[schema.distance_name] = (
            distances.astype(np.int64) if schema.sequence is not None else distances
        )
        return out

    def _collect(self, pool: _Pool, n: int) -> np.ndarray:
        """The method's own designs into ``pool`` (returned), then the top-up candidates: more
        of its designs while fewer than ``n`` are new (module docstring, 1-3)."""
        cap = self.method_.proposal_cap(len(self.data_))
        first = n if cap is None else min(n, cap)
        count = self.oversample * n if cap is None else min(self.oversample * n, cap)
        if self.method_.ranked_proposals:
            # One call gives both: its best `first` designs, then every design up to the cap.
            run = self._propose_designs(count if cap is None else cap)
            own = pool.add(run[:first])
            if len(own) < n:
                pool.add(run)
            return own
        own = pool.add(self._propose_designs(first))
        for _ in range(MAX_ROUNDS if cap is None else 1):
            if pool.size >= n:
                break
            if count > first:  # a call for `first` designs again would repeat them
                pool.add(self._propose_designs(count))
            count *= 4
        return own

    def _warn(
        self, out: pd.DataFrame, n: int, searched: int, radius: int, cause: Callable[[], str]
    ) -> None:
        """The warnings of a proposal table: neighbours used, fewer than ``n`` (``cause()``
        says why, computed only then), predictions below the best measured value."""
        schema = self.schema_
        if searched < len(out):
            moved = "changed letters" if schema.sequence is not None else "steps of std/4"
            warnings.warn(
                f"{searched} of the {len(out)} proposals come from {self.method}'s search (the "
                "others it returned repeat measured rows or each other, or fail the distance "
                f"limits); the other {len(out) - searched} are the best-predicted neighbours "
                f"(1 to {radius} {moved}) of them and of the best measured rows, ranked by "
                f"{self.ranking_} (column origin)",
                ProposalWarning,
                stacklevel=4,
            )
        if len(out) < n:
            warnings.warn(
                f"only {len(out)} new designs (asked for {n}): {cause()}",
                ProposalWarning,
                stacklevel=4,
            )
        self._warn_extrapolation(out, stacklevel=5)
        top = out[schema.prediction_name].max() if len(out) else None
        if schema.minimize and len(out):
            top = out[schema.prediction_name].min()
        best = schema.user_scores(np.array([self.data_.y.max()]))[0]
        # In the user's sign: when minimizing, the best prediction is the lowest one.
        if top is not None and (top > best if schema.minimize else top < best):
            most, worse = ("at least", "above") if schema.minimize else ("at most", "below")
            warnings.warn(
                f"the surrogate predicts {most} {top:.4g} for the proposals, {worse} the best "
                f"measured value {best:.4g}: its predictions are shrunk toward the mean (or the "
                "proposals are worse); read them as a ranking, not as expected values",
                ProposalWarning,
                stacklevel=4,
            )

    def _warn_extrapolation(self, out: pd.DataFrame, stacklevel: int) -> None:
        """A warning naming how many predictions the table does not support, and why."""
        calibration = getattr(self, "calibration_", None)
        if calibration is None or not len(out) or not out[FLAG_NAME].any():
            return
        schema = self.schema_
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

    def _diverse(
        self, designs: np.ndarray, order: np.ndarray, n: int, kept: Sequence[int] = ()
    ) -> np.ndarray:
        """``kept``, then the first of ``order`` that are at least ``diversity`` from each other
        and from ``kept``, up to ``n`` in all."""
        kept = [int(i) for i in kept]
        diversity = self.diversity_
        if not diversity:
            return np.asarray(kept + [int(i) for i in order[: max(0, n - len(kept))]], np.int64)
        for index in order:
            if len(kept) == n:
                break
            if not kept or (
                self.schema_.nearest_distances(designs[index : index + 1], designs[kept])[0]
                >= diversity
            ):
                kept.append(int(index))
        return np.asarray(kept, dtype=np.int64)

    def _fill_with_neighbours(
        self,
        pool: _Pool,
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
        schema = self.schema_
        rng = np.random.default_rng([self.seed, NEIGHBOUR_STREAM])
        best_rows = self.data_.x[top_rows(self.data_.y, min(len(self.data_), n))]
        width = designs.shape[1] if designs.ndim == 2 else self.data_.x.shape[1]
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
            new_predicted = self._predict(new)
            new_distances = schema.nearest_distances(new, self.data_.x)
            first = len(designs)
            designs = np.concatenate([designs, new.astype(designs.dtype)])
            predicted = np.concatenate([predicted, new_predicted])
            distances = np.concatenate([distances, new_distances])
            order = first + np.argsort(-new_predicted, kind="stable")
            order = order[distances[order] >= self.min_distance]
            chosen = self._diverse(designs, order, n, kept=chosen)
        return designs, pool.table(), predicted, distances, chosen, radius

    def _shortfall_cause(self, pool: _Pool, distances: np.ndarray) -> str:
        """Why fewer designs than asked for came back, in words."""
        schema = self.schema_
        if schema.sequence is not None:
            k, length = len(schema.sequence.alphabet), schema.sequence.length
            if length * math.log10(k) < 15:
                left = k**length - len(np.unique(self.data_.x, axis=0))
                if pool.size >= left:
                    return f"the space holds only {left:,} sequences not measured"
        why = f"the {pool.candidates:,} candidates (the method's and their neighbours) "
        if self.min_distance and (not len(distances) or distances.max() < self.min_distance):
            farthest = f"{distances.max():.4g}" if len(distances) else "none"
            return why + (
                f"hold none at least min_distance {self.min_distance:g} from every measured "
                f"row (the farthest is {farthest})"
            )
        why += "repeat measured rows or each other"
        if self.min_distance or self.diversity_:
            why += " or are closer than min_distance / diversity allow"
        return why

    # -- the report --

    def report_context(
        self, proposals: pd.DataFrame, command: str = "", warnings: Sequence[str] = ()
    ) -> ReportContext:
        """What the HTML report of ``proposals`` (from :meth:`propose` or :meth:`rank`)
        shows: the cross-validation, the proposals against the data, what was chosen and the
        settings that reproduce them."""
        self._check_fitted()
        schema, data = self.schema_, self.data_
        groups = design_groups(data.x)
        distinct = data.x[np.unique(groups, return_index=True)[1]]
        data_distances = (
            schema.nearest_other_distances(distinct, design_sample(len(distinct), self.seed))
            if len(distinct) > 1
            else np.zeros(0)
        )
        observed = schema.user_scores(data.y)
        cross = getattr(self, "cross_validation_", {}) or {}
        calibration = getattr(self, "calibration_", None)
        cv = None
        if calibration is not None and "predicted" in cross:
            low, high = (schema.user_scores(cross[key]) for key in ("low", "high"))
            cv = {
                "observed": observed,
                "predicted": schema.user_scores(cross["predicted"]),
                "low": np.minimum(low, high),
                "high": np.maximum(low, high),
                "spearman": cross["spearman"],
                "r2": cross["r2"],
                "coverage": calibration.coverage,
                "confidence": calibration.confidence,
                "n_rows": cross["n_rows"],
                "n_designs": cross["n_designs"],
                "splits": cross["splits"],
            }
        prediction = schema.prediction_name
        choice = [
            f"method {self.method} (preset {self.preset_}, seed {self.seed})",
            f"rows ranked by {self.ranking_}",
            f"{prediction} and its interval: {self._ensemble_words()}, calibrated by "
            f"cross-validation ({cross.get('splits', 'none')})",
            f"proposals at least {self.diversity_:g} apart and {self.min_distance:g} from every "
            f"measured row ({schema.distance_name})",
        ]
        if getattr(self, "choice_", None):
            scores = ", ".join(f"{k} {v:.3f}" for k, v in self.choice_["protocol"].items())
            choice.append(f"per-table choice: {self.choice_['choice']} (scores: {scores})")
        settings = {
            "table": self.source_,
            "target": f"{self.target} ({'minimize' if self.minimize else 'maximize'})",
            "design": schema.describe(),
            "method": self.method,
            "preset": self.preset_,
            "overrides": ", ".join(f"{k}={v}" for k, v in (self.overrides or {}).items()) or "none",
            "seed": str(self.seed),
            "diversity": f"{self.diversity_:g}",
            "min_distance": f"{self.min_distance:g}",
            "categories": str(getattr(self, "categories", "keep")),
            "oversample": str(self.oversample),
            "matchopt": __version__,
        }
        return ReportContext(
            source=self.source_,
            target=self.target,
            minimize=self.minimize,
            observed=observed,
            cv=cv,
            proposals=proposals,
            prediction=prediction,
            low=f"{prediction}_low",
            high=f"{prediction}_high",
            flag=FLAG_NAME,
            distance=schema.distance_name,
            data_distances=data_distances,
            choice=choice,
            settings=settings,
            command=command or self._api_command(),
            warnings=list(warnings),
            n_designs=len(distinct),
        )

    def write_report(
        self,
        path: str | Path,
        proposals: pd.DataFrame,
        command: str = "",
        warnings: Sequence[str] = (),
    ) -> Path:
        """Write the self-contained HTML report of ``proposals`` (:meth:`report_context`)
        atomically; returns its path."""
        path = check_output_path(path, "report", (".html", ".htm"))
        return write_report(path, self.report_context(proposals, command, warnings))

    def _api_command(self) -> str:
        """The Python call that reproduces the fit (for reports of API runs)."""
        options = {
            "features": self.features, "categorical": list(self.categorical) or None,
            "sequence": self.sequence, "alphabet": self.alphabet, "minimize": self.minimize,
            "bounds": self.bounds, "method": self.method, "preset": self.preset,
            "overrides": self.overrides, "seed": self.seed, "diversity": self.diversity,
        }  # fmt: skip
        given = ", ".join(f"{k}={v!r}" for k, v in options.items() if v not in (None, False))
        return f"TableOptimizer(target={self.target!r}, {given}).fit({self.source_!r})"

    def _ensemble_words(self) -> str:
        params = self._ensemble_params()
        return (
            f"an ensemble of {params.n_models} Gaussian MLPs (hidden {params.hidden}, "
            f"{params.epochs} epochs)"
        )

    # -- saving --

    def to_bytes(self) -> bytes:
        """The fitted optimizer as the bytes of a model file (:mod:`matchopt.state`: JSON and
        tensors, no pickle)."""
        self._check_fitted()
        return state_bytes(self, MODEL_KIND)

    def save(self, path: str | Path) -> Path:
        """Write the fitted optimizer to ``path`` atomically; :meth:`load` reads it back."""
        path = check_output_path(path, "model")
        write_file(path, self.to_bytes())
        return path

    @classmethod
    def load(cls, path: str | Path) -> TableOptimizer:
        """Read a model file written by :meth:`save` (loading it cannot run code, and what it
        holds is checked before use: see :meth:`load_bytes`).

        Raises:
            TypeError: ``path`` is not a path (str or os.PathLike).
            MatchoptError: see :meth:`load_bytes`.
        """
        path = as_path(path, "TableOptimizer.load's path")
        return cls.load_bytes(read_model_file(path), str(path))

    @classmethod
    def load_bytes(cls, data: bytes, source: str = "model") -> TableOptimizer:
        """The optimizer in the bytes of a model file (:meth:`to_bytes`).

        Every object is checked as it is rebuilt (:mod:`matchopt.state`; the optimizer's own
        attributes by ``__matchopt_check__``), then the ranking surrogate and the ensemble
        predict the first measured rows, so that a crafted or damaged file fails here, with one
        message naming ``source``, and not when proposing.

        Raises:
            TypeError: ``data`` is not bytes, a bytearray or a memoryview.
            MatchoptError: not a model file of a table optimizer (checked before any object is
                built; a pickle is refused unread), over the size limits, or holding objects
                that fail their checks.
        """
        optimizer = load_state(data, MODEL_KIND, source)
        if not isinstance(optimizer, cls) or not hasattr(optimizer, "method_"):
            raise MatchoptError(f"{source}: not a matchopt model file (saved by --save-model)")
        # Files are read onto the CPU, whatever device wrote them (as Method.load).
        optimizer.device = optimizer.method_.device = "cpu"
        check_loaded(optimizer.method_, source)
        rows = optimizer.data_.x[:2]
        check_predictions(
            source,
            "its surrogates fail to predict the measured rows",
            lambda: (*optimizer._ensemble_prediction(rows), optimizer._predict(rows)),
            len(rows),
            finite=True,
        )
        return optimizer

    def __matchopt_check__(self) -> None:
        """Checks of an optimizer read from a model file (:mod:`matchopt.state`; its schema,
        method, data, encoder and ensemble are checked there by their own classes): every
        setting and fitted attribute that :meth:`propose` uses is there, of its type and in
        range, and the parts fit each other."""
        check_str(self, "target")
        names = "column names"
        check_items(self, "features", lambda c: isinstance(c, str), names, none=True)
        check_items(
            self,
            "categorical",
            lambda c: isinstance(c, str),
            names,
            kinds=(tuple, list, set, frozenset, str),
        )
        check_str(self, "sequence", none=True)
        check_str(self, "alphabet", none=True)
        check_bool(self, "minimize")
        check_type(self, "bounds", dict, none=True)
        check_type(self, "overrides", dict, none=True)
        entry = get_method_entry(check_str(self, "method"))
        check_str(self, "preset", none=True)
        check_str(self, "preset_", choices=tuple(entry.cls.presets))
        check_int(self, "seed", 0, MAX_SEED)
        check_int(self, "oversample", 1, MAX_OVERSAMPLE)
        check_bool(self, "progress")
        check_int(self, "threads", 1, none=True)
        check_number(self, "min_distance", 0.0)
        check_number(self, "diversity", 0.0, none=True)
        check_str(self, "device", none=True)
        if "categories" in vars(self):  # files of matchopt before --categories keep them as-is
            check_str(self, "categories", choices=CATEGORY_CHOICES)
        schema = check_type(self, "schema_", TableSchema)
        method = check_type(self, "method_", entry.cls)
        data = check_type(self, "data_", OfflineData)
        check_str(self, "source_")
        check_str(self, "ranking_")
        encoder = check_type(self, "ensemble_encoder_", DesignEncoder)
        ensemble = check_type(self, "ensemble_", GaussianEnsemble)
        ranker = check_type(self, "ranker_", GaussianEnsemble, none=True)
        check_type(self, "fit_quality_", dict, none=True)
        if "calibration_" in vars(self):  # files of matchopt before intervals have none
            check_type(self, "calibration_", Calibration, none=True)
            cross = check_type(self, "cross_validation_", dict)
            for key in ("predicted", "low", "high", "fold"):
                value = cross.get(key)
                if value is not None and (
                    not isinstance(value, np.ndarray) or value.shape != (len(self.data_),)
                ):
                    raise MatchoptError(f"cross_validation_[{key!r}] is not one value per row")
        if "choice_" in vars(self):  # files of matchopt before per-table choices have none
            choice = check_type(self, "choice_", dict, none=True)
            if choice is not None and not _is_choice_report(choice):
                raise MatchoptError("choice_ is not a per-table choice's report")
        if "n_candidates_" in vars(self):
            check_int(self, "n_candidates_", 0)
        if ranker is not None and ranker is not ensemble:
            raise MatchoptError("ranker_ is another ensemble than ensemble_")
        if ranker is None and not has_surrogate(method):
            raise MatchoptError(f"ranker_ is None, but {type(method).__name__} cannot rank")
        if schema.space != data.space:
            raise MatchoptError(
                f"schema_ describes {schema.space.describe()} but data_ holds "
                f"{data.space.describe()}"
            )
        if not isinstance(getattr(method, "data_", None), OfflineData):
            raise MatchoptError("method_ is not fitted")
        if method.data_.space != data.space or len(method.data_) != len(data):
            raise MatchoptError("method_ was fitted on other data than data_")
        if encoder.space != data.space or "x_scaler_" not in vars(encoder):
            raise MatchoptError("ensemble_encoder_ is not fitted on data_")
        if ensemble.in_features != encoder.n_features:
            raise MatchoptError(
                f"ensemble_ takes {ensemble.in_features} features, its encoder gives "
                f"{encoder.n_features}"
            )


class _Pool:
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
