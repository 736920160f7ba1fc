"""A method's model file and scikit-learn parameters, kept apart from its contract.

:class:`~matchopt.methods.base.Method` inherits it: ``save`` / ``load`` write and read model
files (:mod:`matchopt.state`: JSON and tensors, no pickle; what is read is checked before use),
``get_params`` / ``set_params`` make methods work with ``sklearn.base.clone``. This module
knows a method only by the attributes it reads, so that it imports no module that imports it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from matchopt.config_fields import check_config, check_config_types
from matchopt.data import OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods.wrappers import FITTED_ATTRIBUTE, check_fitted, is_fitted
from matchopt.runtime import MAX_SEED
from matchopt.state_checks import check_bool, check_int, check_str, check_type

#: What a method's model file holds under "kind" (:mod:`matchopt.state`).
MODEL_KIND = "method"
#: The instance attribute that holds a method's run context
#: (:attr:`~matchopt.methods.base.Method.run`).
RUN_ATTRIBUTE = "_run"
#: Instance attributes a model file leaves out: the run context (its snapshot file and ensemble
#: folder are places on this machine, not part of the model).
NOT_SAVED = (RUN_ATTRIBUTE,)

M = TypeVar("M", bound="ModelFile")


class ModelFile:
    """Model files and parameters of a method (module notes)."""

    def __matchopt_state__(self) -> dict[str, Any]:
        """What a model file keeps (:mod:`matchopt.state`): everything but :data:`NOT_SAVED`."""
        return {k: v for k, v in vars(self).items() if k not in NOT_SAVED}

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
        if FITTED_ATTRIBUTE in vars(self):
            check_type(self, FITTED_ATTRIBUTE, OfflineData)
        if "encoder_" in vars(self):
            encoder = check_type(self, "encoder_", DesignEncoder)
            if "x_scaler_" not in vars(encoder):
                raise MatchoptError("encoder_ is not fitted")

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

    def set_params(self: M, **params: Any) -> M:
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

        check_fitted(self)
        return write_state(path, self, MODEL_KIND)

    @classmethod
    def load(cls: type[M], path: str | os.PathLike) -> M:
        """The fitted method in a file written by :meth:`save`: it proposes the same designs.

        What the file holds is checked before use (:mod:`matchopt.state`; the method's own
        attributes by ``__matchopt_check__``), and a method with a surrogate then predicts its
        first offline rows.

        Raises:
            MatchoptError: not a method file, one holding another class than ``cls``, over the
                size limits, or holding objects that fail their checks (one line naming the
                file and where the problem is).
        """
        from matchopt.safe_paths import as_path
        from matchopt.state import read_state

        path = as_path(path, "Method.load's path")
        method = read_state(path, MODEL_KIND)
        if not isinstance(method, cls) or not is_fitted(method):
            raise MatchoptError(
                f"{path}: holds a {type(method).__name__}, not a fitted {cls.__name__}"
            )
        method.device = "cpu"  # files are read onto the CPU, whatever device wrote them
        check_loaded(method, str(path))
        return method


def check_loaded(method: Any, source: str) -> None:
    """After reading ``method`` from ``source``: a method with a surrogate predicts its first
    offline rows (a last check that its networks fit together, before any use)."""
    if not callable(getattr(method, "predict", None)) or not is_fitted(method):
        return
    from matchopt.state import check_predictions

    rows = method.data_.x[:2]
    check_predictions(
        source,
        f"{type(method).__name__} fails to predict its own offline rows",
        lambda: np.asarray(method.predict(rows), dtype=np.float64),
        len(rows),
    )
