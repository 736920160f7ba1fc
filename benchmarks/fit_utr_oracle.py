"""Fit the UTR task's oracle (matchopt.tasks.utr_oracle) and write it where the package ships it.

    python benchmarks/fit_utr_oracle.py [--data-dir DIR] [--out src/matchopt/tasks/utr_oracle]

First the recipe is trained on 90% of the 280,000 rows and scored on the other 10% (R^2 and
Spearman printed and written into the header), then trained again on all rows; the weights
(safetensors) and the header (JSON, with their sha256) are written into ``--out``. One thread,
about 35 minutes on a 2-core machine's single core. CI never runs it: the task reads the
shipped files.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import numpy as np
import torch

from matchopt.tasks.base import resolve_data_dir
from matchopt.tasks.shards import load_shards, shard_paths
from matchopt.tasks.utr_oracle import OracleRecipe, fit_and_measure

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="design-bench data folder")
    parser.add_argument("--out", type=Path, default=ROOT / "src/matchopt/tasks/utr_oracle")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    paths = shard_paths(resolve_data_dir(args.data_dir), "utr", "utr", 14)
    x, y = load_shards(paths, (50,), "iu")
    print(f"{len(y):,} rows; y from {y.min():.3f} to {y.max():.3f}", flush=True)
    given = sys.argv[1:] if argv is None else argv
    command = f"python benchmarks/fit_utr_oracle.py {shlex.join(given)}".strip()
    y = np.asarray(y, dtype=np.float64)
    header = fit_and_measure(x, y, args.out, OracleRecipe(), command=command)
    print(f"wrote {args.out} (weights sha256 {header['weights_sha256']})")
    print(
        "matchopt takes only the oracle its code names: set ORACLE_SHA256 in "
        f"src/matchopt/tasks/utr_oracle.py to {header['oracle_sha256']!r}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
