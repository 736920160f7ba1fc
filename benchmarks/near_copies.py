"""Near-copies among a method's designs, per task and seed, from a results folder's records.

    python benchmarks/near_copies.py results/dev --method auto [--min-distance 0.01]

Two continuous designs are near-copies when their root-mean-square difference per feature, in
units of the widths of the box the task's offline rows span, is below ``--min-distance``
(``matchopt.search.scaled_distances``; 0.01 is at least 1e-3 of the box's width times sqrt(d)
in Euclidean distance); two token designs when they are equal. Reads the designs each record
keeps beside it (``seed<k>.designs.npy``) and the task's offline rows (no oracle call).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from matchopt.records import load_records
from matchopt.search import box_widths, near_copy_pairs
from matchopt.tasks import load_task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--method", required=True)
    parser.add_argument("--min-distance", type=float, default=0.01)
    args = parser.parse_args(argv)
    widths: dict[str, np.ndarray | None] = {}
    print(f"| task | seed | designs | near-copy pairs (< {args.min_distance:g}) |")
    print("|---|---|---|---|")
    worst = 0
    for path in sorted(args.folder.rglob(f"{args.method}/seed*.designs.npy")):
        records = [r for r in load_records(path.parent) if r.method == args.method]
        seed = int(path.name.split(".")[0][len("seed") :])
        task = next((r.task for r in records if r.seed == seed), None)
        if task is None:
            continue
        designs = np.load(path, allow_pickle=False)
        flat = designs.reshape(len(designs), -1)
        if task not in widths:
            offline = load_task(task).offline
            widths[task] = None if offline.space.is_discrete else box_widths(offline.x)
        if widths[task] is None:
            pairs = len(flat) - len(np.unique(flat, axis=0))
        else:
            pairs = near_copy_pairs(flat.astype(np.float64), widths[task], args.min_distance)
        worst = max(worst, pairs)
        print(f"| {task} | {seed} | {len(flat)} | {pairs} |")
    print(f"\nmost near-copy pairs in one run: {worst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
