"""The files of a table optimizer's run: where they may go, and writing them.

``matchopt optimize`` and ``matchopt propose`` write up to three files: the proposals (or ranked
candidates) as CSV or Parquet, the self-contained HTML report (:mod:`.report_page`; its content
is gathered by :func:`report_context`) and the model file. :func:`check_outputs` checks every
path before any work; :func:`write_outputs` writes the files, each atomically (a temporary file,
then a rename: never a partial file), then shows the best rows and where the files went.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from matchopt._version import __version__
from matchopt.data import design_groups
from matchopt.errors import MatchoptError, printable
from matchopt.io import atomic_write_bytes
from matchopt.names import DEFAULT_OUT
from matchopt.safe_paths import name_max
from matchopt.tabular.calibration import design_sample
from matchopt.tabular.fit import ensemble_words
from matchopt.tabular.report_page import ReportContext, write_report
from matchopt.tabular.schema import CSV_SUFFIXES, FLAG_NAME, PARQUET_SUFFIXES

if TYPE_CHECKING:
    from matchopt.tabular.fitted import FittedTable

#: Suffixes proposals can be written as.
OUTPUT_SUFFIXES = CSV_SUFFIXES + PARQUET_SUFFIXES
#: Suffixes of the report.
REPORT_SUFFIXES = (".html", ".htm")


# --- Paths ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputPaths:
    """The checked files of a run: proposals (or ranked candidates), report, model."""

    out: Path
    """The proposals (or ranked candidates) file."""
    report: Path
    """The HTML report."""
    model: Path | None = None
    """The model file (``--save-model``), None when not saved."""


def check_outputs(
    out: str | None,
    report: str | None,
    model: str | None,
    force: bool,
    inputs: Sequence[str | Path],
) -> OutputPaths:
    """The output files of a run, checked before any work (:func:`check_output_path`).

    Args:
        out: ``--out``; None = :data:`~matchopt.names.DEFAULT_OUT`, only where no such file is.
        report: ``--report``; None = ``<out's name>.report.html`` beside ``out``.
        model: ``--save-model``, or None.
        force: replace files that exist (else an existing file is refused).
        inputs: files the run reads (no output may be one of them).

    Raises:
        MatchoptError: a path that cannot be written, that exists (without ``force``), that is
            an input, or two outputs that name the same file.
    """
    # What a path is (a folder, the input file) is said before that it exists.
    given = DEFAULT_OUT if out is None else out
    out_path = check_output_path(given, "--out", OUTPUT_SUFFIXES, inputs=inputs)
    _refuse_existing(given, "--out", force, named=out is not None)
    given = report or out_path.with_name(f"{out_path.stem}.report.html")
    report_path = check_output_path(given, "--report", REPORT_SUFFIXES, inputs=inputs)
    _refuse_existing(str(given), "--report", force, named=report is not None)
    if report_path.resolve() == out_path.resolve():
        raise MatchoptError("--report and --out name the same file")
    model_path = None
    if model:
        model_path = check_output_path(model, "--save-model", inputs=inputs)
        _refuse_existing(model, "--save-model", force, named=True)
        if model_path.resolve() in (out_path.resolve(), report_path.resolve()):
            raise MatchoptError("--save-model names the same file as --out or --report")
    return OutputPaths(out_path, report_path, model_path)


def _refuse_existing(path: str, option: str, force: bool, named: bool) -> None:
    """Refuse a file that exists, without ``force``: a file the user did not name (a default)
    is never overwritten, and one the user named only with ``--force``."""
    if force or not os.path.lexists(path):
        return
    if named:
        raise MatchoptError(f"{option} {printable(path)} exists; add --force to replace it")
    raise MatchoptError(
        f"{printable(path)} exists (the default of {option}); name another file with {option}, "
        "or add --force to replace it"
    )


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


# --- Writing --------------------------------------------------------------------------------------


def write_outputs(
    optimizer: FittedTable,
    proposals: pd.DataFrame,
    messages: Sequence[str],
    paths: OutputPaths,
    command: str,
    ranked: bool = False,
    model: bytes | None = None,
) -> None:
    """Write every file (the table, the report, and ``model``'s bytes where given; each
    atomically), then show the best rows and where the files went. The files come first: a
    stdout that fails (a full disk) loses nothing, and a failure says which files were written
    and which were not.

    Args:
        optimizer: the fitted optimizer that made ``proposals``.
        proposals: the proposals, or the ranked candidates (``ranked``).
        messages: the proposal warnings, for the report.
        paths: the checked output files (:func:`check_outputs`).
        command: the command that reproduces the run, for the report.
        ranked: ``proposals`` are the user's candidates, ranked.
        model: the model file's bytes (written to ``paths.model``), or None.
    """
    files = [("ranked candidates" if ranked else "proposals", paths.out), ("report", paths.report)]
    writes = [
        lambda: write_table(proposals, paths.out),
        lambda: write_report_file(optimizer, paths.report, proposals, command, messages),
    ]
    if model is not None and paths.model is not None:
        files.append(("model", paths.model))
        writes.append(lambda: write_file(paths.model, model))
    for done, write in enumerate(writes):
        try:
            write()
        except (MatchoptError, OSError) as err:
            why = printable(err) if isinstance(err, MatchoptError) else err.strerror or err
            raise MatchoptError(f"{why}; {_written(files[:done], files[done:])}") from None
    try:
        print(f"  ranked by {printable(optimizer.ranking_)}", file=sys.stderr)
        lines = proposals.head(10).to_string(index=False).splitlines()
        print("\n".join(printable(line, 20_000) for line in lines))
        what = "ranked candidates" if ranked else "proposals"
        print(f"{len(proposals)} {what} -> {printable(paths.out)}")
        for name, path in files[1:]:
            print(f"{name} -> {printable(path)}")
        sys.stdout.flush()
    except OSError as err:
        raise MatchoptError(
            f"cannot show the results on stdout: {err.strerror or err}; {_written(files, [])}"
        ) from None


def _written(written: list[tuple[str, Path]], not_written: list[tuple[str, Path]]) -> str:
    """Which output files were written and which not, in words (for an error message)."""
    parts = []
    if written:
        parts.append("written: " + ", ".join(f"{n} {printable(p)}" for n, p in written))
    if not_written:
        parts.append("NOT written: " + ", ".join(f"{n} {printable(p)}" for n, p in not_written))
    return "; ".join(parts)


def write_report_file(
    optimizer: FittedTable,
    path: str | Path,
    proposals: pd.DataFrame,
    command: str = "",
    warnings: Sequence[str] = (),
) -> Path:
    """Write the self-contained HTML report of ``proposals`` (:func:`report_context`)
    atomically; returns its path."""
    path = check_output_path(path, "report", REPORT_SUFFIXES)
    return write_report(path, report_context(optimizer, proposals, command, warnings))


# --- The report's content -------------------------------------------------------------------------


def report_context(
    optimizer: FittedTable,
    proposals: pd.DataFrame,
    command: str = "",
    warnings: Sequence[str] = (),
) -> ReportContext:
    """What the HTML report of ``proposals`` (from :meth:`~TableOptimizer.propose` or
    :meth:`~TableOptimizer.rank`) shows: the cross-validation, the proposals against the data,
    what was chosen and the settings that reproduce them."""
    schema, data = optimizer.schema_, optimizer.data_
    groups = design_groups(data.x)
    distinct = data.x[np.unique(groups, return_index=True)[1]]
    data_distances = (
        schema.nearest_other_distances(distinct, design_sample(len(distinct), optimizer.seed))
        if len(distinct) > 1
        else np.zeros(0)
    )
    prediction = schema.prediction_name
    return ReportContext(
        source=optimizer.source_,
        target=optimizer.target,
        minimize=optimizer.minimize,
        observed=schema.user_scores(data.y),
        cv=_cross_validation_view(optimizer),
        proposals=proposals,
        prediction=prediction,
        low=f"{prediction}_low",
        high=f"{prediction}_high",
        flag=FLAG_NAME,
        distance=schema.distance_name,
        data_distances=data_distances,
        choice=_choices(optimizer),
        settings=_settings_view(optimizer),
        command=command or _api_command(optimizer),
        warnings=list(warnings),
        n_designs=len(distinct),
    )


def _cross_validation_view(optimizer: FittedTable) -> dict | None:
    """The cross-validation in the user's units and sign, as the report shows it (None without
    intervals)."""
    schema = optimizer.schema_
    cross = getattr(optimizer, "cross_validation_", {}) or {}
    calibration = getattr(optimizer, "calibration_", None)
    if calibration is None or "predicted" not in cross:
        return None
    low, high = (schema.user_scores(cross[key]) for key in ("low", "high"))
    return {
        "observed": schema.user_scores(optimizer.data_.y),
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


def _choices(optimizer: FittedTable) -> list[str]:
    """What was chosen, one line each: method, ranking, predictor, distance limits."""
    schema = optimizer.schema_
    cross = getattr(optimizer, "cross_validation_", {}) or {}
    choice = [
        f"method {optimizer.method} (preset {optimizer.preset_}, seed {optimizer.seed})",
        f"rows ranked by {optimizer.ranking_}",
        f"{schema.prediction_name} and its interval: {ensemble_words(optimizer.preset_)}, "
        f"calibrated by cross-validation ({cross.get('splits', 'none')})",
        f"proposals at least {optimizer.diversity_:g} apart and {optimizer.min_distance:g} from "
        f"every measured row ({schema.distance_name})",
    ]
    picked = getattr(optimizer, "choice_", None)
    if picked:
        scores = ", ".join(f"{k} {v:.3f}" for k, v in picked["protocol"].items())
        choice.append(f"per-table choice: {picked['choice']} (scores: {scores})")
    return choice


def _settings_view(optimizer: FittedTable) -> dict[str, str]:
    """The settings that reproduce the run, as text."""
    opt = optimizer
    overrides = ", ".join(f"{k}={v}" for k, v in (opt.overrides or {}).items())
    return {
        "table": opt.source_,
        "target": f"{opt.target} ({'minimize' if opt.minimize else 'maximize'})",
        "design": opt.schema_.describe(),
        "method": opt.method,
        "preset": opt.preset_,
        "overrides": overrides or "none",
        "seed": str(opt.seed),
        "diversity": f"{opt.diversity_:g}",
        "min_distance": f"{opt.min_distance:g}",
        "categories": str(getattr(opt, "categories", "keep")),
        "oversample": str(opt.oversample),
        "matchopt": __version__,
    }


def _api_command(optimizer: FittedTable) -> str:
    """The Python call that reproduces the fit (for reports of API runs)."""
    opt = optimizer
    options = {
        "features": opt.features, "categorical": list(opt.categorical) or None,
        "sequence": opt.sequence, "alphabet": opt.alphabet, "minimize": opt.minimize,
        "bounds": opt.bounds, "method": opt.method, "preset": opt.preset,
        "overrides": opt.overrides, "seed": opt.seed, "diversity": opt.diversity,
    }  # fmt: skip
    given = ", ".join(f"{k}={v!r}" for k, v in options.items() if v not in (None, False))
    return f"TableOptimizer(target={opt.target!r}, {given}).fit({opt.source_!r})"
