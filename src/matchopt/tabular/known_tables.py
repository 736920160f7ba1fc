"""Tables whose true function is known: the checks of how far `matchopt optimize` can be trusted.

Each function returns ``(frame, truth)``: a seeded table of measured rows (a DataFrame as a
user would load it) and the true value of any row of that format (``truth(frame) -> (n,)``),
which matchopt never sees. The tests and ``benchmarks/trust_tables.py`` use them:

- :func:`smooth_table`: a smooth function of 6 numeric columns (a negated Rosenbrock on
  [-2, 2]^6), where a surrogate extrapolates far beyond the measured values;
- :func:`noise_table`: 8-letter DNA sequences each measured 3 times, whose values are pure
  per-sequence noise (nothing about a new sequence can be predicted); a hold-out that splits
  rows rather than designs reports skill that is not there;
- :func:`mixed_table`: 3 categorical and 3 numeric columns, where methods' own scores live on
  different scales.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

Truth = Callable[[pd.DataFrame], np.ndarray]

SMOOTH_COLUMNS = ("x1", "x2", "x3", "x4", "x5", "x6")


def _rosenbrock(x: np.ndarray) -> np.ndarray:
    return np.sum(100.0 * (x[:, 1:] - x[:, :-1] ** 2) ** 2 + (1.0 - x[:, :-1]) ** 2, axis=1)


def smooth_table(rows: int = 300, seed: int = 0) -> tuple[pd.DataFrame, Truth]:
    """``rows`` uniform points of [-2, 2]^6 and ``y = -rosenbrock(x)`` (maximum 0 at x = 1)."""
    rng = np.random.default_rng([seed, 46, 1])
    x = rng.uniform(-2.0, 2.0, size=(rows, len(SMOOTH_COLUMNS)))
    frame = pd.DataFrame(x, columns=list(SMOOTH_COLUMNS))

    def truth(table: pd.DataFrame) -> np.ndarray:
        return -_rosenbrock(table[list(SMOOTH_COLUMNS)].to_numpy(dtype=np.float64))

    frame["y"] = truth(frame)
    return frame, truth


def noise_table(
    sequences: int = 300, replicates: int = 3, seed: int = 0
) -> tuple[pd.DataFrame, Truth]:
    """``sequences`` random 8-mers over ACGT, each measured ``replicates`` times: ``activity``
    is the sequence's own random level (standard normal, unrelated to its letters) plus
    measurement noise (std 0.2). The truth of a sequence never measured is its expected level,
    0: no model can rank new sequences."""
    rng = np.random.default_rng([seed, 46, 2])
    letters = np.array(list("ACGT"))
    seen: set[str] = set()
    while len(seen) < sequences:
        seen.add("".join(rng.choice(letters, size=8)))
    names = sorted(seen)
    rng.shuffle(names)
    level = dict(zip(names, rng.normal(size=len(names))))
    seq = np.repeat(names, replicates)
    activity = np.array([level[s] for s in seq]) + rng.normal(scale=0.2, size=len(seq))
    order = rng.permutation(len(seq))  # replicates are not adjacent in the file
    frame = pd.DataFrame({"seq": seq[order], "activity": activity[order]})

    def truth(table: pd.DataFrame) -> np.ndarray:
        return np.array([level.get(s, 0.0) for s in table["seq"]], dtype=np.float64)

    return frame, truth


MIXED_CATEGORIES = {
    "catalyst": {"Pd": 1.0, "Ni": 0.4, "Cu": 0.0, "Fe": -0.5},
    "solvent": {"water": 0.0, "ethanol": 0.6, "toluene": 0.2},
    "ligand": {"none": 0.0, "PPh3": 0.8, "dppf": 0.5, "XPhos": 1.0, "BINAP": 0.3},
}
MIXED_NUMERIC = ("temperature", "time", "loading")


def mixed_table(rows: int = 300, seed: int = 0) -> tuple[pd.DataFrame, Truth]:
    """``rows`` random conditions of 3 categorical and 3 numeric columns (temperature 20-120,
    time 1-24, loading 0.5-10), ``score`` = the categories' effects plus a smooth peak in the
    numeric ones (at 85, 10, 4), spanning about 6; the lower 60% of 2 x ``rows`` random rows are
    measured, so the best conditions are unseen."""
    rng = np.random.default_rng([seed, 46, 3])
    count = 2 * rows
    frame = pd.DataFrame(
        {name: rng.choice(list(effects), size=count) for name, effects in MIXED_CATEGORIES.items()}
    )
    frame["temperature"] = rng.uniform(20.0, 120.0, count).round(1)
    frame["time"] = rng.uniform(1.0, 24.0, count).round(2)
    frame["loading"] = rng.uniform(0.5, 10.0, count).round(2)

    def truth(table: pd.DataFrame) -> np.ndarray:
        value = np.zeros(len(table))
        for name, effects in MIXED_CATEGORIES.items():
            value += table[name].map(effects).to_numpy(dtype=np.float64)
        t = table["temperature"].to_numpy(dtype=np.float64)
        h = table["time"].to_numpy(dtype=np.float64)
        c = table["loading"].to_numpy(dtype=np.float64)
        peak = ((t - 85.0) / 30.0) ** 2 + ((h - 10.0) / 8.0) ** 2 + ((c - 4.0) / 3.0) ** 2
        return value + 3.0 * np.exp(-peak)

    frame["score"] = truth(frame) + rng.normal(scale=0.1, size=count)
    kept = frame["score"] <= frame["score"].quantile(0.6)
    return frame[kept].head(rows).reset_index(drop=True), truth
