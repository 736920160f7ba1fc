"""The Superconductor oracle's held-out accuracy, and how much another forest moves scores.

The task's oracle is a random forest refitted on every load by design-bench's recipe with a
recorded seed (``Superconductor.oracle_seed``); design-bench's own pretrained forest (fitted
unseeded) is not available. This prints, on the real data:

* the load (shards, forest fit, offline set) and its wall time;
* the forest's accuracy on design-bench's split (the 1,000 held-out rows of its 2,000-row draw:
  the task's ``oracle_val_r2`` and ``oracle_val_spearman``), on every row it was not trained on,
  and on those of them above the offline cut (where good designs lie);
* the offline rows: their normalized scores use their measured y (the offline best does not
  depend on the forest) and what the forest says of the same rows;
* ``--other-seeds K`` forests of the same recipe with seeds 1..K, stand-ins for design-bench's
  unseeded one: how far their normalized scores of the same rows are from the task's forest.

    OMP_NUM_THREADS=1 python benchmarks/superconductor_oracle.py [--data-dir DIR] [--other-seeds 4]

Nothing is chosen from these numbers (Superconductor is a confirmation task). The last line of
output is one JSON object of every number.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from matchopt.evaluation import fit_accuracy
from matchopt.tasks import load_task
from matchopt.tasks.design_bench import RandomForestOracle, Superconductor
from matchopt.tasks.shards import load_shards, offline_mask


def full_data(task: Superconductor) -> tuple[np.ndarray, np.ndarray]:
    """The task's full x (N x 86) and y (N,), read from its shards again."""
    paths = task.required_files(task.data_dir)[: 2 * task.n_shards]
    return load_shards(paths, task.space.shape)


def accuracies(task: Superconductor, x: np.ndarray, y: np.ndarray) -> dict:
    """The task's forest on design-bench's split, on every unseen row, on the unseen top rows."""
    train, val = RandomForestOracle(seed=task.oracle_seed).split(len(y))
    unseen = np.ones(len(y), dtype=bool)
    unseen[train] = False
    top = unseen & ~offline_mask(y, task.max_percentile)
    predicted = task.score(x)
    return {
        "design_bench_split": {
            "rows": len(val),
            "r2": task.oracle_val_r2,
            "spearman": task.oracle_val_spearman,
        },
        "unseen_rows": {"rows": int(unseen.sum()), **fit_accuracy(y[unseen], predicted[unseen])},
        "unseen_top_rows": {"rows": int(top.sum()), **fit_accuracy(y[top], predicted[top])},
    }


def offline_rows_summary(task: Superconductor) -> dict:
    """The offline rows' measured normalized scores beside the forest's of the same rows."""
    measured = task.normalize(task.offline.y)
    scored = task.normalize(task.score(task.offline.x))
    best = int(np.argmax(task.offline.y))
    return {
        "offline_rows": len(task.offline),
        "offline_best_measured": float(measured.max()),
        "forest_of_the_best_offline_row": float(scored[best]),
        "forest_max_over_offline_rows": float(scored.max()),
        "median_abs_forest_minus_measured": float(np.median(np.abs(scored - measured))),
    }


def other_forests(task: Superconductor, x: np.ndarray, y: np.ndarray, seeds: list[int]) -> list:
    """Forests of seeds ``seeds`` against the task's: accuracy on their own split, and the
    normalized difference of their scores of the offline rows and of the rows above the cut."""
    reference = task.normalize(task.score(x))
    offline = offline_mask(y, task.max_percentile)
    rows = []
    for seed in seeds:
        start = time.perf_counter()
        forest = RandomForestOracle(seed=seed).fit(x, y)
        seconds = time.perf_counter() - start
        moved = task.normalize(forest(x)) - reference
        rows.append(
            {
                "seed": seed,
                "fit_seconds": round(seconds, 2),
                "val_r2": forest.val_r2_,
                "val_spearman": forest.val_spearman_,
                "offline_mean_abs_change": float(np.abs(moved[offline]).mean()),
                "offline_max_abs_change": float(np.abs(moved[offline]).max()),
                "top_mean_abs_change": float(np.abs(moved[~offline]).mean()),
                "forest_max_over_offline_rows": float(task.normalize(forest(x[offline])).max()),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="design-bench data folder")
    parser.add_argument("--other-seeds", type=int, default=4, help="forests of seeds 1..K")
    args = parser.parse_args()
    start = time.perf_counter()
    task = load_task("superconductor", args.data_dir)
    load_seconds = time.perf_counter() - start
    x, y = full_data(task)
    print(
        f"loaded {len(y):,} rows ({len(task.offline):,} offline) and fitted the forest "
        f"(seed {task.oracle_seed}) in {load_seconds:.2f} s; y {task.y_min} .. {task.y_max}",
        flush=True,
    )
    result = {
        "rows": len(y),
        "y_min": task.y_min,
        "y_max": task.y_max,
        "oracle_seed": task.oracle_seed,
        "load_seconds": round(load_seconds, 2),
        "accuracy": accuracies(task, x, y),
        **offline_rows_summary(task),
    }
    for name, measured in result["accuracy"].items():
        print(
            f"{name}: {measured['rows']:,} rows, R^2 {measured['r2']:.4f}, "
            f"Spearman {measured['spearman']:.4f}",
            flush=True,
        )
    print(
        f"offline best (measured y) {result['offline_best_measured']:.7f}; the forest gives that "
        f"row {result['forest_of_the_best_offline_row']:.4f} and "
        f"{result['forest_max_over_offline_rows']:.4f} at most over the offline rows",
        flush=True,
    )
    result["other_forests"] = other_forests(task, x, y, list(range(1, args.other_seeds + 1)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
