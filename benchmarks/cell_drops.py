"""Where a candidate's scores drop below another method's by more than the seeds explain.

Round 9's second criterion (docs/suite-rounds.md): among the (task, percentile) cells both
methods have, count those where the candidate's mean over seeds falls below the other's by more
than two standard errors of the difference, ``sqrt(s1^2 / n1 + s2^2 / n2)`` (population std over
seeds). Reads the records under a results folder; no oracle call.

    python benchmarks/cell_drops.py results/dev matchopt-ens-mix-near-k1 matchopt-ens-mix-near
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from matchopt.errors import MatchoptError
from matchopt.records import load_records

PERCENTILES = ("p100", "p50")


def cell_drops(records, candidate: str, other: str) -> list[dict]:
    """One row per (task, percentile) both methods have: their means, stds, seed counts, the
    difference (candidate minus other), its standard error and whether it is a drop."""
    scores: dict[tuple[str, str, str], list[float]] = {}
    for record in records:
        if record.method in (candidate, other):
            for name in PERCENTILES:
                key = (record.task, name, record.method)
                scores.setdefault(key, []).append(float(getattr(record, name)))
    rows = []
    for task in sorted({task for task, _, _ in scores}):
        for name in PERCENTILES:
            a, b = scores.get((task, name, candidate)), scores.get((task, name, other))
            if not a or not b:
                continue
            se = math.sqrt(np.var(a) / len(a) + np.var(b) / len(b))
            difference = float(np.mean(a) - np.mean(b))
            rows.append(
                {
                    "task": task,
                    "percentile": name,
                    "candidate": (float(np.mean(a)), float(np.std(a)), len(a)),
                    "other": (float(np.mean(b)), float(np.std(b)), len(b)),
                    "difference": difference,
                    "se": se,
                    "drop": difference < -2.0 * se,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("candidate")
    parser.add_argument("other")
    args = parser.parse_args(argv)
    rows = cell_drops(load_records(args.results), args.candidate, args.other)
    if not rows:
        raise MatchoptError(
            f"no (task, percentile) cell has both {args.candidate} and {args.other}"
        )
    print(f"| task | | {args.candidate} | {args.other} | difference | 2 SE | drop |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        (ma, sa, na), (mb, sb, nb) = row["candidate"], row["other"]
        print(
            f"| {row['task']} | {row['percentile']} | {ma:.3f} +- {sa:.3f} ({na}) | "
            f"{mb:.3f} +- {sb:.3f} ({nb}) | {row['difference']:+.3f} | {2 * row['se']:.3f} | "
            f"{'yes' if row['drop'] else ''} |"
        )
    drops = sum(row["drop"] for row in rows)
    print(f"\n{drops} of {len(rows)} cells drop by more than two standard errors")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MatchoptError as err:
        sys.exit(f"error: {err}")
