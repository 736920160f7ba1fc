"""Whether two methods proposed the same designs, per task and seed, from a results folder.

    python benchmarks/same_designs.py results/dev matchopt-ens-mix-near matchopt-ens-mix-near-avg

A round whose candidate differs from a method only where the task's table says so
(docs/suite-rounds.md) checks with it that elsewhere the designs are equal bit for bit. Reads
the designs each record keeps beside it (``seed<k>.designs.npy``); no oracle call, no task loaded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from matchopt.records import load_records


def designs_by_cell(folder: Path, method: str) -> dict[tuple[str, int], Path]:
    """The designs file of every (task, seed) of ``method`` under ``folder``
    (``<task>/<method>/seed<k>.designs.npy``, the layout :func:`load_records` checks)."""
    load_records(folder)  # the folder's records are readable and their paths agree
    cells: dict[tuple[str, int], Path] = {}
    for path in sorted(folder.rglob(f"{method}/seed*.designs.npy")):
        seed = int(path.name.split(".")[0][len("seed") :])
        cells[(path.parent.parent.name, seed)] = path
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("first")
    parser.add_argument("second")
    args = parser.parse_args(argv)
    first = designs_by_cell(args.folder, args.first)
    second = designs_by_cell(args.folder, args.second)
    shared = sorted(set(first) & set(second))
    if not shared:
        print(f"no (task, seed) with designs of both {args.first} and {args.second}")
        return 1
    print(f"| task | seed | same designs ({args.first} / {args.second}) |")
    print("|---|---|---|")
    for task, seed in shared:
        a = np.load(first[(task, seed)], allow_pickle=False)
        b = np.load(second[(task, seed)], allow_pickle=False)
        print(f"| {task} | {seed} | {'yes' if np.array_equal(a, b) else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
