"""The contract every optimization method follows, and its configuration plumbing.

A method is built from a config dataclass (hyperparameters, paper defaults) and a seed; it is
fitted on an :class:`~matchopt.data.OfflineData` only (never a task or an oracle) and then
proposes ``n`` designs in the data's own format::

    method = MatchOpt(MatchOptConfig(epochs=50), seed=0)
    designs = method.fit(data).propose(128)

Presets are named sets of config overrides: ``paper`` (the published configuration, the
dataclass defaults) and ``quick`` (a tiny configuration for smoke tests).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, get_type_hints

import numpy as np

from matchopt.data import OfflineData
from matchopt.errors import ConfigError, MatchoptError
from matchopt.runtime import MAX_SEED, default_threads_unless_chosen, resolve_device
from matchopt.state_checks import (
    check_bool,
    check_int,
    check_str,
    check_type,
    describe,
    is_int,
    is_number,
)

if TYPE_CHECKING:
    import torch

    from matchopt.checkpoints import TrainingCheckpoint

#: Fewest rows any method is fitted on: one row cannot show how the score varies.
MIN_ROWS = 2
#: What a method's model file holds under "kind" (:mod:`matchopt.state`).
MODEL_KIND = "method"


@dataclasses.dataclass(frozen=True)
class SeedBatch:
    """Several seeds of one method trained at once (:meth:`Method.fit_seeds`), as its training
    snapshots know it: the method's class, config and seeds (:func:`~matchopt.checkpoints.run_key`)
    and the snapshot file (None: no snapshots)."""

    run_name: str
    config_: Any
    seed: tuple[int, ...]
    training_checkpoint: TrainingCheckpoint | None = None


def seed_losses_check(n_seeds: int) -> Callable[[dict[str, Any], int], str | None]:
    """A snapshot check (:meth:`~matchopt.checkpoints.LoopSnapshots.start`) of a batched loop's
    ``seed_losses``: ``n_seeds`` lists of one number per epoch trained."""

    def check(values: dict[str, Any], epoch: int) -> str | None:
        losses = values.get("seed_losses")
        if (
            not isinstance(losses, list)
            or len(losses) != n_seeds
            or not all(isinstance(own, list) and len(own) == epoch for own in losses)
            or not all(isinstance(v, float) for own in losses for v in own)
        ):
            return f"snapshot seed_losses are not {n_seeds} lists of {epoch} numbers"
        return None

    return check


def end_seed_epoch(
    snapshots: Any,
    losses: list[list[float]],
    totals: Sequence[Any],
    count: int,
    bar: Any,
    epoch: int,
    epochs: int,
    **values: Any,
) -> None:
    """After epoch ``epoch`` (1-based) of ``epochs`` of a seed batch: each seed's mean loss (its
    :class:`~matchopt.models.LossTotal` over ``count``) appended to its list in ``losses``, the
    first seed's shown on ``bar``, and a snapshot when due
    (:meth:`~matchopt.checkpoints.LoopSnapshots.save`: the first seed's losses as ``losses``,
    every seed's as ``seed_losses``, then ``values``)."""
    for own, total in zip(losses, totals):
        own.append(total.value() / count)
    bar.set_postfix(loss=f"{losses[0][-1]:.4f}", refresh=False)
    snapshots.save(
        epoch,
        epochs,
        losses=list(losses[0]),
        seed_losses=[list(own) for own in losses],
        **values,
    )


class Method(ABC):
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
    #: The method fits a surrogate that :meth:`predict` evaluates (callers may rank with it).
    has_surrogate: ClassVar[bool] = False
    #: ``propose(k)`` is the first k designs of ``propose(m)`` for k <= m, best first, so one
    #: call of :meth:`propose_up_to` serves callers that want both (BO-qEI: one BO run).
    ranked_proposals: ClassVar[bool] = False
    #: ``fit`` keeps training snapshots when given one (:meth:`resume_from`), so a killed run
    #: continues where it stopped and gives the designs of an uninterrupted run.
    resumable: ClassVar[bool] = False
    #: The snapshot file of this run (:meth:`resume_from`); None: no snapshots.
    training_checkpoint: TrainingCheckpoint | None = None
    #: Folder of shared Gaussian ensembles (:meth:`share_ensembles`); None: train one's own.
    ensemble_cache: Path | None = None
    #: The seed batch whose shared ensemble to take (:meth:`share_ensembles`); None: none.
    ensemble_seed_batch: tuple[int, ...] | None = None
    #: :meth:`fit_seeds` trains several seeds at once (seeds as a batch dimension), each as
    #: its own ``fit`` would, up to float round-off.
    batches_seeds: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "fit" in vars(cls) and not getattr(cls.fit, "__isabstractmethod__", False):
            cls.fit = _in_default_threads(_all_or_nothing(cls.fit))
        if "propose" in vars(cls) and not getattr(cls.propose, "__isabstractmethod__", False):
            cls.propose = _in_default_threads(cls.propose)

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

    @classmethod
    def fit_seeds(cls, methods: Sequence[Method], data: OfflineData) -> list[Method]:
        """Fit ``methods`` (this class, one config and device, distinct seeds) on ``data``.

        Where the method ``batches_seeds``, all seeds train at once as one batched network (a
        GPU then launches one step for all), each seed with its own random draws, so
        that each ends as its own :meth:`fit` would, up to float round-off; training snapshots
        go to the first method's snapshot file (:meth:`resume_from`), one for the batch. Other
        methods fit one seed after the other. Returns the methods, fitted.

        Raises:
            MatchoptError: methods of another class, config or device, or repeated seeds.
        """
        methods = list(methods)
        if not methods:
            raise MatchoptError("fit_seeds needs at least one method")
        first = methods[0]
        for method in methods:
            if type(method) is not cls:
                raise MatchoptError(f"fit_seeds of {cls.__name__} got a {type(method).__name__}")
            if method.config_ != first.config_ or method.device_ != first.device_:
                raise MatchoptError("fit_seeds needs one config and one device for all seeds")
        seeds = [m.seed for m in methods]
        if len(set(seeds)) != len(seeds):
            raise MatchoptError(f"fit_seeds got repeated seeds: {seeds}")
        if not cls.batches_seeds or len(methods) == 1:
            for method in methods:
                method.fit(data)
            return methods
        run = SeedBatch(cls.__name__, first.config_, tuple(seeds), first.training_checkpoint)
        for method in methods:
            _forget(method)
        try:
            with default_threads_unless_chosen():
                cls._fit_seeds(methods, data, run)
        except BaseException:  # all or nothing, as fit
            for method in methods:
                _forget(method)
            raise
        return methods

    @classmethod
    def _fit_seeds(cls, methods: Sequence[Method], data: OfflineData, run: SeedBatch) -> None:
        """The batched training of :meth:`fit_seeds` (methods with ``batches_seeds``); ``run``
        keys its snapshots (:class:`~matchopt.checkpoints.LoopSnapshots`)."""
        raise NotImplementedError

    def predict(self, designs: np.ndarray) -> np.ndarray:
        """Surrogate predictions (n,) in the units of the offline y (``has_surrogate`` only)."""
        raise MatchoptError(f"{type(self).__name__} has no surrogate to predict with")

    def propose_up_to(self, n: int) -> np.ndarray:
        """At most ``n`` designs: :meth:`propose`, or fewer where the method stops early."""
        return self.propose(n)

    @classmethod
    def min_rows(cls, config: Any) -> tuple[int, str]:
        """Fewest offline rows the method can be fitted on with ``config``, and why."""
        return MIN_ROWS, "to see the score vary"

    def proposal_cap(self, n_rows: int) -> int | None:
        """Most designs one :meth:`propose` can return after fitting ``n_rows`` rows (None: any).

        Searches that start from offline rows (``init`` topk or random) return at most one
        design per row.
        """
        return n_rows if getattr(self.config_, "init", None) in ("topk", "random") else None

    def fit_report(self) -> dict[str, Any]:
        """What ``fit`` measured about itself (e.g. validation curves), kept in run records.

        JSON-ready; empty for methods that measure nothing.
        """
        return {}

    def resumed_seconds(self) -> float:
        """Seconds this fit trained in earlier sittings, when it continued a killed run from a
        snapshot (:mod:`matchopt.checkpoints`); 0 for a fit in one sitting. Run records add them
        to ``fit_seconds``, so that a resumed run reports the time of its whole training."""
        checkpoint = self.training_checkpoint
        return checkpoint.earlier_seconds if checkpoint is not None else 0.0

    def _search_rng(self) -> np.random.Generator:
        """The generator of ``propose``'s draws: stream ``[seed, 1]``, apart from ``fit``'s, so
        that proposing never shifts what a refit draws (and the reverse)."""
        return np.random.default_rng([self.seed, 1])

    def _search_starts(
        self, n: int, how: str, rng: np.random.Generator | None = None
    ) -> np.ndarray:
        """``n`` starting points (n x d normalized features) of a search from the offline rows:
        :func:`~matchopt.search.starting_points` with ``how`` (topk, random, gaussian).

        ``rng`` defaults to a fresh :meth:`_search_rng`; pass one to keep drawing from it after
        the starts (CMA-ES seeds its runs that way). Needs ``encoder_`` and ``data_``.
        """
        from matchopt.search import starting_points

        features = self.encoder_.encode_x(self.data_.x)
        rng = self._search_rng() if rng is None else rng
        return starting_points(features, self.data_.y, n, how, rng)

    def _check_fitted(self) -> None:
        if not hasattr(self, "data_"):
            raise MatchoptError(f"{type(self).__name__} must be fitted before propose()")

    def resume_from(self, path: str | os.PathLike, every: float | None = None) -> Method:
        """Keep training snapshots in ``path`` (every ``every`` seconds, default
        ``$MATCHOPT_CHECKPOINT_SECONDS`` or 300) and continue from one of this run if present.
        The file keeps the finished training after ``fit`` (a killed search then needs no
        retraining): remove it once the results are stored.

        Only methods with ``resumable`` use it (and, for the batch of :meth:`fit_seeds`, those
        that ``batches_seeds``); for the others it changes nothing. Returns self.
        """
        from matchopt.checkpoints import TrainingCheckpoint

        keeps = self.resumable or self.batches_seeds
        self.training_checkpoint = TrainingCheckpoint(path, every) if keeps else None
        return self

    def share_ensembles(
        self, folder: str | os.PathLike | None, seed_batch: Sequence[int] | None = None
    ) -> Method:
        """Take a Gaussian-ensemble surrogate trained with the same data, fields and seed from
        ``folder`` (:mod:`matchopt.models.ensemble_cache`), or train it and leave it there.
        With ``seed_batch``, the one trained for this seed in a batch of these seeds
        (:meth:`fit_seeds`) where the folder holds it.

        ``matchopt bench`` does this for cells that share an ensemble (GA, Ens-Mean and Ens-Min;
        CMA-ES and BO-qEI). Methods without such a surrogate ignore it. Returns self.
        """
        self.ensemble_cache = None if folder is None else Path(folder)
        self.ensemble_seed_batch = None if seed_batch is None else tuple(seed_batch)
        return self

    def __matchopt_state__(self) -> dict[str, Any]:
        """What a model file keeps (:mod:`matchopt.state`): everything but the snapshot file and
        the ensemble cache folder (places on this machine, not part of the model)."""
        skip = ("training_checkpoint", "ensemble_cache", "ensemble_seed_batch")
        return {k: v for k, v in vars(self).items() if k not in skip}

    def __matchopt_check__(self) -> None:
        """Checks of a method read from a model file (:mod:`matchopt.state`): the constructor's
        arguments (the config field by field), and the offline data and encoder if fitted."""
        from matchopt.encodings import DesignEncoder

        config = check_type(self, "config", self.config_class, none=True)
        if config is not None:
            check_config_types(config)
            check_config(config, allow_zero_counts=True)
        check_int(self, "seed", 0, MAX_SEED)
        check_bool(self, "progress")
        check_str(self, "device", none=True)
        if "data_" in vars(self):
            check_type(self, "data_", OfflineData)
        if "encoder_" in vars(self):
            encoder = check_type(self, "encoder_", DesignEncoder)
            if "x_scaler_" not in vars(encoder):
                raise MatchoptError("encoder_ is not fitted")

    def _check_loaded(self, source: str) -> None:
        """After :meth:`load`: a method with a surrogate predicts its first offline rows (a last
        check that its networks fit together, before any use)."""
        if not self.has_surrogate or not hasattr(self, "data_"):
            return
        from matchopt.state import check_predictions

        rows = self.data_.x[:2]
        check_predictions(
            source,
            f"{type(self).__name__} fails to predict its own offline rows",
            lambda: np.asarray(self.predict(rows), dtype=np.float64),
            len(rows),
        )

    # -- scikit-learn parameters (``sklearn.base.clone`` works) --

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's arguments: ``config``, ``seed``, ``progress``, ``device``.

        With ``deep``, also ``config__<field>`` for every field of the config in use.
        """
        params = {
            "config": self.config,
            "seed": self.seed,
            "progress": self.progress,
            "device": self.device,
        }
        if deep:
            config = self.config_
            for f in dataclasses.fields(config):
                params[f"config__{f.name}"] = getattr(config, f.name)
        return params

    def set_params(self, **params: Any) -> Method:
        """Set constructor arguments, or config fields as ``config__<field>=value``; returns self.

        Raises:
            MatchoptError: an unknown name (the valid ones are listed) or a value out of range.
        """
        fields = {f.name for f in dataclasses.fields(self.config_class)}
        updates = {}
        for name, value in params.items():
            if name in ("config", "seed", "progress", "device"):
                if name == "seed":
                    type(self)(self.config, seed=value)  # the constructor's check of seeds
                setattr(self, name, value)
            elif name.startswith("config__") and name[len("config__") :] in fields:
                updates[name[len("config__") :]] = value
            else:
                raise MatchoptError(
                    f"{type(self).__name__} has no parameter {name!r}; use config, seed, "
                    f"progress, device or config__<field> with a field of "
                    f"{self.config_class.__name__}"
                )
        if updates:
            config = dataclasses.replace(self.config_, **updates)
            check_config(config, allow_zero_counts=True)
            self.config = config
        return self

    # -- model files (:mod:`matchopt.state`: JSON and tensors, no pickle) --

    def save(self, path: str | os.PathLike) -> Path:
        """Write the fitted method to ``path`` atomically; :meth:`load` reads it back.

        The file holds the config, seed, offline data and learned state as JSON and tensors
        (no pickle): loading it cannot run code.
        """
        from matchopt.state import write_state

        self._check_fitted()
        return write_state(path, self, MODEL_KIND)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Method:
        """The fitted method in a file written by :meth:`save`: it proposes the same designs.

        What the file holds is checked before use (:mod:`matchopt.state`; the method's own
        attributes by ``__matchopt_check__``), and a method with a surrogate then predicts its
        first offline rows.

        Raises:
            MatchoptError: not a method file, one holding another class than ``cls``, over the
                size limits, or holding objects that fail their checks (one line naming the
                file and where the problem is).
        """
        from matchopt.state import read_state

        method = read_state(path, MODEL_KIND)
        if not isinstance(method, cls) or not hasattr(method, "data_"):
            raise MatchoptError(
                f"{path}: holds a {type(method).__name__}, not a fitted {cls.__name__}"
            )
        method.device = "cpu"  # files are read onto the CPU, whatever device wrote them
        method._check_loaded(str(path))
        return method


def _forget(method: Method) -> None:
    """Delete what ``fit`` learned (:func:`_learned_names`)."""
    for name in _learned_names(method):
        delattr(method, name)


def _learned_names(method: Method) -> list[str]:
    return [k for k in vars(method) if k.endswith("_") and not k.startswith("_")]


def _in_default_threads(function: Callable[..., Any]) -> Callable[..., Any]:
    """Run a method's ``fit`` or ``propose`` with matchopt's thread default
    (:func:`~matchopt.runtime.default_threads_unless_chosen`) unless the caller chose threads."""

    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with default_threads_unless_chosen():
            return function(*args, **kwargs)

    return wrapped


def _all_or_nothing(fit: Callable[..., Method]) -> Callable[..., Method]:
    """Wrap a ``fit`` so that it starts from no learned state and leaves none when it fails.

    Without this a refit that fails midway would leave the old model beside the new data's
    encoder, or an untrained generator that passes the fitted check, and ``propose`` would
    return designs from it. A ``fit`` calling its parent's ``fit`` is wrapped once (depth
    count), so the parent does not erase what the child set before calling it.
    """

    @functools.wraps(fit)
    def wrapped(self: Method, *args: Any, **kwargs: Any) -> Method:
        outermost = not self.__dict__.get("_fit_depth", 0)
        if outermost:
            _forget(self)
        self._fit_depth = self.__dict__.get("_fit_depth", 0) + 1
        try:
            return fit(self, *args, **kwargs)
        except BaseException:
            if outermost:
                _forget(self)
            raise
        finally:
            self._fit_depth -= 1
            if not self._fit_depth:
                del self._fit_depth

    return wrapped


def by_design_type(value: Any, is_discrete: bool, if_discrete: Any, if_continuous: Any) -> Any:
    """``value`` when set, else the default for the design type (config fields left None).

    E.g. search step sizes: logits of tokens take larger steps than z-scored floats.
    """
    if value is not None:
        return value
    return if_discrete if is_discrete else if_continuous


@dataclasses.dataclass(frozen=True)
class MethodEntry:
    """A registered method: its class, config fields it fixes, and a one-line summary."""

    cls: type[Method]
    summary: str
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def config_choices(config_class: type) -> dict[str, tuple]:
    """Field name -> allowed values, for fields declared with ``metadata={"choices": ...}``."""
    return {
        f.name: f.metadata["choices"]
        for f in dataclasses.fields(config_class)
        if "choices" in f.metadata
    }


def _convert(value: Any, hint: Any, key: str) -> Any:
    """Convert a ``--set`` string to the type of config field ``key``."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    hint_text = str(hint)
    optional = " (or none)" if "None" in hint_text else ""
    if text.lower() == "none" and optional:
        return None
    if hint is bool or hint_text.startswith("bool"):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(key, value, f"{value!r} is not true or false")
    readers = (
        ("tuple" in hint_text, lambda: tuple(int(v) for v in text.split(",") if v.strip()),
         "integers separated by commas"),
        (hint is int or hint_text.startswith("int"), lambda: int(text), "an integer"),
        (hint is float or hint_text.startswith("float"), lambda: float(text), "a number"),
    )  # fmt: skip
    for applies, read, words in readers:
        if applies:
            try:
                return read()
            except ValueError:
                raise ConfigError(key, value, f"{value!r} is not {words}{optional}") from None
    return text


#: Smallest value of count fields other than 1: no search steps, no warm-up, a linear NTK
#: (depth 0) and no bolder designs are allowed; a trajectory needs two points to hold a pair.
MINIMUM = {
    "search_steps": 0,
    "warmup_epochs": 0,
    "depth": 0,
    "trajectory_length": 2,
    "bold_designs": 0,
}


def check_config(config: Any, allow_zero_counts: bool = False) -> None:
    """Refuse values no method can run with, naming the field and its allowed range.

    Integer fields are counts (>= 1, or :data:`MINIMUM`); floats are finite; a field that states
    its range in its metadata (:mod:`matchopt.config_fields`: learning rates, step lengths, trust
    radii, pessimism, shares, ...) is in it; widths (tuples of ints) are >= 1.
    ``allow_zero_counts`` lowers every count's minimum to 0 (configs built in code, e.g. an
    untrained model for a test); negative counts are always refused.

    Raises:
        ConfigError: the first field out of range.
    """
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if value is None or isinstance(value, (bool, str)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f.name, value, "must be a finite number")
        if "range" in f.metadata:  # a field that states its own range
            low, high = f.metadata["range"]
            above = f.metadata.get("above", False)
            if not ((value > low if above else value >= low) and value <= high):
                shown = f"> {low:g}" if above and high == math.inf else f"in [{low:g}, {high:g}]"
                raise ConfigError(f.name, value, f.metadata.get("words", f"must be {shown}"))
        if isinstance(value, int):
            low = 0 if allow_zero_counts else MINIMUM.get(f.name, 1)
            if value < low:
                raise ConfigError(f.name, value, f"must be an integer >= {low}")
        elif isinstance(value, tuple) and all(isinstance(v, int) for v in value):
            if any(v < 1 for v in value):
                raise ConfigError(f.name, ",".join(map(str, value)), "widths must be >= 1")


def check_config_types(config: Any) -> None:
    """Refuse a config field whose value is not of the field's type (or not among its choices),
    e.g. in a config read from a model file, where no ``--set`` parsing converted it.

    Raises:
        ConfigError: the first such field.
    """
    hints = get_type_hints(type(config))
    choices = config_choices(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if not _of_type(value, hints.get(f.name, Any)):
            hint = hints[f.name]
            expected = hint.__name__ if isinstance(hint, type) else str(hint)
            raise ConfigError(f.name, None, f"is {describe(value)}, expected {expected}")
        if f.name in choices and value not in choices[f.name]:
            raise ConfigError(
                f.name,
                None,
                f"is {describe(value)}; choose one of {', '.join(map(str, choices[f.name]))}",
            )


def _of_type(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the config field type ``hint`` (bool, int, float, str, a tuple of
    ints, and those or None); other types are not checked."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_of_type(value, option) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, (bool, np.bool_))
    if hint is int:
        return is_int(value)
    if hint is float:
        return is_number(value)
    if hint is str:
        return isinstance(value, str)
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return isinstance(value, tuple) and all(_of_type(v, args[0]) for v in value)
        return isinstance(value, tuple)
    return True


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
        value = _convert(raw, hints[key], key)
        if key in choices and value not in choices[key]:
            raise ConfigError(key, raw, f"choose one of {', '.join(map(str, choices[key]))}")
        values[key] = value
    config = cls.config_class(**values)
    check_config(config)
    return config


def parse_set_options(items: list[str] | None) -> dict[str, str]:
    """``["epochs=10", "lr=1e-3"]`` -> ``{"epochs": "10", "lr": "1e-3"}`` with clear errors."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise MatchoptError(f"malformed --set {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out
