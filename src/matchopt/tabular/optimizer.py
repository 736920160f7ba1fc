"""Optimize a user's own table: the table optimizer, and the run of ``matchopt optimize``.

:class:`TableOptimizer` chains the parts (scikit-learn style: ``__init__`` stores parameters,
``fit`` validates and learns, learned state ends in ``_``)::

    opt = TableOptimizer(target="yield", categorical=["solvent"], method="matchopt", seed=0)
    proposals = opt.fit(frame).propose(128)  # a DataFrame in the table's own format

The parts, one module each, in the order a run uses them:

1. :mod:`.settings`: the settings (:class:`~.settings.OptimizeSettings`), checked once, before
   any work (:func:`~.settings.check_settings`; a command line run: :func:`~.settings.check_job`);
2. :mod:`.schema`: reading the table and mapping its rows to designs and back;
3. :mod:`.fit`: fitting the method, the ensemble that predicts, its calibration;
4. :mod:`.propose`: proposing new rows, ranking the user's candidates (how proposals are made:
   that module's notes);
5. :mod:`.outputs`: the files: proposals, the HTML report, the model file.

:func:`run_optimize` is ``matchopt optimize``: the command line builds one
:class:`~.settings.OptimizeJob` and hands it over; the run goes through the parts above once
each, in that order.

Saving (:meth:`TableOptimizer.save`) writes the whole fitted optimizer (schema, method with its
configuration, seed and trained networks, ranking surrogate) as JSON and tensors
(:mod:`matchopt.state`): loading a model file builds only matchopt's own objects and cannot run
code.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from matchopt.data import OfflineData
from matchopt.encodings import DesignEncoder
from matchopt.errors import MatchoptError, printable
from matchopt.methods import RECOMMENDED_METHOD, get_method_entry
from matchopt.methods.base import Method, has_surrogate
from matchopt.methods.persistence import check_loaded
from matchopt.methods.wrappers import is_fitted
from matchopt.models import GaussianEnsemble
from matchopt.runtime import MAX_SEED, limit_threads, resolve_device
from matchopt.safe_paths import as_path
from matchopt.state import check_predictions, load_state, read_model_file, state_bytes
from matchopt.state_checks import (
    check_bool,
    check_int,
    check_items,
    check_number,
    check_str,
    check_type,
)
from matchopt.tabular.calibration import Calibration
from matchopt.tabular.fit import (
    calibrate,
    ensemble_prediction,
    ensemble_words,
    fit_ensemble,
    fit_method,
    fit_summary,
    is_choice_report,
)
from matchopt.tabular.outputs import (
    ReportContext,
    check_output_path,
    report_context,
    write_file,
    write_outputs,
    write_report_file,
)
from matchopt.tabular.propose import (
    ProposalWarning,
    predict_rows,
    propose_rows,
    rank_rows,
)
from matchopt.tabular.schema import (
    TableSchema,
    check_column_names,
    check_output_names,
    read_frame,
    read_table,
)
from matchopt.tabular.settings import (
    CATEGORY_CHOICES,
    DISTINCT_DISTANCE,
    MAX_OVERSAMPLE,
    CheckedSettings,
    OptimizeJob,
    OptimizeSettings,
    check_count,
    check_job,
    check_settings,
)

#: What a saved model file holds under "kind".
MODEL_KIND = "table-optimizer"


# --- The run of ``matchopt optimize`` -------------------------------------------------------------


def run_optimize(job: OptimizeJob) -> int:
    """``matchopt optimize``: check the job, read the tables, fit, propose (or rank the
    candidates), write the files; returns the exit status (0).

    Every check that needs no table comes first, before the (possibly long) fit; the model
    file's bytes are taken before proposing (what :meth:`TableOptimizer.save` would write).

    Raises:
        MatchoptError: a bad setting, path or table (one line, for the command line).
    """
    paths, checked = check_job(job)
    candidates = read_table(job.candidates) if job.candidates else None
    frame = read_table(job.data)
    optimizer = TableOptimizer.from_settings(job.settings)
    with limit_threads(optimizer.threads):
        optimizer._fit_checked(frame, job.data, checked)
    for line in fit_summary(optimizer, job.data):
        print(line, file=sys.stderr)
    model = optimizer.to_bytes() if paths.model is not None else None
    proposals, messages = make_proposals(optimizer, job.n, candidates, job.candidates)
    ranked = candidates is not None
    write_outputs(optimizer, proposals, messages, paths, job.command, ranked, model)
    return 0


def make_proposals(
    optimizer: TableOptimizer,
    n: int,
    candidates: pd.DataFrame | None = None,
    source: str | None = None,
) -> tuple[pd.DataFrame, list[str]]:
    """The proposals (or the ranked ``candidates``) of a command line run, and the texts of the
    proposal warnings, each printed as one line on stderr. ``n`` was checked with the run's
    other settings (:func:`~.settings.check_count`).

    Raises:
        MatchoptError: no proposal could be made (nothing is written then).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ProposalWarning)
        if candidates is not None:
            proposals = optimizer.rank(candidates, source=source)
        else:  # n was checked with the run's other settings
            with limit_threads(optimizer.threads):
                proposals = optimizer._propose(n)
    messages = []
    for warning in caught:
        if issubclass(warning.category, ProposalWarning):
            messages.append(str(warning.message))
            print(f"matchopt: warning: {printable(warning.message)}", file=sys.stderr)
        else:
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    if len(proposals) == 0:
        raise MatchoptError(
            f"no proposal could be made ({optimizer.n_candidates_} candidates, all repeating "
            "measured rows or filtered out); nothing written"
        )
    return proposals, messages


def new_method(checked: CheckedSettings) -> Method:
    """The method ``checked`` names, with its config, seed and device, unfitted."""
    settings = checked.settings
    return checked.entry.cls(
        checked.config, seed=settings.seed, progress=settings.progress, device=settings.device
    )


def read_designs(
    frame: pd.DataFrame, source: str, checked: CheckedSettings
) -> tuple[TableSchema, OfflineData]:
    """The table's schema and its rows as designs and scores (:class:`TableSchema`), checked:
    column names, the columns the settings name, no feature named like an output column, and
    enough rows for the method."""
    settings = checked.settings
    check_column_names(list(frame.columns), source)
    # Columns are addressed by their text name everywhere (CLI options, output files).
    attrs = dict(frame.attrs)
    frame = frame.set_axis([str(c) for c in frame.columns], axis=1)
    frame.attrs.update(attrs)
    schema = TableSchema.infer(
        frame,
        settings.target,
        features=settings.features,
        categorical=settings.categorical,
        sequence=settings.sequence,
        alphabet=settings.alphabet,
        minimize=settings.minimize,
        bounds=settings.bounds,
        source=source,
    )
    check_output_names(schema, source)
    need, why = checked.entry.cls.min_rows(checked.config)
    if len(frame) < need:
        raise MatchoptError(
            f"{source}: method {settings.method} (preset {checked.preset}) needs at least {need} "
            f"rows ({why}); {source} has {len(frame)}"
        )
    return schema, OfflineData(
        schema.encode(frame, source), schema.scores(frame, source), schema.space
    )


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
            ranking surrogate, one column at a time (:mod:`.propose`); ``keep``: as the
            method's search left them (almost always its start row's).

    The arguments are the fields of :class:`~.settings.OptimizeSettings`
    (:meth:`from_settings` takes one); :meth:`fit` checks them once
    (:func:`~.settings.check_settings`), before the table is read.

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

    @classmethod
    def from_settings(cls, settings: OptimizeSettings) -> TableOptimizer:
        """An unfitted optimizer of ``settings`` (as its keyword arguments)."""
        return cls(**{field.name: getattr(settings, field.name) for field in fields(settings)})

    def settings(self) -> OptimizeSettings:
        """The optimizer's settings, as its parameters are now."""
        return OptimizeSettings(
            **{f.name: getattr(self, f.name, f.default) for f in fields(OptimizeSettings)}
        )

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
        """Validate the settings and the table, fit the method (and a ranking surrogate if
        needed); returns self.

        Args:
            data: a DataFrame, or the path of a CSV or Parquet file.
            source: the table's name in messages (default: its path, or "data").

        Raises:
            MatchoptError: bad settings (:func:`~.settings.check_settings`, before the table is
                read), a bad table (naming file, column, row, value), or too few rows for the
                method.
        """
        checked = check_settings(self.settings())
        with limit_threads(self.threads):
            frame, source = read_frame(data, source, "data")
            return self._fit_checked(frame, source, checked)

    def _fit_checked(
        self, frame: pd.DataFrame, source: str, checked: CheckedSettings
    ) -> TableOptimizer:
        """Fit on ``frame`` with settings already checked: its designs (:func:`read_designs`),
        then the method, the ensemble and its calibration (:mod:`.fit`)."""
        self.preset_ = checked.preset
        schema, data = read_designs(frame, source, checked)
        method, self.choice_ = fit_method(new_method(checked), data)
        self.ensemble_encoder_, self.ensemble_ = fit_ensemble(
            data, checked.preset, self.seed, self.progress, checked.device
        )
        if has_surrogate(method):
            self.ranker_ = None
            self.ranking_ = f"{self.method}'s own surrogate"
        else:
            self.ranker_ = self.ensemble_
            self.ranking_ = (
                f"{ensemble_words(checked.preset)} fitted for ranking ({self.method} has no "
                "surrogate)"
            )
        self.schema_, self.method_, self.data_, self.source_ = schema, method, data, source
        self.cross_validation_, self.calibration_, self.fit_quality_ = calibrate(
            schema, data, checked.preset, self.seed, self.progress, checked.device
        )
        return self

    def _fit_ensemble(
        self, data: OfflineData, progress: bool | None = None
    ) -> tuple[DesignEncoder, GaussianEnsemble]:
        """An ensemble fitted on ``data`` as the optimizer fits its own (:func:`.fit_ensemble`)."""
        progress = self.progress if progress is None else progress
        return fit_ensemble(data, self.preset_, self.seed, progress, self.device_)

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
        return ensemble_prediction(designs, encoder, ensemble, self.device_)

    def _check_fitted(self) -> None:
        if not hasattr(self, "method_"):
            raise MatchoptError("TableOptimizer must be fitted before propose()")

    # -- proposing --

    def _predict(self, designs: np.ndarray) -> np.ndarray:
        """Predictions as matchopt maximizes them (negated target when minimizing)."""
        if self.ranker_ is None:
            return np.asarray(self.method_.predict(designs), dtype=np.float64)
        return self._ensemble_prediction(designs)[0]

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
            return predict_rows(self, data, source)

    def rank(
        self, data: pd.DataFrame | str | os.PathLike, source: str | None = None
    ) -> pd.DataFrame:
        """:meth:`predict`, best first by the ranking surrogate (the one that orders
        :meth:`propose`); warns of extrapolated predictions as :meth:`propose` does."""
        return rank_rows(self, self.predict(data, source))

    def propose(self, n: int = 128) -> pd.DataFrame:
        """Up to ``n`` new rows in the table's format, best predicted first.

        The method's own ``n`` designs come first (what it returns for ``propose(n)``, as in
        a benchmark run); those that repeat a measured row or each other are replaced by the
        best-predicted new designs among further candidates (see :mod:`.propose`).

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
        self._check_fitted()
        n = check_count(n, None)
        with limit_threads(self.threads):
            return self._propose(n)

    def _propose(self, n: int) -> pd.DataFrame:
        """:meth:`propose` with ``n`` already checked (:func:`.propose.propose_rows`)."""
        return propose_rows(self, n)

    # -- the report --

    def report_context(
        self, proposals: pd.DataFrame, command: str = "", warnings: Sequence[str] = ()
    ) -> ReportContext:
        """What the HTML report of ``proposals`` (from :meth:`propose` or :meth:`rank`)
        shows (:func:`.outputs.report_context`)."""
        self._check_fitted()
        return report_context(self, proposals, command, warnings)

    def write_report(
        self,
        path: str | Path,
        proposals: pd.DataFrame,
        command: str = "",
        warnings: Sequence[str] = (),
    ) -> Path:
        """Write the self-contained HTML report of ``proposals`` (:meth:`report_context`)
        atomically; returns its path."""
        self._check_fitted()
        return write_report_file(self, path, proposals, command, warnings)

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
        entry = _check_loaded_settings(self)
        _check_loaded_parts(self, entry)


def _check_loaded_settings(optimizer: TableOptimizer) -> Any:
    """The settings of an optimizer read from a model file, of their types and in range;
    returns its method's registry entry."""
    opt = optimizer
    check_str(opt, "target")
    names = "column names"
    check_items(opt, "features", lambda c: isinstance(c, str), names, none=True)
    check_items(
        opt,
        "categorical",
        lambda c: isinstance(c, str),
        names,
        kinds=(tuple, list, set, frozenset, str),
    )
    check_str(opt, "sequence", none=True)
    check_str(opt, "alphabet", none=True)
    check_bool(opt, "minimize")
    check_type(opt, "bounds", dict, none=True)
    check_type(opt, "overrides", dict, none=True)
    entry = get_method_entry(check_str(opt, "method"))
    check_str(opt, "preset", none=True)
    check_str(opt, "preset_", choices=tuple(entry.cls.presets))
    check_int(opt, "seed", 0, MAX_SEED)
    check_int(opt, "oversample", 1, MAX_OVERSAMPLE)
    check_bool(opt, "progress")
    check_int(opt, "threads", 1, none=True)
    check_number(opt, "min_distance", 0.0)
    check_number(opt, "diversity", 0.0, none=True)
    check_str(opt, "device", none=True)
    if "categories" in vars(opt):  # files of matchopt before --categories keep them as-is
        check_str(opt, "categories", choices=CATEGORY_CHOICES)
    return entry


def _check_loaded_parts(optimizer: TableOptimizer, entry: Any) -> None:
    """The fitted attributes of an optimizer read from a model file: there, of their types,
    and fitting each other."""
    opt = optimizer
    schema = check_type(opt, "schema_", TableSchema)
    method = check_type(opt, "method_", entry.cls)
    data = check_type(opt, "data_", OfflineData)
    check_str(opt, "source_")
    check_str(opt, "ranking_")
    encoder = check_type(opt, "ensemble_encoder_", DesignEncoder)
    ensemble = check_type(opt, "ensemble_", GaussianEnsemble)
    ranker = check_type(opt, "ranker_", GaussianEnsemble, none=True)
    check_type(opt, "fit_quality_", dict, none=True)
    _check_loaded_reports(opt)
    if ranker is not None and ranker is not ensemble:
        raise MatchoptError("ranker_ is another ensemble than ensemble_")
    if ranker is None and not has_surrogate(method):
        raise MatchoptError(f"ranker_ is None, but {type(method).__name__} cannot rank")
    if schema.space != data.space:
        raise MatchoptError(
            f"schema_ describes {schema.space.describe()} but data_ holds {data.space.describe()}"
        )
    if not is_fitted(method) or not isinstance(method.data_, OfflineData):
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


def _check_loaded_reports(opt: TableOptimizer) -> None:
    """The calibration, cross-validation, per-table choice and candidate count of an optimizer
    read from a model file (files of older versions lack some)."""
    if "calibration_" in vars(opt):  # files of matchopt before intervals have none
        check_type(opt, "calibration_", Calibration, none=True)
        cross = check_type(opt, "cross_validation_", dict)
        for key in ("predicted", "low", "high", "fold"):
            value = cross.get(key)
            if value is not None and (
                not isinstance(value, np.ndarray) or value.shape != (len(opt.data_),)
            ):
                raise MatchoptError(f"cross_validation_[{key!r}] is not one value per row")
    if "choice_" in vars(opt):  # files of matchopt before per-table choices have none
        choice = check_type(opt, "choice_", dict, none=True)
        if choice is not None and not is_choice_report(choice):
            raise MatchoptError("choice_ is not a per-table choice's report")
    if "n_candidates_" in vars(opt):
        check_int(opt, "n_candidates_", 0)
