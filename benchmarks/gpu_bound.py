"""Seconds per training epoch of the GPU-bound baselines, one seed alone and 4 seeds batched.

Issue 28: BONET, MINs, COMs, DDOM and the Gaussian ensemble of GA / Ens-Mean / Ens-Min are
small networks whose steps, on a GPU, wait on kernel launches and the host. Training the seeds
of one cell as a batch (:func:`matchopt.methods.training.fit_seeds`: stacked parameters, one step
for all seeds) launches one step's kernels for all of them. This prints, for each method and
each device present (the CPU, and CUDA when there is one), measured in one run:

* ``alone``: seconds per epoch (paper preset) of one seed's ``fit`` on the task's offline rows
  (``--task``, default TF-Bind-8);
* ``4 batched``: seconds per epoch of ``fit_seeds`` over 4 seeds, and the ratio
  ``4 x alone / 4 batched`` (above 1: batching pays). For a method that does not batch seeds
  yet, ``fit_seeds`` fits them one after the other and the row says so;
* ``4 seeds, paper``: minutes the paper preset's epochs of the 4 seeds take at that rate
  (``benchmarks/gpu_grid.sh`` plans its budget from it).

An epoch is timed on a slice of it: each fit trains one epoch on the first ``steps`` batches'
rows (BONET: ``steps`` batches of trajectory windows), and the time per step is scaled to the
steps of a full epoch of the task's offline rows (TF-Bind-8: 32,898; a step's cost depends on the
design's shape, not on the number of rows). A tiny fit first warms each device up (CUDA context,
kernels).

    python benchmarks/gpu_bound.py [--task tfbind8] [--steps 10] [--methods ddom,coms]
        [--threads 1] [--devices cuda] [--budget SECONDS [--keep-all] [--plan-file FILE]]

Reads the task's rows from ``$MATCHOPT_DATA_DIR``; for TF-Bind-8 without its data, random tokens
of its shape (the timing is the same). The last line of output is one JSON object of every
number.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch

from matchopt.data import DesignSpace, OfflineData
from matchopt.errors import MatchoptError
from matchopt.methods import get_method_entry, make_method
from matchopt.methods.training import SeedBatchable, fit_seeds
from matchopt.runtime import set_threads

ROWS, LENGTH, VOCAB = 32_898, 8, 4
SEEDS = (0, 1, 2, 3)
#: Method -> (the registered name timed, overrides of its paper preset for one timed epoch).
METHODS = {
    "bonet": ("bonet", {"epochs": 1}),
    "mins": ("mins", {"epochs": 1}),
    "coms": ("coms", {"epochs": 1}),
    "ddom": ("ddom", {"epochs": 1, "sampling_steps": 1}),
    "ensemble": ("ens-mean", {"epochs": 1}),
}


def task_rows(task: str) -> OfflineData:
    """The task's offline rows; for TF-Bind-8 without its data, random tokens of its shape."""
    from matchopt.tasks import load_task

    try:
        return load_task(task).offline
    except MatchoptError:
        if task != "tfbind8":
            raise
        rng = np.random.default_rng(0)
        x = rng.integers(0, VOCAB, size=(ROWS, LENGTH))
        y = rng.normal(size=ROWS).astype(np.float32)
        return OfflineData(x, y, DesignSpace.discrete(LENGTH, VOCAB))


def rows_of(data: OfflineData, n: int) -> OfflineData:
    """The first ``n`` offline rows."""
    return OfflineData(data.x[:n], data.y[:n], data.space)


def steps_per_epoch(name: str, config: object, rows: int) -> int:
    """Optimizer steps of one epoch of ``name`` with ``config`` on ``rows`` offline rows."""
    if name == "bonet":
        windows = config.n_trajectories * config.trajectory_length  # type: ignore[attr-defined]
        return math.ceil(windows / config.batch_size)  # type: ignore[attr-defined]
    return math.ceil(rows / config.batch_size)  # type: ignore[attr-defined]


def epoch_slice(key: str, data: OfflineData, steps: int) -> tuple[dict, OfflineData, int]:
    """A slice of one paper-preset epoch of ``key`` of about ``steps`` optimizer steps: the
    overrides, the offline rows it trains on, and its exact number of steps."""
    name, overrides = METHODS[key]
    config = make_method(name, "paper", overrides).config_
    if name == "bonet":  # a slice of the windows: ``steps`` batches' worth of trajectories
        timing = dict(
            overrides, n_trajectories=max(1, steps * config.batch_size // config.trajectory_length)
        )
        subset = data
    else:
        timing = dict(overrides)
        subset = rows_of(data, min(len(data), steps * config.batch_size))
    n_steps = steps_per_epoch(name, make_method(name, "paper", timing).config_, len(subset))
    return timing, subset, n_steps


def timed_fit(name: str, overrides: dict, data: OfflineData, device: str, seeds: tuple) -> float:
    """Wall seconds of one epoch of ``fit`` (one seed) or ``fit_seeds`` (several)."""
    methods = [make_method(name, "paper", overrides, seed=s, device=device) for s in seeds]
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    if len(methods) == 1:
        methods[0].fit(data)
    else:
        fit_seeds(methods, data)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(key: str, data: OfflineData, device: str, steps: int) -> dict:
    """One method's row on one device: seconds per full epoch alone and 4 batched."""
    name, overrides = METHODS[key]
    entry = get_method_entry(name)
    config = make_method(name, "paper", overrides).config_
    timing, subset, timed_steps = epoch_slice(key, data, steps)
    full_steps = steps_per_epoch(name, config, len(data))
    warm = rows_of(data, 64)
    timed_fit(name, dict(timing, batch_size=32), warm, device, SEEDS[:1])  # warm-up
    alone = timed_fit(name, timing, subset, device, SEEDS[:1]) / timed_steps * full_steps
    together = timed_fit(name, timing, subset, device, SEEDS) / timed_steps * full_steps
    return {
        "method": key,
        "device": device,
        "alone_s_per_epoch": alone,
        "batched4_s_per_epoch": together,
        "ratio": len(SEEDS) * alone / together,
        "batched": issubclass(entry.cls, SeedBatchable),
        "full_epoch_steps": full_steps,
        # The paper preset's training of the 4 seeds at this rate (sampling and search left out).
        "paper_epochs": make_method(name, "paper").config_.epochs,
        "expected_4_seeds_minutes": make_method(name, "paper").config_.epochs * together / 60,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="tfbind8", help="whose offline rows (default tfbind8)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per fit (default 10)")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument(
        "--devices", default=None, help="comma-separated (default: cpu, and cuda when present)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds of training to plan: print the methods whose expected training of 4 "
        "seeds (on the last device) fits, cheapest first",
    )
    parser.add_argument("--keep-all", action="store_true", help="with --budget: keep every method")
    parser.add_argument("--plan-file", default=None, help="with --budget: write the kept methods")
    args = parser.parse_args()
    if args.threads:
        set_threads(args.threads)
    keys = [k for k in args.methods.split(",") if k]
    unknown = [k for k in keys if k not in METHODS]
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {list(METHODS)}")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if args.devices:
        devices = [d for d in args.devices.split(",") if d]
    try:
        data = task_rows(args.task)
    except MatchoptError as error:
        parser.error(str(error))
    gpu = f", {torch.cuda.get_device_name()}" if "cuda" in devices else ""
    print(
        f"{args.task} epoch ({len(data)} rows), paper preset; torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads{gpu}; {args.steps} timed steps per fit"
    )
    print(
        f"{'method':<9} {'device':<6} {'alone s/epoch':>14} {'4 batched s/epoch':>18} "
        f"{'4 x alone / batched':>20} {'4 seeds, paper':>15}  how"
    )
    rows = []
    for device in devices:
        for key in keys:
            row = measure(key, data, device, args.steps)
            rows.append(row)
            how = "seeds batched" if row["batched"] else "one after another (not batched)"
            print(
                f"{key:<9} {device:<6} {row['alone_s_per_epoch']:>14.2f} "
                f"{row['batched4_s_per_epoch']:>18.2f} {row['ratio']:>20.2f} "
                f"{row['expected_4_seeds_minutes']:>11.1f} min  {how}",
                flush=True,
            )
    if args.budget is not None:
        kept = plan(rows, args.budget, args.keep_all)
        if args.plan_file:
            with open(args.plan_file, "w") as out:
                out.write(",".join(kept))
    print(json.dumps(rows))


def plan(rows: list[dict], budget_seconds: float, keep_all: bool = False) -> list[str]:
    """The methods whose expected training of 4 seeds fits in ``budget_seconds`` together,
    cheapest first (on the last device measured); prints the plan."""
    device = rows[-1]["device"]
    ordered = sorted(
        (r for r in rows if r["device"] == device), key=lambda r: r["expected_4_seeds_minutes"]
    )
    total, kept = 0.0, []
    for row in ordered:
        minutes = row["expected_4_seeds_minutes"]
        fits = keep_all or total + minutes <= budget_seconds / 60
        if fits:
            kept.append(row["method"])
            total += minutes
        print(
            f"  {row['method']:<9} {minutes:8.1f} min expected for 4 seeds"
            f"{'' if fits else ' (over the budget: left out)'}"
        )
    print(
        f"plan on {device}: {','.join(kept) or 'nothing'}, {total:.1f} min expected of "
        f"{budget_seconds / 60:.1f}"
    )
    return kept


if __name__ == "__main__":
    main()
