"""Small tables and CLI helpers shared by the tests of the table optimizer and of model files:
the proposal columns, `matchopt optimize` in this process or in a subprocess."""

import os
import subprocess
import sys

import numpy as np
import pandas as pd

from matchopt.cli import main

SOLVENTS = ["water", "ethanol", "dmso"]


def numeric_frame(n: int = 64, seed: int = 0) -> pd.DataFrame:
    """Float column a in [0, 1], whole-number column b in 2..9, y peaked at a=0.7, b=6."""
    rng = np.random.default_rng(seed + 100)
    a = np.round(rng.uniform(0, 1, n), 4)
    b = rng.integers(2, 10, n)
    return pd.DataFrame({"a": a, "b": b, "y": -((a - 0.7) ** 2) - ((b - 6) / 10) ** 2})


def mixed_frame(n: int = 64, seed: int = 0) -> pd.DataFrame:
    frame = numeric_frame(n, seed)
    rng = np.random.default_rng(seed + 200)
    frame.insert(2, "solvent", rng.choice(SOLVENTS, n))
    frame["y"] += (frame["solvent"] == "ethanol") * 0.1
    return frame


def sequence_frame(n: int = 64, length: int = 6, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed + 300)
    tokens = rng.integers(0, 4, (n, length))
    seqs = ["".join("ACGT"[t] for t in row) for row in tokens]
    return pd.DataFrame({"id": np.arange(n), "seq": seqs, "y": (tokens == 2).sum(1) * 1.0})


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, *parts: str) -> None:
    """Exit status 2, no traceback, and the error is one line (progress bars may come before)."""
    assert code == 2
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("matchopt: error: ")]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]), err
    for part in parts:
        assert part in errors[0], (part, errors[0])


def assert_new_and_unique(proposals: pd.DataFrame, frame: pd.DataFrame, features) -> None:
    keys = [tuple(row) for row in proposals[features].itertuples(index=False)]
    assert len(set(keys)) == len(keys)
    measured = {tuple(row) for row in frame[features].itertuples(index=False)}
    assert not measured & set(keys)


PREDICTION_COLUMNS = [
    "predicted_y", "predicted_y_std", "predicted_y_low", "predicted_y_high", "extrapolated"
]  # fmt: skip


NUMERIC_PROPOSAL_COLUMNS = ["a", "b", *PREDICTION_COLUMNS, "nearest_euclidean"]


def optimize(capsys, data, *extra):
    return run_cli(
        capsys, "optimize", data, "--method", "random", "--preset", "quick",
        "--out", os.path.join(os.path.dirname(str(data)), "out.csv"), *extra,
    )  # fmt: skip


#: Text a crafted file could hold to drive a terminal: a title change, a screen clear, a bell,
#: a bidirectional override and a forged line.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202e\nmatchopt: error: forged"


def subprocess_cli(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "matchopt.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
