"""Real protein fitness landscapes: combinatorially complete libraries with an exact oracle.

Three published landscapes measure (nearly) every variant of a few protein sites, so, as for
TF-Bind-8, the oracle is the measured table itself (no model in between):

* ``phoq``: PhoQ, 4 sites x 20 amino acids, 140,517 of 160,000 variants measured, 89,506 of
  them at 0 (Podgornaia & Laub, Science 2015): rugged and mostly dead, with a thin active top;
* ``tev``: TEV protease, 4 sites x 20, 159,132 of 160,000 (Tu 2022, as GraphFLA names it);
* ``pard3``: ParD3 antitoxin against ParE3, 3 sites x 20, 7,882 of 8,000 (Lite et al., eLife
  2020): a small space where every design can be scored.

The files are GraphFLA's ``data/BioSequence/`` CSVs (columns ``sequences`` and ``fitness``;
their SOURCES.md gives repository, commit and checksums). They are looked for in a folder
``landscapes`` inside the data folder or beside it (``$MATCHOPT_DATA_DIR`` is design-bench's
folder; the landscapes sit next to it in the shared data layout).

A design is the variable sites as tokens (``ACDEFGHIKLMNPQRSTVWY`` -> 0..19). A design the
table never measured scores the table's minimum (it cannot be claimed as a find), and the run
record counts such designs (``unmeasured``). Each landscape gives two offline protocols, drawn
once with a fixed seed:

* ``<name>``, **design-bench's recipe**: the variants at or below the median (for PhoQ, whose
  median is 0, at or below its 90th percentile, so that the table is not constant), at most
  10,000 of them drawn uniformly: nearly every row is weak or dead, and a method must leave the
  data to find anything;
* ``<name>-screen``, **a random screening library**: 2,000 measured variants drawn uniformly
  (1,000 for ParD3), what a lab holds after one unbiased screen.

Normalized scores use the min and max of the full table, as for every task.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

import numpy as np

from matchopt.data import DesignSpace
from matchopt.errors import MatchoptError
from matchopt.tasks.base import Task, resolve_data_dir
from matchopt.tasks.design_bench import SequenceLookupOracle
from matchopt.tasks.shards import offline_rows

#: Amino-acid letters in token order.
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
#: Folder of the landscape files, inside the data folder or beside it.
LANDSCAPES_FOLDER = "landscapes"
#: Largest landscape file read (bytes): the largest of the three is about 6 MB.
MAX_FILE_BYTES = 64 * 1024 * 1024


def landscape_folders(data_dir: Path) -> tuple[Path, Path]:
    """Where landscape files are looked for: ``<data_dir>/landscapes``, then the sibling
    ``<data_dir>/../landscapes``."""
    return data_dir / LANDSCAPES_FOLDER, data_dir.parent / LANDSCAPES_FOLDER


def read_landscape(path: Path, n_sites: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (N x n_sites, int64) and fitness (N,) of a GraphFLA landscape CSV, checked: the
    columns ``sequences`` and ``fitness`` exist, every sequence has ``n_sites`` amino-acid
    letters, no sequence repeats and every fitness is finite."""
    import pandas as pd

    if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
        raise MatchoptError(f"{path}: not a regular file of at most {MAX_FILE_BYTES} bytes")
    try:
        table = pd.read_csv(path, usecols=["sequences", "fitness"], dtype={"sequences": str})
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise MatchoptError(f"{path}: not a landscape table ({str(err).splitlines()[0]})") from None
    sequences = table["sequences"].astype(str)
    bad = ~sequences.str.fullmatch(f"[{AMINO_ACIDS}]{{{n_sites}}}")
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise MatchoptError(
            f"{path}: row {row + 2}: sequence {sequences.iloc[row]!r} is not {n_sites} letters "
            f"of {AMINO_ACIDS}"
        )
    if sequences.duplicated().any():
        twice = sequences[sequences.duplicated()].iloc[0]
        raise MatchoptError(f"{path}: sequence {twice!r} appears more than once")
    y = pd.to_numeric(table["fitness"], errors="coerce").to_numpy(dtype=np.float64)
    if not np.isfinite(y).all():
        row = int(np.flatnonzero(~np.isfinite(y))[0])
        raise MatchoptError(f"{path}: row {row + 2}: fitness {table['fitness'].iloc[row]!r}")
    letters = np.frombuffer("".join(sequences).encode("ascii"), dtype=np.uint8)
    lookup = np.full(256, -1, dtype=np.int64)
    lookup[np.frombuffer(AMINO_ACIDS.encode("ascii"), dtype=np.uint8)] = np.arange(20)
    return lookup[letters].reshape(-1, n_sites), y


class ProteinLandscape(Task):
    """A protein landscape task (module docstring). Subclasses set the class attributes."""

    #: The landscape's file name in the landscapes folder.
    file_name: ClassVar[str]
    #: ``"design-bench"`` (rows at or below ``max_percentile``, at most ``max_samples``) or
    #: ``"screen"`` (``screen_size`` measured variants drawn uniformly).
    protocol: ClassVar[str]
    max_percentile: ClassVar[float] = 50.0
    max_samples: ClassVar[int] = 10_000
    screen_size: ClassVar[int] = 2_000
    #: Seed of the offline draw (fixed: the task's offline table is one table).
    draw_seed: ClassVar[int] = 0

    @classmethod
    def required_files(cls, data_dir: Path | None) -> list[Path]:
        if data_dir is None:
            return [Path(LANDSCAPES_FOLDER) / cls.file_name]
        for folder in landscape_folders(Path(data_dir)):
            if (folder / cls.file_name).is_file():
                return [folder / cls.file_name]
        return [Path(data_dir) / LANDSCAPES_FOLDER / cls.file_name]

    @classmethod
    def missing_message(
        cls, data_dir: str | os.PathLike | None, missing: list[Path] | None = None
    ) -> str:
        folder = resolve_data_dir(data_dir)
        inside, beside = landscape_folders(folder)
        return (
            f"task {cls.name!r}: landscape file {cls.file_name} not found in {inside} or "
            f"{beside}; it is GraphFLA's data/BioSequence/{cls.file_name} "
            "(https://github.com/COLA-Laboratory/GraphFLA): place it in either folder"
        )

    def _load(self):
        x_full, y_full = read_landscape(self.required_files(self.data_dir)[0], self.space.shape[0])
        self.x_full = x_full
        self._oracle = SequenceLookupOracle(
            x_full, y_full, self.space.vocab_size, fill=float(y_full.min())
        )
        if self.protocol == "screen":
            rng = np.random.default_rng(self.draw_seed)
            rows = np.sort(rng.choice(len(y_full), size=self.screen_size, replace=False))
        else:
            rows = offline_rows(y_full, self.max_percentile, self.max_samples, self.draw_seed)
        return x_full[rows], y_full[rows], y_full

    def _score(self, designs: np.ndarray) -> np.ndarray:
        return self._oracle(designs)

    def measured(self, designs: np.ndarray) -> np.ndarray:
        """True where the landscape measured the design (False: scored as its minimum)."""
        return self._oracle.measured(self.space.validate(designs))


_SOURCES = {
    "phoq": (
        "Podgornaia2015_PhoQ.csv",
        4,
        "PhoQ, 4 sites x 20 amino acids (Podgornaia & Laub 2015); exact lookup",
    ),
    "tev": ("Tu2022_TEV.csv", 4, "TEV protease, 4 sites x 20 amino acids; exact lookup"),
    "pard3": (
        "Lite2020_ParD3.csv",
        3,
        "ParD3 antitoxin, 3 sites x 20 amino acids (Lite et al. 2020); exact lookup",
    ),
}
#: Offline rows of each variant (checked by the tests on the real files).
_OFFLINE_SIZES = {
    "phoq": 10_000,
    "phoq-screen": 2_000,
    "tev": 10_000,
    "tev-screen": 2_000,
    "pard3": 3_941,
    "pard3-screen": 1_000,
}


def _landscape_task(name: str, protocol: str) -> type[ProteinLandscape]:
    file_name, n_sites, about = _SOURCES[name]
    task_name = name if protocol == "design-bench" else f"{name}-screen"
    percentile = 90 if name == "phoq" else 50
    offline = (
        "a random screening library"
        if protocol == "screen"
        else f"rows at or below the {percentile}th percentile, at most 10,000 (design-bench)"
    )
    attrs = {
        "name": task_name,
        "summary": f"{about}; offline: {offline}",
        "space": DesignSpace.discrete(n_sites, len(AMINO_ACIDS)),
        "offline_size": _OFFLINE_SIZES[task_name],
        "file_name": file_name,
        "protocol": protocol,
        "__doc__": f"Protein landscape {task_name!r}: {about}; offline set: {offline}.",
    }
    attrs["max_percentile"] = float(percentile)  # PhoQ's median is 0: below it, a constant table
    if name == "pard3":
        attrs["screen_size"] = 1_000
    class_name = "".join(part.capitalize() for part in task_name.split("-"))
    return type(class_name, (ProteinLandscape,), attrs)


LANDSCAPE_TASKS: tuple[type[ProteinLandscape], ...] = tuple(
    _landscape_task(name, protocol) for name in _SOURCES for protocol in ("design-bench", "screen")
)
