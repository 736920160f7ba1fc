"""Can a surrogate tell which point mutants of the best offline rows beat the offline best?

Issue 25 asks that the recommended method's median design beat the offline best on every suite
task: at least 65 of its 128 designs above the best offline row. On the Ehrlich tasks no
compared method does (docs/suite-rounds.md). This script measures why, per token task:

- the ceiling near the data: every point mutant of the 128 best offline rows (none an offline
  row), the share the oracle scores above the offline best, and the share infeasible;
- the surrogate: ``METHOD`` trained on the offline rows (seed 0), its ensemble-mean ranking of
  the feasible mutants against the oracle's (Spearman), and how many of the 128 mutants its
  score (the method's own search score) ranks highest beat the offline best, against the count
  a uniform pick of 128 feasible-by-pairs mutants would expect.

The oracle only scores designs this script built; nothing here feeds a method's choice.

    python benchmarks/mutant_ceiling.py                                # the Ehrlich suite tasks
    python benchmarks/mutant_ceiling.py --task ehrlich-4x32 --model-dir /tmp/models

``--model-dir`` keeps each training (``<task>.model``) and reuses it on the next run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from matchopt.methods import make_method
from matchopt.methods.base import Method
from matchopt.tasks import load_task

TASKS = ("ehrlich-4x16", "ehrlich-4x32", "ehrlich-20x64")
METHOD = "matchopt-ens-mix"
TOP_ROWS = 128
PICK = 128


def point_mutants(rows: np.ndarray, vocab_size: int, exclude: np.ndarray) -> np.ndarray:
    """Every design one token away from a row of ``rows`` (distinct, none in ``exclude``)."""
    n, length = rows.shape
    position = np.repeat(np.arange(length), vocab_size - 1)
    shift = np.tile(np.arange(1, vocab_size), length)
    mutants = np.repeat(rows[:, None, :], len(position), axis=1)  # n x (L(k-1)) x L
    columns = np.arange(len(position))
    mutants[:, columns, position] = (mutants[:, columns, position] + shift) % vocab_size
    mutants = np.unique(mutants.reshape(-1, length), axis=0)
    known = {row.tobytes() for row in np.ascontiguousarray(exclude, mutants.dtype)}
    return mutants[[row.tobytes() not in known for row in mutants]]


def trained(task, model_dir: Path | None) -> Method:
    path = model_dir / f"{task.name}.model" if model_dir else None
    if path is not None and path.exists():
        return Method.load(path)
    started = time.perf_counter()
    method = make_method(METHOD, "paper", {}, seed=0).fit(task.offline)
    print(f"  {task.name}: trained {METHOD} (seed 0) in {time.perf_counter() - started:.0f} s")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        method.save(path)
    return method


def measure(task_name: str, model_dir: Path | None) -> dict:
    task = load_task(task_name)
    x, y = task.offline.x, task.offline.y
    best = y.max()
    mutants = point_mutants(x[np.argsort(-y, kind="stable")[:TOP_ROWS]], task.space.vocab_size, x)
    truth = task.score(mutants).ravel()
    above = truth > best
    method = trained(task, model_dir)
    features = torch.from_numpy(method.encoder_.encode_x(mutants))
    with torch.no_grad():
        mean = method.member_values(features).mean(0).numpy()
        score = method.pessimistic_score(features).numpy()
    allowed = method._pairs_seen(mutants)  # the search's own feasibility prior
    feasible = truth > 0
    picked = np.argsort(-np.where(allowed, score, -np.inf), kind="stable")[:PICK]
    return {
        "task": task_name,
        "mutants": len(mutants),
        "above best": f"{above.mean():.3f}",
        "infeasible": f"{1 - feasible.mean():.3f}",
        "Spearman (feasible)": f"{spearmanr(mean[feasible], truth[feasible])[0]:.3f}",
        f"top {PICK} by score: above": int(above[picked].sum()),
        "equal": int((truth[picked] == best).sum()),
        "uniform pick: above": f"{PICK * above[allowed].mean():.1f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default=",".join(TASKS), help="comma-separated token tasks")
    parser.add_argument("--model-dir", type=Path, help="keep and reuse trainings here")
    args = parser.parse_args()
    rows = [measure(name, args.model_dir) for name in args.task.split(",")]
    header = list(rows[0])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in header) + " |")


if __name__ == "__main__":
    main()
