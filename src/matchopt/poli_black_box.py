"""A door for poli users: every matchopt task as a poli black box, any method as a poli solver.

poli (``pip install poli-core``; imported here only) is a common interface to black-box
objectives: an ``AbstractBlackBox`` is called on an array of designs and returns an (n, 1)
array of values; a ``Problem`` pairs it with starting designs ``x0``. This module gives

- :class:`TaskBlackBox`: a task's oracle behind ``AbstractBlackBox``. Sequence tasks take
  arrays of letters (b x L, one letter per position; poli's convention), continuous tasks arrays
  of floats (b x d). The alphabet is the task's (``ACGT`` for TF-Bind; the first K capital
  letters for other sequence tasks, e.g. Potts).
- :func:`make_problem`: a poli ``Problem`` with the task's offline designs as ``x0``.
- :class:`MatchoptSolver`: fits any matchopt method on a black box's ``x0, y0`` (offline: the
  black box is called only on the designs the method returns) and proposes new designs; its
  ``solve`` runs the poli-baselines loop (``next_candidate``, call the black box, keep the
  history).

poli-core 1.3 pins ``numpy<2`` although its core runs on numpy 2; with numpy 2 install it with
``pip install --no-deps poli-core selfies rdkit`` (what matchopt's CI does).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

try:
    from poli.core.abstract_black_box import AbstractBlackBox
    from poli.core.black_box_information import BlackBoxInformation
    from poli.core.problem import Problem
except ImportError as err:  # an optional integration: say how to get it
    raise ImportError(
        f"matchopt.poli_black_box needs poli-core ({err}); install it with "
        "`pip install --no-deps poli-core selfies rdkit`"
    ) from err

from matchopt.data import DesignSpace, OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods import make_method
from matchopt.methods.wrappers import is_fitted
from matchopt.tasks import Task, load_task

#: Letters of sequence tasks whose tokens are nucleotides (token i is letter i).
ALPHABETS = {"tfbind8": "ACGT", "tfbind10": "ACGT"}


def alphabet_of(task: Task) -> list[str]:
    """Letters of a sequence task, token i = letter i (see :data:`ALPHABETS`)."""
    size = task.space.vocab_size
    letters = ALPHABETS.get(task.name)
    if letters is None:
        if size > 26:
            raise MatchoptError(f"task {task.name!r}: {size} tokens have no letters")
        letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:size]
    return list(letters)


class TaskBlackBox(AbstractBlackBox):
    """A matchopt task's oracle as a poli black box (see the module notes).

    Args:
        task: a task name or a loaded task.
        data_dir: design-bench data folder for tasks that need files.
        batch_size, parallelize, num_workers, evaluation_budget: ``AbstractBlackBox`` options
            (no budget by default).
    """

    def __init__(
        self,
        task: str | Task,
        data_dir: str | os.PathLike | None = None,
        batch_size: int | None = None,
        parallelize: bool = False,
        num_workers: int | None = None,
        evaluation_budget: int | None = None,
    ):
        self.task = task if isinstance(task, Task) else load_task(task, data_dir)
        space = self.task.space
        self.alphabet = alphabet_of(self.task) if space.is_discrete else None
        self._index = {a: i for i, a in enumerate(self.alphabet or [])}
        super().__init__(
            batch_size=batch_size,
            parallelize=parallelize,
            num_workers=num_workers,
            evaluation_budget=evaluation_budget if evaluation_budget is not None else 2**62,
        )

    def get_black_box_info(self) -> BlackBoxInformation:
        space = self.task.space
        return BlackBoxInformation(
            name=f"matchopt-{self.task.name}",
            max_sequence_length=space.shape[0],
            aligned=True,
            fixed_length=True,
            deterministic=True,
            alphabet=self.alphabet,
            discrete=space.is_discrete,
        )

    def to_designs(self, x: np.ndarray) -> np.ndarray:
        """poli inputs (letters or floats) -> the task's designs (tokens or floats)."""
        x = np.asarray(x)
        if not self.task.space.is_discrete:
            return self.task.space.validate(x.astype(np.float32), "black-box input")
        if x.ndim == 1 or (x.ndim == 2 and x.shape[1] == 1 and self.task.space.shape[0] > 1):
            # b whole strings (poli passes them on as b x 1)
            x = np.array([list(str(s)) for s in x.reshape(-1)])
        return letters_to_tokens(x, self.alphabet)

    def to_poli(self, designs: np.ndarray) -> np.ndarray:
        """The task's designs -> poli inputs (b x L letters, or b x d floats)."""
        if not self.task.space.is_discrete:
            return np.asarray(designs, dtype=np.float64)
        return np.asarray(self.alphabet)[np.asarray(designs)]

    def _black_box(self, x: np.ndarray, context: Any = None) -> np.ndarray:
        return self.task.score(self.to_designs(x)).reshape(-1, 1)


def letters_to_tokens(x: np.ndarray, alphabet: list[str]) -> np.ndarray:
    """An array of letters -> tokens (letter i of ``alphabet`` is token i)."""
    index = {a: i for i, a in enumerate(alphabet)}
    try:
        return np.vectorize(index.__getitem__, otypes=[np.int64])(x)
    except KeyError as err:
        raise MatchoptError(
            f"letter {err.args[0]!r} is not in the alphabet {''.join(alphabet)}"
        ) from None


def make_problem(task: str | Task, data_dir: str | os.PathLike | None = None, **kwargs: Any):
    """A poli ``Problem``: the task's black box and its offline designs as ``x0``."""
    black_box = TaskBlackBox(task, data_dir, **kwargs)
    return Problem(black_box, black_box.to_poli(black_box.task.offline.x))


class MatchoptSolver:
    """Any matchopt method as a poli solver on a black box's offline data ``x0, y0``.

    Args:
        black_box: a :class:`TaskBlackBox`, or any poli black box whose ``info`` gives an
            alphabet (sequences) or that takes float arrays (continuous designs).
        x0: starting designs (b x L letters, or b x d floats).
        y0: their values (b x 1 or b), larger is better.
        method: a registered matchopt method.
        preset, overrides, seed: as ``matchopt run``.
    """

    def __init__(
        self,
        black_box: Any,
        x0: np.ndarray,
        y0: np.ndarray,
        method: str = "matchopt",
        preset: str = "paper",
        overrides: dict[str, Any] | None = None,
        seed: int = 0,
    ):
        self.black_box = black_box
        self.x0, self.y0 = np.asarray(x0), np.asarray(y0, dtype=np.float64).reshape(-1)
        info = black_box.info
        self.alphabet = list(info.alphabet) if info.discrete else None
        self.method = make_method(method, preset, overrides, seed=seed)
        self.history: dict[str, list[np.ndarray]] = {"x": [], "y": []}

    def _designs(self, x: np.ndarray) -> np.ndarray:
        if self.alphabet is None:
            return x.astype(np.float32)
        return letters_to_tokens(x, self.alphabet)

    def _space(self, designs: np.ndarray) -> DesignSpace:
        if self.alphabet is None:
            return DesignSpace.continuous(designs.shape[1])
        return DesignSpace.discrete(designs.shape[1], len(self.alphabet))

    def next_candidate(self, n: int = 128) -> np.ndarray:
        """Fit the method on ``x0, y0`` (first call) and return ``n`` new designs in poli's
        format."""
        if not is_fitted(self.method):
            designs = self._designs(self.x0)
            self.method.fit(OfflineData(designs, self.y0, self._space(designs)))
        proposed = self.method.propose(n)
        if self.alphabet is None:
            return np.asarray(proposed, dtype=np.float64)
        return np.asarray(self.alphabet)[proposed]

    def solve(self, max_iter: int = 1, n: int = 128) -> tuple[np.ndarray, np.ndarray]:
        """``max_iter`` rounds of: propose ``n`` designs, evaluate them with the black box.

        Offline optimization is one round (the default); later rounds propose again from the
        same fitted method. Returns the designs and values of the last round; all rounds are
        in ``history``.
        """
        if max_iter < 1:
            raise MatchoptError(f"max_iter must be >= 1, got {max_iter}")
        for _ in range(max_iter):
            x = self.next_candidate(n)
            y = np.asarray(self.black_box(x))
            self.history["x"].append(x)
            self.history["y"].append(y)
        return self.history["x"][-1], self.history["y"][-1]


__all__ = [
    "ALPHABETS",
    "MatchoptSolver",
    "TaskBlackBox",
    "alphabet_of",
    "letters_to_tokens",
    "make_problem",
]
