"""How often the prediction intervals of ``matchopt optimize`` hold, on the development suite's
tasks.

    python benchmarks/coverage.py [--tasks tfbind8,hartmann6] [--seeds 0,1] [--out results/coverage]
        [--records results/dev/candidates-r6] [--max-rows 50000] [--table-only]

Each task's offline data becomes the table a user would have (:func:`task_table`: one letter
column ``seq`` for sequence tasks, numeric columns ``x0..x{d-1}`` otherwise; target ``y``).
The intervals come from :class:`matchopt.tabular.TableOptimizer`'s ensemble of Gaussian MLPs
and its conformal calibration, which do not depend on the method, so ``method="random"`` (no
fit of its own) gives the intervals any method's run would show. Per (task, seed):

1. **Held-out designs.** A seeded 80/20 split of the designs (``GroupShuffleSplit``: the rows
   of one design stay together); the optimizer is fitted on the 80% and predicts the 20%:
   the share of held-out rows whose measured ``y`` lies in ``[low, high]``, next to the fit's
   own estimate (``calibration_.coverage``, measured by cross-fitting on the 80%), and the
   share of held-out rows flagged ``extrapolated``.
2. **Proposals.** The optimizer is fitted on the whole table and predicts the 128 designs the
   recommended method (``matchopt-ens-mix-near``) proposed for that seed in the suite comparison
   (``<records>/<task>/matchopt-ens-mix-near/seed<k>.designs.npy``); the task's oracle scores
   them (designs a method already returned: allowed), and the share inside their interval is
   reported overall, among the flagged and among the unflagged. On replicate tasks the oracle
   is the noiseless function while the table holds noisy measurements.

Tables above ``--max-rows`` rows are cut to a seeded sample of whole designs (said in the
table). One JSON per (task, seed) is written to ``--out`` as soon as it is done; those present
are skipped (rerun the same command to resume). At the end a markdown table of every JSON in
``--out`` is printed; ``--table-only`` prints just that.
"""

from __future__ import annotations

import argparse
import json
import string
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: Letters standing for the tokens of a sequence task (token i is ``ALPHABET[i]``).
ALPHABET = string.ascii_uppercase + string.ascii_lowercase + string.digits
#: The method whose proposals are checked (the recommended one of the suite comparison).
METHOD = "matchopt-ens-mix-near"
#: The records of the suite comparison, and tasks of it that are not checked.
DEFAULT_RECORDS = Path("results/dev/candidates-r6")
SKIPPED = ("hopper-local",)
#: Held-out share of the designs in the 80/20 check.
TEST_SIZE = 0.2
#: Random stream of the subsample of large tables.
SUBSAMPLE_STREAM = 2024


# --- The table a user would have -------------------------------------------------------------


def table_options(task: Any) -> dict[str, Any]:
    """``TableOptimizer`` arguments that describe :func:`task_table`'s table of ``task``."""
    space = task.space
    if space.is_discrete:
        return {"sequence": "seq", "alphabet": ALPHABET[: space.vocab_size]}
    return {"sequence": None, "alphabet": None}


def designs_frame(task: Any, designs: np.ndarray) -> pd.DataFrame:
    """The feature columns of ``designs`` (the task's format) as :func:`task_table` writes
    them."""
    space = task.space
    designs = space.validate(np.asarray(designs))
    if space.is_discrete:
        if space.vocab_size > len(ALPHABET):
            raise ValueError(f"{space.vocab_size} tokens: more than the {len(ALPHABET)} letters")
        length = space.shape[0]
        letters = np.array(list(ALPHABET[: space.vocab_size]))[designs]  # (n, length) of U1
        words = np.ascontiguousarray(letters).view(f"<U{length}").reshape(-1)
        return pd.DataFrame({"seq": words.astype(object)})
    columns = {f"x{i}": designs[:, i].astype(np.float64) for i in range(space.shape[0])}
    return pd.DataFrame(columns)


def task_table(task: Any) -> tuple[pd.DataFrame, Callable[[pd.DataFrame], np.ndarray]]:
    """The task's offline data as a user's table, and the function turning such a table's
    feature columns back into the task's designs.

    Sequence tasks: one column ``seq`` of letters (token i is ``ALPHABET[i]``); continuous
    tasks: columns ``x0..x{d-1}``; the target is ``y`` (maximized, the task's units).
    """
    space = task.space
    frame = designs_frame(task, task.offline.x)
    frame["y"] = np.asarray(task.offline.y, dtype=np.float64)

    def to_designs(table: pd.DataFrame) -> np.ndarray:
        if space.is_discrete:
            length = space.shape[0]
            words = np.asarray(table["seq"].to_numpy(), dtype=f"<U{length}")
            codes = words.view(np.uint32).reshape(len(table), length)
            lookup = np.full(max(map(ord, ALPHABET)) + 1, -1, dtype=np.int64)
            lookup[[ord(c) for c in ALPHABET[: space.vocab_size]]] = np.arange(space.vocab_size)
            inside = codes < len(lookup)  # other letters become -1: validate refuses them
            return space.validate(np.where(inside, lookup[np.where(inside, codes, 0)], -1))
        columns = [f"x{i}" for i in range(space.shape[0])]
        return space.validate(table[columns].to_numpy(dtype=np.float64))

    return frame, to_designs


# --- Measuring -------------------------------------------------------------------------------


def share(mask: np.ndarray) -> float | None:
    """Mean of a boolean mask; None when it is empty."""
    mask = np.asarray(mask, dtype=bool)
    return float(mask.mean()) if len(mask) else None


def interval_stats(out: pd.DataFrame, y: np.ndarray) -> dict[str, Any]:
    """Coverage of measured values ``y`` by the prediction table ``out`` (``predict``'s)."""
    low, high = out["predicted_y_low"].to_numpy(), out["predicted_y_high"].to_numpy()
    flagged = out["extrapolated"].to_numpy(dtype=bool)
    inside = (y >= low) & (y <= high)
    return {
        "n": len(y),
        "inside": share(inside),
        "below": share(y < low),  # the prediction was too high
        "above": share(y > high),
        "flagged": share(flagged),
        "n_flagged": int(flagged.sum()),
        "inside_flagged": share(inside[flagged]),
        "inside_unflagged": share(inside[~flagged]),
        "median_width": float(np.median(high - low)) if len(y) else None,
    }


def fit_table(task: Any, frame: pd.DataFrame, seed: int) -> tuple[Any, float]:
    """A ``TableOptimizer`` (method random) fitted on ``frame``, and the seconds it took."""
    from matchopt.tabular import TableOptimizer

    start = time.perf_counter()
    optimizer = TableOptimizer(
        target="y", method="random", seed=seed, threads=1, **table_options(task)
    ).fit(frame, source=f"{task.name} table")
    return optimizer, time.perf_counter() - start


def fit_summary(optimizer: Any, seconds: float) -> dict[str, Any]:
    calibration = optimizer.calibration_
    quality = optimizer.fit_quality_ or {}
    return {
        "estimate": None if calibration is None else calibration.coverage,
        "quantile": None if calibration is None else calibration.quantile,
        "splits": optimizer.cross_validation_["splits"],
        "spearman": quality.get("spearman"),
        "r2": quality.get("r2"),
        "seconds": seconds,
    }


def measured_count(measured: np.ndarray, designs: np.ndarray) -> int:
    """How many of ``designs`` are rows of ``measured``."""
    seen = {row.tobytes() for row in np.asarray(measured, dtype=designs.dtype)}
    return sum(row.tobytes() in seen for row in designs)


def subsample(frame: pd.DataFrame, groups: np.ndarray, max_rows: int, seed: int) -> np.ndarray:
    """Row mask of a seeded sample of whole designs holding at most ``max_rows`` rows."""
    if len(frame) <= max_rows:
        return np.ones(len(frame), dtype=bool)
    rng = np.random.default_rng([seed, SUBSAMPLE_STREAM])
    order = rng.permutation(int(groups.max()) + 1)
    counts = np.bincount(groups)[order]
    kept = order[np.cumsum(counts) <= max_rows]
    return np.isin(groups, kept)


def measure(
    name: str, seed: int, records: Path, max_rows: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """Everything one (task, seed) reports (module docstring)."""
    from scipy.stats import spearmanr
    from sklearn.model_selection import GroupShuffleSplit

    from matchopt import __version__
    from matchopt.data import design_groups
    from matchopt.records import read_record, record_path
    from matchopt.tasks import load_task

    start = time.perf_counter()
    task = load_task(name)
    frame, to_designs = task_table(task)
    groups = design_groups(to_designs(frame))
    result: dict[str, Any] = {
        "task": name,
        "seed": seed,
        "rows": len(frame),
        "designs": int(groups.max()) + 1,
        "interval_method": "random (the ensemble's intervals do not depend on the method)",
        "matchopt": __version__,
    }
    keep = subsample(frame, groups, max_rows, seed)
    if not keep.all():
        frame = frame[keep].reset_index(drop=True)
        groups = design_groups(to_designs(frame))
        result["subsample"] = {"rows": len(frame), "designs": int(groups.max()) + 1}
        log(f"  subsample: {len(frame):,} rows of {result['rows']:,} (--max-rows {max_rows:,})")
    features = [c for c in frame.columns if c != "y"]

    # 1. Held-out designs.
    split = GroupShuffleSplit(n_splits=1, test_size=TEST_SIZE, random_state=seed)
    train, test = next(split.split(np.arange(len(frame)), groups=groups))
    log(f"  80/20: fitting on {len(train):,} rows, {len(np.unique(groups[train])):,} designs")
    optimizer, seconds = fit_table(task, frame.iloc[train].reset_index(drop=True), seed)
    out = optimizer.predict(frame.iloc[test][features].reset_index(drop=True))
    y = frame["y"].to_numpy()[test]
    held = {
        "train_rows": len(train),
        "test_rows": len(test),
        "test_designs": len(np.unique(groups[test])),
        "fit": fit_summary(optimizer, seconds),
        **interval_stats(out, y),
    }
    result["held_out"] = held
    log(
        f"  80/20: inside {held['inside']:.3f} (fit's estimate {held['fit']['estimate']:.3f}), "
        f"flagged {held['flagged']:.3f} ({seconds:.0f} s)"
    )

    # 2. The recommended method's proposals.
    path = record_path(records, name, METHOD, seed)
    designs_path = path.with_suffix(".designs.npy")
    if not path.is_file() or not designs_path.is_file():
        missing = designs_path if path.is_file() else path
        result["proposals"] = {"missing": str(missing)}
        log(f"  proposals: no {missing}; skipped")
    else:
        record = read_record(path)
        designs = task.space.validate(np.load(designs_path, allow_pickle=False))
        log(f"  whole table: fitting on {len(frame):,} rows")
        optimizer, seconds = fit_table(task, frame, seed)
        table = designs_frame(task, designs)
        if not np.array_equal(to_designs(table), designs):
            raise RuntimeError(f"{name}: the proposals do not round-trip through the table")
        out = optimizer.predict(table)
        scores = task.score(designs)
        predicted = out["predicted_y"].to_numpy()
        # The designs file holds the designs the record's scores are of, in order.
        recorded = np.asarray(record.scores, dtype=np.float64)
        check = (
            float(np.max(np.abs(task.normalize(scores) - recorded)))
            if len(recorded) == len(scores)
            else None
        )
        spearman = spearmanr(predicted, scores).statistic if np.ptp(scores) > 0 else None
        result["full_fit"] = fit_summary(optimizer, seconds)
        result["proposals"] = {
            "record": str(path),
            "record_score_difference": check,
            "oracle_best": float(np.max(scores)),
            "offline_best": float(np.max(task.offline.y)),
            "predicted_best": float(np.max(predicted)),
            "spearman": None if spearman is None else float(spearman),
            "in_offline_table": measured_count(task.offline.x, designs),
            **interval_stats(out, scores),
        }
        proposals = result["proposals"]
        log(
            f"  proposals: inside {proposals['inside']:.3f}, flagged {proposals['flagged']:.3f}, "
            f"inside among unflagged {fmt(proposals['inside_unflagged'])} ({seconds:.0f} s)"
        )
    result["seconds"] = time.perf_counter() - start
    return result


# --- The table -------------------------------------------------------------------------------


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown_table(results: list[dict[str, Any]]) -> str:
    header = [
        "task",
        "rows",
        "designs",
        "held-out coverage (fit's estimate)",
        "held-out coverage (80/20 check)",
        "proposals inside interval",
        "proposals flagged",
        "inside among unflagged",
        "seconds",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in sorted(results, key=lambda r: (r["task"], r["seed"])):
        task = r["task"] if r["seed"] == 0 else f"{r['task']} (seed {r['seed']})"
        rows, designs = f"{r['rows']:,}", f"{r['designs']:,}"
        if "subsample" in r:
            rows = f"{r['subsample']['rows']:,} of {rows} (subsample)"
            designs = f"{r['subsample']['designs']:,} of {designs}"
        held, proposals = r["held_out"], r.get("proposals", {})
        if "missing" in proposals or not proposals:
            inside = flagged = unflagged = "no record"
        else:
            inside = fmt(proposals["inside"])
            flagged = f"{fmt(proposals['flagged'])} (inside {fmt(proposals['inside_flagged'])})"
            unflagged = fmt(proposals["inside_unflagged"])
        cells = [
            task,
            rows,
            designs,
            fmt(held["fit"]["estimate"]),
            f"{fmt(held['inside'])} (flagged {fmt(held['flagged'])})",
            inside,
            flagged,
            unflagged,
            f"{r['seconds']:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Intervals: 90% conformal intervals of an ensemble of 5 Gaussian MLPs (method random). "
        "Fit's estimate: the coverage the fit on the 80% measured by cross-fitting; 80/20 check: "
        "share of the held-out 20% of designs' rows inside their interval (in brackets, the "
        "share flagged extrapolated); proposals: the 128 designs of matchopt-ens-mix-near, "
        "scored by the oracle, against the fit on the whole table (flagged: in brackets, the "
        "share inside among the flagged).",
    ]
    return "\n".join(lines)


def read_results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*-seed*.json"))]


def result_path(out: Path, task: str, seed: int) -> Path:
    return out / f"{task}-seed{seed}.json"


def suite_tasks(records: Path) -> list[str]:
    """The tasks of the suite comparison (folders of ``records``), but :data:`SKIPPED`."""
    if not records.is_dir():
        raise SystemExit(f"records folder {records} does not exist")
    return sorted(p.name for p in records.iterdir() if p.is_dir() and p.name not in SKIPPED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", help="comma-separated (default: the suite's, see --records)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--out", type=Path, default=Path("results/coverage"))
    parser.add_argument("--records", type=Path, default=DEFAULT_RECORDS)
    parser.add_argument("--max-rows", type=int, default=50_000)
    parser.add_argument("--table-only", action="store_true", help="print the table and stop")
    args = parser.parse_args(argv)
    if not args.table_only:
        from matchopt.io import atomic_write_bytes
        from matchopt.runtime import set_threads

        set_threads(1)
        tasks = args.tasks.split(",") if args.tasks else suite_tasks(args.records)
        seeds = [int(s) for s in args.seeds.split(",")]
        for name in tasks:
            for seed in seeds:
                path = result_path(args.out, name, seed)
                if path.is_file():
                    print(f"{name} seed {seed}: done ({path})", flush=True)
                    continue
                print(f"{name} seed {seed}:", flush=True)
                result = measure(
                    name, seed, args.records, args.max_rows, lambda s: print(s, flush=True)
                )
                atomic_write_bytes(path, (json.dumps(result, indent=1) + "\n").encode())
                print(f"  done in {result['seconds']:.0f} s: {path}", flush=True)
    results = read_results(args.out) if args.out.is_dir() else []
    if not results:
        print(f"no results in {args.out}")
        return 1
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
