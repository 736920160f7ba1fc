"""The contract every optimization method follows, and its configuration plumbing.

A method is built from a config dataclass (hyperparameters, paper defaults) and a seed; it is
fitted on an :class:`~matchopt.data.OfflineData` only (never a task or an oracle) and then
proposes ``n`` designs in the data's own format::

    method = MatchOpt(MatchOptConfig(epochs=50), seed=0)
    designs = method.fit(data).propose(128)

Presets are named sets of config overrides: ``paper`` (the published configuration, the
dataclass defaults) and ``quick`` (a tiny configuration for smoke tests).

A new method is one file: its config dataclass and a subclass of :class:`Method` with ``fit``
and ``propose`` (and ``predict`` where it has a surrogate). Methods that resume killed runs or
train seeds as a batch list the mixins of :mod:`matchopt.methods.training` in their bases.
Helpers a method's code calls are functions, not inherited names: :func:`search_rng`,
:func:`search_starts`, :func:`has_surrogate` and
:func:`~matchopt.methods.wrappers.check_fitted`.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, get_type_hints

import numpy as np

from matchopt.config_fields import (
    check_config,
    config_choices,
    convert_option,
)
from matchopt.data import OfflineData
from matchopt.errors import ConfigError, MatchoptError
from matchopt.methods.engine import KeepsSnapshots, RunContext
from matchopt.methods.persistence import RUN_ATTRIBUTE, ModelFile
from matchopt.runtime import MAX_SEED, resolve_device
from matchopt.search import ROW_STARTS

if TYPE_CHECKING:
    import torch


#: Fewest rows any method is fitted on: one row cannot show how the score varies.
MIN_ROWS = 2


#: The run of a method that was given none: a plain fit.
PLAIN_RUN = RunContext()


class Method(ModelFile, ABC):
    """Base class of all methods (scikit-learn style: fit returns self, learned state ends in _).

    Args:
        config: hyperparameters; ``None`` means the paper configuration.
        seed: seed of every random choice the method makes (same seed, same designs).
        progress: show progress bars on stderr.
    """

    #: The dataclass holding this method's hyperparameters (defaults = paper preset).
    config_class: ClassVar[type]
    #: Preset name -> overrides of the config defaults.
    presets: ClassVar[dict[str, dict[str, Any]]]
    #: ``propose(k)`` is the first k designs of ``propose(m)`` for k <= m, best first, so one
    #: call of :meth:`propose_up_to` serves callers that want both (BO-qEI: one BO run).
    ranked_proposals: ClassVar[bool] = False

    def __init__(
        self,
        config: Any = None,
        seed: int = 0,
        progress: bool = False,
        device: str | None = None,
    ):
        if (
            isinstance(seed, bool)
            or not isinstance(seed, (int, np.integer))
            or not 0 <= seed <= MAX_SEED
        ):
            raise MatchoptError(f"seed must be an integer from 0 to {MAX_SEED}, got {seed!r}")
        self.config = config
        self.seed = seed
        self.progress = progress
        self.device = device

    @property
    def run(self) -> RunContext:
        """How this method runs (:class:`~matchopt.methods.engine.RunContext`): a plain fit
        unless the runner or the bench set one. Setting it keeps the snapshot file only for
        methods that keep snapshots (:mod:`matchopt.methods.training`)."""
        return self.__dict__.get(RUN_ATTRIBUTE, PLAIN_RUN)

    @run.setter
    def run(self, context: RunContext) -> None:
        if context.snapshot is not None and not isinstance(self, KeepsSnapshots):
            context = dataclasses.replace(context, snapshot=None)
        self.__dict__[RUN_ATTRIBUTE] = context

    @property
    def device_(self) -> torch.device:
        """The torch device that fits and searches (:func:`~matchopt.runtime.resolve_device`):
        ``device``, else ``$MATCHOPT_DEVICE``, else the CPU. Random draws stay on the CPU."""
        return resolve_device(self.device, "device")

    @property
    def config_(self) -> Any:
        """The config in use (the paper defaults when none was given), checked by
        :func:`check_config`."""
        config = self.config if self.config is not None else self.config_class()
        # A config built in code may hold 0 counts on purpose (e.g. a model before training);
        # those parsed from the command line or a preset may not (build_config).
        check_config(config, allow_zero_counts=True)
        return config

    @abstractmethod
    def fit(self, data: OfflineData) -> Method:
        """Learn from the offline data; returns self."""

    @abstractmethod
    def propose(self, n: int = 128) -> np.ndarray:
        """Return ``n`` designs (n x shape) in the data's own format (tokens or floats)."""

    def propose_up_to(self, n: int) -> np.ndarray:
        """At most ``n`` designs: :meth:`propose`, or fewer where the method stops early."""
        return self.propose(n)

    @classmethod
    def min_rows(cls, config: Any) -> tuple[int, str]:
        """Fewest offline rows the method can be fitted on with ``config``, and why."""
        return MIN_ROWS, "to see the score vary"

    def proposal_cap(self, n_rows: int) -> int | None:
        """Most designs one :meth:`propose` can return after fitting ``n_rows`` rows (None: any).

        Searches that start from offline rows (a :func:`~matchopt.search.search_start` field set
        to topk or random) return at most one design per row.
        """
        for config_field in dataclasses.fields(self.config_):
            if config_field.metadata.get("search_start"):
                if getattr(self.config_, config_field.name) in ROW_STARTS:
                    return n_rows
        return None

    def fit_report(self) -> dict[str, Any]:
        """What ``fit`` measured about itself (e.g. validation curves), kept in run records.

        JSON-ready; empty for methods that measure nothing.
        """
        return {}


def has_surrogate(method: Method | type[Method]) -> bool:
    """Whether ``method`` fits a surrogate that its ``predict`` evaluates (predictions (n,) in
    the units of the offline y; callers may rank designs with it)."""
    return callable(getattr(method, "predict", None))


def resumed_seconds(method: Method) -> float:
    """Seconds a fitted method trained in earlier sittings: those of the snapshot it continued
    a killed run from (:attr:`~matchopt.methods.engine.RunContext.resumed_seconds`), those of
    the members of a shared ensemble that an earlier sitting left in the ensemble cache (its
    ``fit_report``'s ``shared_ensemble``), and those its own fits resumed (its report's
    ``earlier_seconds``: a method made of several, as ``auto``). 0 for a fit in one sitting.
    Run records add them to ``fit_seconds``, so that a resumed run reports the time of its whole
    training."""
    report = method.fit_report()
    shared = report.get("shared_ensemble") or {}
    own = float(report.get("earlier_seconds", 0.0))
    return method.run.resumed_seconds + float(shared.get("earlier_seconds", 0.0)) + own


def search_rng(method: Method) -> np.random.Generator:
    """The generator of ``propose``'s draws: stream ``[seed, 1]``, apart from ``fit``'s, so
    that proposing never shifts what a refit draws (and the reverse)."""
    return np.random.default_rng([method.seed, 1])


def search_starts(
    method: Method, n: int, how: str, rng: np.random.Generator | None = None
) -> np.ndarray:
    """``n`` starting points (n x d normalized features) of a search from the offline rows of a
    fitted method: :func:`~matchopt.search.starting_points` with ``how`` (topk, random,
    gaussian).

    ``rng`` defaults to a fresh :func:`search_rng`; pass one to keep drawing from it after the
    starts (CMA-ES seeds its runs that way). Needs ``encoder_`` and ``data_``.
    """
    from matchopt.search import starting_points

    features = method.encoder_.encode_x(method.data_.x)
    rng = search_rng(method) if rng is None else rng
    return starting_points(features, method.data_.y, n, how, rng)


@dataclasses.dataclass(frozen=True)
class MethodEntry:
    """A registered method: its class, config fields it fixes, a one-line summary, and its kind
    (``matchopt methods`` lists them by kind): ``"matchopt"`` (MATCH-OPT and the methods built
    on it), ``"baseline"``, ``"sanity"`` (reference points, not methods to use) or
    ``"choice"`` (a per-table choice among others)."""

    cls: type[Method]
    summary: str
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    kind: str = "baseline"


def build_config(entry: MethodEntry, preset: str = "paper", overrides: Mapping[str, Any] = ()):
    """The config of a registered method for a preset, with user overrides applied.

    Raises:
        MatchoptError: unknown preset, unknown key, a value of the wrong type or not among the
            field's choices, or a key the method entry fixes.
    """
    cls = entry.cls
    if preset not in cls.presets:
        raise MatchoptError(f"unknown preset {preset!r}; choose one of {', '.join(cls.presets)}")
    fields = {f.name for f in dataclasses.fields(cls.config_class)}
    hints = get_type_hints(cls.config_class)
    choices = config_choices(cls.config_class)
    values = dict(cls.presets[preset])
    values.update(entry.fixed)
    for key, raw in dict(overrides).items():
        if key not in fields:
            raise ConfigError(
                key, None, f"unknown for {cls.__name__}; valid keys: {', '.join(sorted(fields))}"
            )
        if key in entry.fixed:
            raise ConfigError(key, None, f"this method fixes {key}={entry.fixed[key]!r}")
        value = convert_option(raw, hints[key], key)
        if key in choices and value not in choices[key]:
            raise ConfigError(key, raw, f"choose one of {', '.join(map(str, choices[key]))}")
        values[key] = value
    config = cls.config_class(**values)
    check_config(config)
    return config
