"""Optimize your own data: a generated reaction screen, `matchopt optimize`, and the true yields.

The table is a screen of chemical reactions. Each row is one experiment:

* ``temperature`` (deg C, whole numbers 20-120), ``time_h`` (hours, 0.5-24, log-uniform),
  ``concentration`` (mol/L, 0.05-2), ``catalyst`` (mol %, 0.1-5): numeric columns;
* ``solvent`` (water, ethanol, toluene, dmso): a categorical column;
* ``yield`` (%): the target, measured with noise N(0, 1).

The true yield is one smooth peak::

    yield = 100 * s(solvent) * exp(-z / 2),
    z = ((T - 85) / 25)^2 + ((ln t - ln 6) / 0.8)^2 + ((c - 0.8) / 0.5)^2 + ((k - 2.5) / 1.5)^2

with s = 1.0 (ethanol), 0.85 (dmso), 0.75 (water), 0.6 (toluene): the best conditions are
85 deg C, 6 h, 0.8 mol/L, 2.5 mol %, ethanol (yield 100). The screen draws 2,000 conditions
uniformly (seed 0) and keeps the 1,000 with the lowest measured yield, so the best measured row
is far from the peak (a screen where nothing worked well). matchopt sees only that table.

Run (from the repository root; about 30 s on a 2-core CPU)::

    python examples/optimize_table.py [--out-dir optimize_table_out] [--method M] [--preset P]

It writes ``reactions.csv``, runs the command line
``matchopt optimize reactions.csv --target yield --categorical solvent --out proposals.csv``,
then scores the proposals with the true yield function (which matchopt never saw) and prints
the best measured row next to the proposals' true yields.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from matchopt.cli import main as matchopt_main

#: Solvent factor s of the true yield.
SOLVENT = {"water": 0.75, "ethanol": 1.0, "toluene": 0.6, "dmso": 0.85}


def true_yield(table: pd.DataFrame) -> np.ndarray:
    """Noise-free yield (%) of every row (n,) of a table with the five condition columns."""
    z = (
        ((table["temperature"] - 85) / 25) ** 2
        + ((np.log(table["time_h"]) - np.log(6)) / 0.8) ** 2
        + ((table["concentration"] - 0.8) / 0.5) ** 2
        + ((table["catalyst"] - 2.5) / 1.5) ** 2
    )
    factor = table["solvent"].map(SOLVENT).to_numpy(dtype=np.float64)
    return 100.0 * factor * np.exp(-0.5 * z.to_numpy(dtype=np.float64))


def make_screen(n_draws: int = 2000, seed: int = 0) -> pd.DataFrame:
    """``n_draws`` uniform conditions with noisy yields; the lower half by measured yield."""
    rng = np.random.default_rng(seed)
    table = pd.DataFrame(
        {
            "temperature": rng.integers(20, 121, n_draws),
            "time_h": np.round(np.exp(rng.uniform(np.log(0.5), np.log(24), n_draws)), 2),
            "concentration": np.round(rng.uniform(0.05, 2.0, n_draws), 3),
            "catalyst": np.round(rng.uniform(0.1, 5.0, n_draws), 2),
            "solvent": rng.choice(list(SOLVENT), n_draws),
        }
    )
    table["yield"] = np.round(true_yield(table) + rng.normal(0.0, 1.0, n_draws), 2)
    kept = table[table["yield"] <= table["yield"].median()]
    return kept.reset_index(drop=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", default="optimize_table_out", help="folder for the files")
    parser.add_argument(
        "--method", default=None, help="any matchopt method (default: optimize's, the recommended)"
    )
    parser.add_argument(
        "--preset", default=None, help="a preset of the method (default: optimize's default)"
    )
    parser.add_argument(
        "--categories", default="search", choices=("search", "keep"), help="passed to matchopt"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the method")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="passed to matchopt"
    )
    args = parser.parse_args()

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data, proposals_path = out_dir / "reactions.csv", out_dir / "proposals.csv"
    screen = make_screen()
    screen.to_csv(data, index=False)
    print(f"{data}: {len(screen)} measured reactions")

    command = [
        "optimize", str(data), "--target", "yield", "--categorical", "solvent",
        "--categories", args.categories, "--seed", str(args.seed), "--out", str(proposals_path),
        "--force",  # the example's own folder: a rerun replaces its files
    ]  # fmt: skip
    if args.method is not None:
        command += ["--method", args.method]
    if args.preset is not None:
        command += ["--preset", args.preset]
    for item in args.set:
        command += ["--set", item]
    print("$ matchopt " + " ".join(command))
    status = matchopt_main(command)
    if status != 0:
        return status

    proposals = pd.read_csv(proposals_path)
    truth = true_yield(proposals)
    best_row = screen.loc[screen["yield"].idxmax()]
    best_row_truth = float(true_yield(screen.loc[[best_row.name]])[0])
    print()
    print(f"best measured row:   yield {best_row['yield']:.2f} (true {best_row_truth:.2f})")
    best_truth = float(true_yield(screen).max())
    print(f"best true yield among the measured rows: {best_truth:.2f}")
    print(
        f"{len(proposals)} proposals, true yield: best {truth.max():.2f}, "
        f"median {np.median(truth):.2f}, top-ranked {truth[0]:.2f}; "
        f"{int((truth > best_row_truth).sum())} beat the best row's true yield, "
        f"{int((truth > best_truth).sum())} beat every measured row's true yield"
    )
    print(f"best proposal: {proposals.iloc[int(truth.argmax())].to_dict()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
