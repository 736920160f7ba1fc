"""Threads on an idle and on a loaded machine: what the default of ``--threads`` rests on.

For each task, ``matchopt run`` (MATCH-OPT, paper configuration, a few epochs) is timed with
``--threads 1`` and ``--threads 2`` (or more with ``--threads``), first on an idle machine, then
while ``--load`` CPU-bound busy processes run beside it (a loaded laptop: a browser, another
run). The figure is the training time per epoch, from the record's ``fit_seconds``; each run
is a fresh process, as a user's command is. Then the README's Quickstart command (``matchopt
run``: styblinski-tang, 200 epochs) is timed whole with the default threads, idle and loaded.

Usage::

    python benchmarks/threads.py [--tasks tfbind8,potts,styblinski-tang] [--load 2]

Run it on an otherwise idle machine (its own load is the only load). The last line of output is
one JSON object with every measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager

EPOCHS = {"tfbind8": 2, "potts": 10, "styblinski-tang": 20}
BUSY = "while True: pass"


@contextmanager
def busy_processes(count: int):
    """``count`` CPU-bound processes (pure Python loops, one core each) while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(count)]
    try:
        time.sleep(1.0)  # let them reach full speed
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def run_seconds(task: str, threads: int | None, epochs: int | None) -> tuple[float, float]:
    """Wall time of one ``matchopt run`` process and the fit time per epoch of its record."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "matchopt.cli", "run", "--task", task, "--json"]
        command += ["--out", out]
        if epochs is not None:
            command += ["--set", f"epochs={epochs}"]
        if threads is not None:
            command += ["--threads", str(threads)]
        env = {
            k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MATCHOPT_THREADS")
        }
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        if result.returncode != 0:
            sys.exit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
        record = json.loads(result.stdout.strip().splitlines()[-1])
        per_epoch = record["fit_seconds"] / (epochs or record["config"]["epochs"])
        return wall, per_epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="tfbind8,potts,styblinski-tang")
    parser.add_argument("--threads", default="1,2", help="thread counts to compare")
    parser.add_argument("--load", type=int, default=os.cpu_count() or 2, help="busy processes")
    parser.add_argument("--skip-quickstart", action="store_true")
    args = parser.parse_args()
    from matchopt.runtime import default_threads
    from matchopt.tasks import TASKS

    tasks = [t for t in args.tasks.split(",") if t]
    counts = [int(t) for t in args.threads.split(",")]
    results: dict = {"cores": os.cpu_count(), "load_processes": args.load, "epoch_seconds": {}}
    print(f"{os.cpu_count()} cores; loaded = {args.load} busy processes beside the run")
    header = ("task", "threads", "idle s/epoch", "loaded s/epoch", "loaded/idle")
    print(f"{header[0]:16} {header[1]:>7} {header[2]:>13} {header[3]:>15} {header[4]:>12}")
    for task in tasks:
        if TASKS[task].missing_files(None):
            print(f"{task:16} skipped: data not found (set MATCHOPT_DATA_DIR)")
            continue
        for threads in counts:
            _, idle = run_seconds(task, threads, EPOCHS.get(task, 5))
            with busy_processes(args.load):
                _, loaded = run_seconds(task, threads, EPOCHS.get(task, 5))
            results["epoch_seconds"][f"{task}/{threads}"] = {"idle": idle, "loaded": loaded}
            print(f"{task:16} {threads:>7} {idle:>13.3f} {loaded:>15.3f} {loaded / idle:>12.2f}")
    if not args.skip_quickstart:
        idle_wall, _ = run_seconds("styblinski-tang", None, None)
        with busy_processes(args.load):
            loaded_wall, _ = run_seconds("styblinski-tang", None, None)
        results["quickstart"] = {
            "default_threads": default_threads(),
            "idle_seconds": idle_wall,
            "loaded_seconds": loaded_wall,
        }
        print(
            f"Quickstart `matchopt run` (default threads = {default_threads()}): idle "
            f"{idle_wall:.1f} s, loaded {loaded_wall:.1f} s ({loaded_wall / idle_wall:.2f}x)"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
