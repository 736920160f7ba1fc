"""Time per run of MATCH-OPT ensembles: one TF-Bind-8 seed and one 2,000-row protein table.

Each measurement is one fresh ``matchopt`` process at the default threads, as a user's command
is, on an otherwise idle machine (its own load is the only load):

* ``run``: ``matchopt run --task tfbind8 --method M --seeds 0``: wall seconds of the process and
  the record's fit and search seconds;
* ``protein``: the 2,000-row table of 4-site, 20-letter protein variants (``tev-screen``'s offline
  table, the TEV landscape's random screening library, written here as a CSV of sequences),
  first as ``matchopt run --task tev-screen`` (fit and search), then as ``matchopt optimize`` on
  the CSV, which also cross-validates the table's ensemble and writes the report.

Methods are run alternately (A, B, A, B ...) so that drift in the machine's speed falls on both;
the printed ratio is measured in this one run.

    python benchmarks/fit_speed.py [--methods matchopt-ens-mix-near,matchopt-ens-mix-near-k1]
        [--repeats 1] [--skip-optimize]

The last line of output is one JSON object with every measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from matchopt.tasks import load_task
from matchopt.tasks.landscapes import AMINO_ACIDS

PROTEIN_TASK = "tev-screen"


def protein_table(path: Path) -> Path:
    """``tev-screen``'s offline rows as a CSV (``sequence``, ``fitness``)."""
    task = load_task(PROTEIN_TASK)
    lines = ["sequence,fitness"] + [
        "".join(AMINO_ACIDS[t] for t in row) + f",{y!r}"
        for row, y in zip(task.offline.x, task.offline.y.tolist())
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _environment() -> dict[str, str]:
    # Default threads: what a user's shell has, not the one-thread setting of benchmark lanes.
    drop = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MATCHOPT_THREADS")
    return {k: v for k, v in os.environ.items() if k not in drop}


def timed(command: list[str]) -> float:
    """Wall seconds of one process; its failure ends the benchmark with its output."""
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=_environment())
    seconds = time.perf_counter() - start
    if result.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return seconds


def time_run(task: str, method: str) -> dict[str, float]:
    """``matchopt run`` of one seed: wall, fit and search seconds."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "matchopt.cli", "run", "--task", task]
        command += ["--method", method, "--seeds", "0", "--out", out]
        wall = timed(command)
        record = json.loads((Path(out) / task / method / "seed0.json").read_text())
    return {"wall": wall, "fit": record["fit_seconds"], "search": record["search_seconds"]}


def time_optimize(table: Path, method: str) -> dict[str, float]:
    """``matchopt optimize`` on the protein CSV: wall seconds."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "matchopt.cli", "optimize", str(table)]
        command += ["--target", "fitness", "--sequence", "sequence", "--method", method]
        command += ["--out", str(Path(out) / "proposals.csv")]
        return {"wall": timed(command)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="matchopt-ens-mix-near,matchopt-ens-mix-near-k1")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip-optimize", action="store_true")
    args = parser.parse_args()
    methods = args.methods.split(",")
    results: dict[str, dict[str, list]] = {m: {} for m in methods}
    with tempfile.TemporaryDirectory() as folder:
        table = protein_table(Path(folder) / "tev_screen.csv")
        for _ in range(args.repeats):
            for method in methods:
                cells = {"tfbind8": time_run("tfbind8", method)}
                cells["protein-run"] = time_run(PROTEIN_TASK, method)
                if not args.skip_optimize:
                    cells["protein-optimize"] = time_optimize(table, method)
                for name, value in cells.items():
                    results[method].setdefault(name, []).append(value)
                    print(
                        f"{method:<28} {name:<17} "
                        + "  ".join(f"{k} {v:7.1f} s" for k, v in value.items()),
                        flush=True,
                    )
    summary = {
        m: {name: min(v["wall"] for v in values) for name, values in cells.items()}
        for m, cells in results.items()
    }
    if len(methods) == 2:
        a, b = methods
        for name in summary[a]:
            print(f"{name}: {a} / {b} wall = {summary[a][name] / summary[b][name]:.2f}")
    print(json.dumps({"cpu_count": os.cpu_count(), "results": results, "min_wall": summary}))


if __name__ == "__main__":
    main()
