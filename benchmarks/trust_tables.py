"""`matchopt optimize` on the three tables whose true function is known
(:mod:`matchopt.tabular.known_tables`), as a user would run it: what the fit line, the
intervals, the extrapolation flag and a per-table choice say, against the truth.

    python benchmarks/trust_tables.py [--method M] [--seed S] [--work DIR]

- noise table (DNA 8-mers measured 3 times, pure per-sequence noise): the fit line, held out
  by design, must show no skill (|Spearman| <= 0.2);
- smooth table (negated Rosenbrock on [-2, 2]^6): the top proposal must be flagged as an
  extrapolation or its interval must hold its true value; how many proposals beat the best
  measured row, and how far apart the top 16 lie (in std units);
- mixed table (3 categorical, 3 numeric columns): `--method auto` prints its members' scores,
  all from 0 to 1, and the true values of its top 16 against the default's.

Each run is a subprocess of the CLI (its own output is shown); nothing here feeds a method.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from matchopt.methods import RECOMMENDED_METHOD
from matchopt.tabular.known_tables import mixed_table, noise_table, smooth_table


def optimize(work: Path, name: str, table: pd.DataFrame, *options: str) -> tuple[str, pd.DataFrame]:
    """Run `matchopt optimize` on ``table``; returns its stderr and the proposals."""
    data, out = work / f"{name}.csv", work / f"{name}-proposals.csv"
    table.to_csv(data, index=False)
    command = [sys.executable, "-m", "matchopt.cli", "optimize", str(data), "--out", str(out),
               "--force", *options]  # fmt: skip
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    lines = [line for line in result.stderr.splitlines() if not line.startswith(("\r", "MATCH"))]
    lines = [line for line in lines if "%|" not in line]
    print(f"$ matchopt optimize {name}.csv {' '.join(options)}   ({seconds:.0f} s)")
    print("\n".join(f"    {line}" for line in lines))
    if result.returncode != 0:
        raise SystemExit(f"{name}: exit {result.returncode}")
    return result.stderr, pd.read_csv(out)


def spearman_of(stderr: str) -> float:
    return float(re.search(r"held-out fit: Spearman (-?[\d.]+)", stderr).group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default=RECOMMENDED_METHOD)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=None, help="folder for the tables")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="matchopt-trust-"))
    work.mkdir(parents=True, exist_ok=True)
    common = ["--method", args.method, "--seed", str(args.seed)]
    rows = []

    noise, _ = noise_table(seed=args.seed)
    stderr, _ = optimize(work, "dna_noise", noise, "--target", "activity", "--sequence", "seq",
                         "--n", "8", *common)  # fmt: skip
    rho = spearman_of(stderr)
    rows.append(("noise: fit line held out by design", f"Spearman {rho:.2f}", abs(rho) <= 0.2))

    smooth, truth = smooth_table(seed=args.seed)
    _, proposals = optimize(work, "smooth", smooth, "--target", "y", *common)
    true = truth(proposals)
    top = proposals.iloc[0]
    covered = top["predicted_y_low"] <= true[0] <= top["predicted_y_high"]
    rows.append((
        "smooth: top proposal flagged or covered",
        f"predicted {top['predicted_y']:.4g} [{top['predicted_y_low']:.4g}, "
        f"{top['predicted_y_high']:.4g}], true {true[0]:.4g}, flagged {bool(top['extrapolated'])}",
        bool(top["extrapolated"]) or covered,
    ))  # fmt: skip
    inside = (proposals["predicted_y_low"] <= true) & (true <= proposals["predicted_y_high"])
    best = smooth["y"].max()
    scale = smooth.drop(columns="y").std().to_numpy()
    x = proposals[smooth.columns[:-1]].to_numpy()[:16] / scale
    pairwise = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))[np.triu_indices(len(x), 1)]
    rows.append((
        "smooth: all proposals",
        f"{(true > best).sum()} of {len(true)} above the best measured {best:.4g}; "
        f"{inside.mean():.0%} inside their interval, {proposals['extrapolated'].mean():.0%} "
        f"flagged; top 16 median pairwise distance {np.median(pairwise):.2f} std "
        f"(nearest {pairwise.min():.2f})",
        None,
    ))  # fmt: skip

    mixed, truth = mixed_table(seed=args.seed)
    categorical = "catalyst,solvent,ligand"
    stderr, auto = optimize(work, "mixed-auto", mixed, "--target", "score", "--categorical",
                            categorical, "--method", "auto", "--seed", str(args.seed))  # fmt: skip
    line = next(line for line in stderr.splitlines() if "chose" in line)
    scores = [float(v) for v in re.findall(r"\b[\w-]+ (\d+\.\d+)", line.split("0 to 1):")[-1])]
    _, default = optimize(work, "mixed", mixed, "--target", "score", "--categorical",
                          categorical, *common)  # fmt: skip
    rows.append((
        "mixed: auto's scores on one scale",
        line.strip()[:160],
        bool(scores) and all(0 <= s <= 1 for s in scores),
    ))  # fmt: skip
    rows.append((
        "mixed: median true value of the top 16",
        f"auto {np.median(truth(auto.head(16))):.3f}, {args.method} "
        f"{np.median(truth(default.head(16))):.3f} (best measured {mixed['score'].max():.3f})",
        None,
    ))  # fmt: skip

    print(f"\n| check (method {args.method}, seed {args.seed}) | measured | holds |")
    print("|---|---|---|")
    for what, measured, holds in rows:
        print(f"| {what} | {measured} | {'' if holds is None else ('yes' if holds else 'NO')} |")
    return 0 if all(h is not False for *_, h in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
