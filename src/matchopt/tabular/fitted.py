"""What the steps of ``optimize`` read of a fitted table optimizer.

:mod:`~matchopt.tabular.fit`, :mod:`~matchopt.tabular.propose` and
:mod:`~matchopt.tabular.outputs` take the fitted :class:`~matchopt.tabular.TableOptimizer` that
orchestrates them; they name it by this protocol (its settings, what ``fit`` learned, the two
predictions), so that none of them imports the orchestrator that imports them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from matchopt.data import OfflineData
    from matchopt.encodings import DesignEncoder
    from matchopt.methods.base import Method
    from matchopt.models import GaussianEnsemble
    from matchopt.tabular.calibration import Calibration
    from matchopt.tabular.schema import TableSchema


class FittedTable(Protocol):
    """A fitted :class:`~matchopt.tabular.TableOptimizer`, as the steps of ``optimize`` read it
    (the attributes are documented there)."""

    # The settings (the constructor's keyword arguments).
    target: str
    features: Sequence[str] | None
    categorical: Iterable[str]
    sequence: str | None
    alphabet: str | None
    minimize: bool
    bounds: Mapping[str, tuple[float, float]] | None
    method: str
    preset: str | None
    overrides: Mapping[str, Any] | None
    seed: int
    oversample: int
    min_distance: float
    diversity: float | None

    # What fit learned, and what the last proposal round looked at.
    preset_: str
    schema_: TableSchema
    method_: Method
    data_: OfflineData
    ranker_: GaussianEnsemble | None
    ranking_: str
    choice_: dict | None
    cross_validation_: dict
    calibration_: Calibration | None
    fit_quality_: dict | None
    source_: str
    n_candidates_: int

    @property
    def diversity_(self) -> float: ...

    def _predict(self, designs: np.ndarray) -> np.ndarray: ...

    def _ensemble_prediction(
        self,
        designs: np.ndarray,
        encoder: DesignEncoder | None = None,
        ensemble: GaussianEnsemble | None = None,
    ) -> tuple[np.ndarray, np.ndarray]: ...
