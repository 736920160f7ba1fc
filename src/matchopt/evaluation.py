"""Scoring a run: normalized scores, nearest-rank percentiles, and the run record."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def percentile(values: np.ndarray, q: float) -> float:
    """Nearest-rank percentile (numpy ``method="nearest"``, as design-baselines reports)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="nearest"))


@dataclass
class RunRecord:
    """Everything about one (task, method, seed) run, enough to rerun it and re-score it.

    ``scores`` keeps all normalized oracle values of the returned designs, so any percentile
    can be computed later; ``p100`` and ``p50`` are nearest-rank percentiles of them.
    """

    task: str
    method: str
    seed: int
    preset: str
    config: dict[str, Any]
    scores: list[float]
    p100: float
    p50: float
    offline_best: float
    fit_seconds: float
    search_seconds: float
    version: str
    n_designs: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        return cls(**json.loads(text))

    @property
    def wall_seconds(self) -> float:
        return self.fit_seconds + self.search_seconds


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename: never a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        # mkstemp makes owner-only files; give the usual permissions (0666 minus the umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record_path(out_dir: Path, record: RunRecord) -> Path:
    return Path(out_dir) / record.task / record.method / f"seed{record.seed}.json"


def write_record(out_dir: Path, record: RunRecord, designs: np.ndarray | None = None) -> Path:
    """Write the record (and the designs as .npy beside it), each atomically."""
    path = record_path(out_dir, record)
    if designs is not None:
        buffer = io.BytesIO()
        np.save(buffer, designs)
        atomic_write_bytes(path.with_suffix(".designs.npy"), buffer.getvalue())
    atomic_write_bytes(path, (record.to_json() + "\n").encode())
    return path
