"""What a table optimizer is asked to do, and the one place where that is checked.

:class:`OptimizeSettings` holds the settings of a :class:`~matchopt.tabular.TableOptimizer` (the
keyword arguments of its constructor); :class:`OptimizeJob` is one ``matchopt optimize`` run: a
table, its settings, how many proposals and which files to write. The command line builds one
job and hands it over (:func:`matchopt.tabular.optimizer.run_optimize`); the Python API builds
the settings from its keyword arguments. Either way :func:`check_settings` (and, for a job,
:func:`check_job`) checks them once, before any table is read or any model fitted, and returns
what the checks resolved (the method's registry entry, its preset and configuration, the
device).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from matchopt.errors import MatchoptError
from matchopt.methods import RECOMMENDED_METHOD, get_method_entry
from matchopt.methods.base import build_config
from matchopt.runtime import resolve_device
from matchopt.tabular.outputs import OutputPaths, check_outputs

#: Most proposals one call returns: a batch for the lab, not a sampler (10^10 designs would need
#: hundreds of GiB before any check could run).
MAX_PROPOSALS = 100_000
#: Largest top-up pool, in multiples of ``n`` (a larger one only costs time and memory).
MAX_OVERSAMPLE = 100
#: How proposals' categorical columns are set (:func:`matchopt.tabular.propose.choose_categories`).
CATEGORY_CHOICES = ("search", "keep")
#: Two proposals of a table with numeric columns are distinct experiments when they lie at least
#: this far apart (the distance column's units: numeric columns in units of their measured std,
#: 1 per differing category): the default ``diversity`` of such tables.
DISTINCT_DISTANCE = 0.5


@dataclass(frozen=True)
class OptimizeSettings:
    """The settings of a table optimizer: the arguments of
    :class:`~matchopt.tabular.TableOptimizer`, documented there."""

    target: str
    """Name of the score column."""
    features: Sequence[str] | None = None
    """Feature columns; None = every column but the target."""
    categorical: Iterable[str] = ()
    """Feature columns holding categories."""
    sequence: str | None = None
    """A fixed-length sequence column that is the whole design."""
    alphabet: str | None = None
    """Letters a sequence may use; None = the letters found in the column."""
    minimize: bool = False
    """Lower target values are better."""
    bounds: Mapping[str, tuple[float, float]] | None = None
    """Column -> (low, high) range of proposals for numeric columns."""
    method: str = RECOMMENDED_METHOD
    """A registered method name."""
    preset: str | None = None
    """A preset of the method; None = ``validated`` where it has one, else ``paper``."""
    overrides: Mapping[str, Any] | None = None
    """Config field -> value (as ``--set``)."""
    seed: int = 0
    """Seed of every random choice."""
    oversample: int = 4
    """Size of the top-up candidate pool, in multiples of ``n``."""
    progress: bool = False
    """Show training progress bars on stderr."""
    threads: int | None = None
    """Compute threads of fit and propose."""
    min_distance: float = 0.0
    """Proposals at least this far from every measured row."""
    diversity: float | None = None
    """Proposals at least this far from each other; None = :data:`DISTINCT_DISTANCE` for tables
    of columns, 0 for sequences."""
    device: str | None = None
    """Torch device of fit and propose."""
    categories: str = "search"
    """How proposals' categorical columns are set: one of :data:`CATEGORY_CHOICES`."""


@dataclass(frozen=True)
class OptimizeJob:
    """One ``matchopt optimize`` run: what the command line hands over."""

    data: str
    """The measured table's file (CSV or Parquet)."""
    settings: OptimizeSettings
    """The optimizer's settings."""
    n: int = 128
    """Proposals to write."""
    out: str | None = None
    """The proposals file; None = :data:`~matchopt.names.DEFAULT_OUT` where no such file is."""
    report: str | None = None
    """The HTML report; None = ``<out's name>.report.html`` beside ``out``."""
    save_model: str | None = None
    """Where to save the fitted model; None = not saved."""
    candidates: str | None = None
    """A table of candidate designs to rank instead of proposing new ones."""
    force: bool = False
    """Replace output files that exist."""
    command: str = ""
    """The command line that reproduces the run (shown in the report)."""


@dataclass(frozen=True)
class CheckedSettings:
    """Settings that passed :func:`check_settings`, with what the checks resolved."""

    settings: OptimizeSettings
    """The settings checked."""
    entry: Any
    """The method's registry entry (:func:`~matchopt.methods.get_method_entry`)."""
    preset: str
    """The method's preset (:func:`resolve_preset`)."""
    config: Any
    """The method's configuration: the preset with the overrides."""
    device: torch.device
    """The torch device of fit and propose."""


def resolve_preset(method: str, preset: str | None) -> str:
    """``preset``, or by default ``validated`` where ``method`` has it and ``paper`` elsewhere."""
    if preset is not None:
        return preset
    return "validated" if "validated" in get_method_entry(method).cls.presets else "paper"


def check_settings(settings: OptimizeSettings, device_option: str = "device") -> CheckedSettings:
    """Check every setting that no table is needed for; returns what they resolve to.

    Args:
        settings: the settings to check.
        device_option: the name of the device setting in messages (``--device`` on the command
            line).

    Raises:
        MatchoptError: an unknown device or method, a preset or override the method refuses
            (:class:`~matchopt.errors.ConfigError`), or an out-of-range optimizer setting.
    """
    device = resolve_device(settings.device, device_option)
    entry = get_method_entry(settings.method)
    preset = resolve_preset(settings.method, settings.preset)
    config = build_config(entry, preset, dict(settings.overrides or {}))
    oversample = settings.oversample
    if isinstance(oversample, bool) or not isinstance(oversample, int):
        raise MatchoptError(f"oversample must be a whole number, got {oversample!r}")
    if not 1 <= oversample <= MAX_OVERSAMPLE:
        raise MatchoptError(f"oversample must be from 1 to {MAX_OVERSAMPLE}, got {oversample}")
    if settings.categories not in CATEGORY_CHOICES:
        raise MatchoptError(
            f"categories must be one of {', '.join(CATEGORY_CHOICES)}, got {settings.categories!r}"
        )
    distances = [("min_distance", settings.min_distance)]
    if settings.diversity is not None:
        distances.append(("diversity", settings.diversity))
    for name, value in distances:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not (np.isfinite(value) and value >= 0)
        ):
            raise MatchoptError(f"{name} must be a number >= 0, got {value!r}")
    return CheckedSettings(settings, entry, preset, config, device)


def check_count(n: int, option: str | None = "--n") -> int:
    """``n`` as the number of proposals to ask for (a whole number from 1 to
    :data:`MAX_PROPOSALS`); ``option`` names it in messages (None: an argument of
    :meth:`TableOptimizer.propose <matchopt.tabular.TableOptimizer.propose>`)."""
    if option is None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise MatchoptError(f"the number of proposals must be a positive integer, got {n!r}")
        if n > MAX_PROPOSALS:
            raise MatchoptError(f"at most {MAX_PROPOSALS:,} proposals per call, got {n:,}")
    elif n < 1:
        raise MatchoptError(f"{option} {n}: need at least 1 proposal")
    elif n > MAX_PROPOSALS:
        raise MatchoptError(f"{option} {n}: at most {MAX_PROPOSALS:,} proposals per call")
    return int(n)


def check_job(job: OptimizeJob) -> tuple[OutputPaths, CheckedSettings]:
    """Check a whole run before any work: the output files (:func:`.outputs.check_outputs`),
    the count, then the settings (:func:`check_settings`). Returns the checked output paths
    and settings."""
    inputs = [job.data] + ([job.candidates] if job.candidates else [])
    paths = check_outputs(job.out, job.report, job.save_model, job.force, inputs)
    check_count(job.n)
    return paths, check_settings(job.settings, "--device")


def parse_bounds(items: Iterable[str]) -> dict[str, tuple[float, float]]:
    """``["x=0:1", "t=20:80,p=1:2"]`` -> ``{"x": (0, 1), "t": (20, 80), "p": (1, 2)}``."""
    out: dict[str, tuple[float, float]] = {}
    for item in items:
        for part in next(csv.reader([item])):
            name, sep, rest = part.partition("=")
            low, colon, high = rest.partition(":")
            try:
                if not (sep and colon and name.strip()):
                    raise ValueError
                out[name.strip()] = (float(low), float(high))
            except ValueError:
                raise MatchoptError(f"--bounds {part!r}: expected COLUMN=LOW:HIGH") from None
    return out
