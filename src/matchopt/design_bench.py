"""A door for design-bench users: ``make("TFBind8-Exact-v0")`` with design-bench's names.

design-bench (Trabucco et al., 2022) is how the field's scripts load tasks, but its install is
broken on current Python (TensorFlow pins, mujoco-py builds, a storage bucket that is gone).
:func:`make` returns an object with design-bench's attribute and method names and semantics,
backed by matchopt's tasks and oracles, so that a design-baselines style script runs with one
import changed::

    from matchopt import design_bench          # was: import design_bench
    task = design_bench.make("TFBind8-Exact-v0")
    task.map_to_logits(); task.map_normalize_x(); task.map_normalize_y()
    x, y = task.x, task.y                      # normalized logits (n, 8, 3), normalized y (n, 1)
    ...
    score = task.denormalize_y(task.predict(solution))

Semantics kept from design-bench (``design_bench/task.py``, ``datasets/discrete_dataset.py``,
``oracles/oracle_builder.py``):

- ``x`` holds the offline designs in the task's current format: integer tokens (int32), or
  logits (``map_to_logits``: soft interpolation 0.6, the first class dropped), z-scored after
  ``map_normalize_x``; ``y`` is (n, 1) float32, z-scored after ``map_normalize_y``.
- Normalization statistics are those of the offline set, over logits for discrete tasks (mean and
  population std; a zero std becomes 1).
- ``predict(x)`` takes designs in the current format and returns (n, 1) float32 oracle values
  in the current ``y`` format (denormalizing and rounding logits to tokens on the way in).
- ``num_classes`` and ``is_logits`` exist on discrete tasks only (ValueError otherwise), as do
  ``to_logits`` / ``to_integers`` / ``map_to_logits`` / ``map_to_integers``.

Not provided: relabeling, sub-sampling options, ``dataset_kwargs`` and ``oracle_kwargs`` (the
offline sets are design-bench's defaults, as ``matchopt tasks`` lists them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from matchopt.encodings import SOFT_INTERPOLATION, Standardizer, logits_to_tokens
from matchopt.errors import MatchoptError
from matchopt.tasks import DESIGN_BENCH_NAMES, Task, load_task, task_name

#: design-bench task name -> matchopt task name (the paper's six tasks).
TASK_NAMES: dict[str, str] = DESIGN_BENCH_NAMES


def make(name: str, data_dir: str | os.PathLike | None = None) -> DesignBenchTask:
    """The task ``name`` (a design-bench name of :data:`TASK_NAMES`, or a matchopt task name).

    Args:
        name: e.g. ``"TFBind8-Exact-v0"`` or ``"tfbind8"``; embedded matchopt tasks (``potts``,
            ``styblinski-tang``) work too.
        data_dir: design-bench data folder (default ``$MATCHOPT_DATA_DIR``).

    Raises:
        MatchoptError: an unknown name (the known ones are listed) or missing data files.
        TypeError: ``data_dir`` is not a path (str or os.PathLike).
    """
    if not isinstance(name, str):
        raise MatchoptError(f"a task name is a string, got {type(name).__name__}")
    canonical = task_name(name)
    return DesignBenchTask(load_task(canonical, data_dir), name)


class DesignBenchTask:
    """A matchopt task behind design-bench's ``Task`` interface (see the module notes).

    Args:
        task: the matchopt task.
        name: the name it was made with (kept in :attr:`task_name`).
    """

    def __init__(self, task: Task, name: str | None = None):
        self.task = task
        self.task_name = name or task.name
        offline = task.offline
        self._space = offline.space
        self._x = offline.x.astype(np.int32 if offline.space.is_discrete else np.float32)
        self._y = offline.y.astype(np.float32).reshape(-1, 1)
        self._is_logits = False
        self.is_normalized_x = False
        self.is_normalized_y = False
        # Statistics of the offline set (over logits for sequences, as design-bench).
        features = self._x if not self.is_discrete else self._to_logits(self._x)
        self._x_scaler = Standardizer.fit(features)
        self._y_scaler = Standardizer.fit(self._y)

    # -- description --

    @property
    def is_discrete(self) -> bool:
        return self._space.is_discrete

    @property
    def num_classes(self) -> int:
        self._discrete_only("num_classes")
        return int(self._space.vocab_size)

    @property
    def is_logits(self) -> bool:
        self._discrete_only("is_logits")
        return self._is_logits

    @property
    def dataset_name(self) -> str:
        return self.task.name

    @property
    def oracle_name(self) -> str:
        return f"matchopt:{self.task.name}"

    x_name = "Design"
    y_name = "Prediction"

    @property
    def dataset_size(self) -> int:
        return len(self._y)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    @property
    def input_size(self) -> int:
        return int(np.prod(self.input_shape))

    @property
    def input_dtype(self) -> np.dtype:
        return self.x.dtype

    output_shape = (1,)
    output_size = 1
    output_dtype = np.dtype(np.float32)

    # -- data in the current format --

    @property
    def x(self) -> np.ndarray:
        """Offline designs in the current format (tokens or logits, normalized or not)."""
        x = self._x
        if self.is_discrete and self._is_logits:
            x = self._to_logits(x)
        if self.is_normalized_x:
            x = self.normalize_x(x)
        return x.copy() if x is self._x else x  # a caller editing it must not edit the task

    @property
    def y(self) -> np.ndarray:
        """Offline scores (n, 1) float32, normalized after :meth:`map_normalize_y`."""
        return self.normalize_y(self._y) if self.is_normalized_y else self._y.copy()

    def iterate_batches(
        self,
        batch_size: int,
        return_x: bool = True,
        return_y: bool = True,
        drop_remainder: bool = False,
    ) -> Iterator:
        """Batches of ``x``, ``y`` or ``(x, y)`` in dataset order."""
        if not (return_x or return_y):
            raise ValueError("at least one of return_x and return_y must be True")
        x, y = self.x, self.y
        stop = len(y) - (len(y) % batch_size if drop_remainder else 0)
        for start in range(0, stop, batch_size):
            part = slice(start, min(start + batch_size, stop))
            if return_x and return_y:
                yield x[part], y[part]
            else:
                yield x[part] if return_x else y[part]

    def iterate_samples(self, return_x: bool = True, return_y: bool = True) -> Iterator:
        """One sample at a time (as :meth:`iterate_batches` of size 1, unbatched)."""
        for batch in self.iterate_batches(1, return_x, return_y):
            yield tuple(b[0] for b in batch) if isinstance(batch, tuple) else batch[0]

    def __iter__(self) -> Iterator:
        return self.iterate_samples()

    # -- conversions --

    def _discrete_only(self, what: str) -> None:
        if not self.is_discrete:
            raise ValueError(f"{what} is only supported on discrete datasets")

    def _to_logits(self, x: np.ndarray) -> np.ndarray:
        from matchopt.encodings import tokens_to_logits

        return tokens_to_logits(x, self._space.vocab_size, SOFT_INTERPOLATION)

    def to_logits(self, x: np.ndarray) -> np.ndarray:
        """Integer tokens (n, L) -> float32 logits (n, L, K - 1)."""
        self._discrete_only("to_logits")
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.integer):
            raise ValueError("cannot convert non-integers to logits")
        return self._to_logits(x)

    def to_integers(self, x: np.ndarray) -> np.ndarray:
        """Logits (n, L, K - 1) -> int32 tokens (n, L): the most likely class."""
        self._discrete_only("to_integers")
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating):
            raise ValueError("cannot convert non-floats to integers")
        return logits_to_tokens(x).astype(np.int32)

    def normalize_x(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating):
            raise ValueError("cannot normalize discrete design values")
        return self._x_scaler.transform(x).astype(np.float32)

    def denormalize_x(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating):
            raise ValueError("cannot denormalize discrete design values")
        return self._x_scaler.inverse(x).astype(np.float32)

    def normalize_y(self, y: np.ndarray) -> np.ndarray:
        return self._y_scaler.transform(np.asarray(y)).astype(np.float32)

    def denormalize_y(self, y: np.ndarray) -> np.ndarray:
        return self._y_scaler.inverse(np.asarray(y)).astype(np.float32)

    # -- in-place format changes (design-bench's map_* functions) --

    def map_to_logits(self) -> None:
        self._discrete_only("map_to_logits")
        self._is_logits = True

    def map_to_integers(self) -> None:
        self._discrete_only("map_to_integers")
        self.is_normalized_x = False  # design-bench denormalizes first
        self._is_logits = False

    def map_normalize_x(self) -> None:
        if self.is_discrete and not self._is_logits:
            raise ValueError("cannot normalize discrete design values")
        self.is_normalized_x = True

    def map_denormalize_x(self) -> None:
        if self.is_discrete and not self._is_logits:
            raise ValueError("cannot denormalize discrete design values")
        self.is_normalized_x = False

    def map_normalize_y(self) -> None:
        self.is_normalized_y = True

    def map_denormalize_y(self) -> None:
        self.is_normalized_y = False

    # -- the oracle --

    def predict(self, x_batch: np.ndarray, **kwargs: object) -> np.ndarray:
        """Oracle values (n, 1) float32 of designs in the current format, in the current
        ``y`` format (design-bench's ``dataset_to_oracle_x`` / ``oracle_to_dataset_y``)."""
        x = np.asarray(x_batch)
        logits = self.is_discrete and self._is_logits
        if logits:
            _check_finite_logits(x, "logits")
        if self.is_normalized_x:
            with np.errstate(over="ignore"):  # an overflow to inf is reported just below
                x = self.denormalize_x(x)
            if logits:
                _check_finite_logits(x, "denormalized logits")
        if logits:
            x = self.to_integers(x)
        y = self.task.score(x).astype(np.float32).reshape(-1, 1)
        return self.normalize_y(y) if self.is_normalized_y else y

    def __repr__(self) -> str:
        return (
            f"DesignBenchTask({self.task_name!r}: {self.dataset_size} designs, "
            f"{self._space.describe()})"
        )


def _check_finite_logits(x: np.ndarray, what: str) -> None:
    """Raise on NaN or infinite logits: rounding them to tokens would pick a class anyway (the
    first one whose logit is NaN or inf), and predict would score a design nobody asked for."""
    if not np.issubdtype(x.dtype, np.floating):
        return  # to_integers names the dtype
    finite = np.isfinite(x)
    if not finite.all():
        where = np.argwhere(~finite)[0]
        position = f", position {where[1]}" if len(where) > 1 else ""
        raise MatchoptError(
            f"predict: {what} hold {(~finite).sum()} NaN or infinite value(s), the first at row "
            f"{where[0]}{position} ({x[tuple(where)]}); logits must be finite numbers"
        )


__all__ = ["make", "DesignBenchTask", "TASK_NAMES"]
