"""Time and peak memory of loading TF-Bind-10 at its real size (issue target: < 1.5 GB, < 30 s).

The real pho4 files are not on every machine, so this writes a fixture of the same layout and
size: 84 shards (83 x 100,000 rows + 21,066), x int32 (N, 10) tokens drawn uniformly from 0..3
(so each 10-mer appears about 8 times, as in the real data), y float32 (N, 1) standard normal;
about 366 MB on disk. Loading cost depends on the sizes, not on the values.

The task is then loaded (``load_task("tfbind10", DIR)``: shards, lookup table, offline set) in a
fresh Python process, so that its peak resident memory (``ru_maxrss`` of that child) is the
load's alone plus the interpreter and matchopt's imports (torch among them), which the child
also reports on their own. Usage::

    OMP_NUM_THREADS=1 python benchmarks/tfbind10_load.py [--dir DIR] [--keep] [--seed 0]

Without ``--dir`` the fixture goes to a temporary folder. A fixture this script generates is
deleted at the end unless ``--keep`` is given; an existing complete fixture in ``DIR`` is reused
(and left in place). The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FOLDER, PREFIX = "tf_bind_10-pho4", "tf_bind_10"
SHARD_ROWS = [100_000] * 83 + [21_066]
TARGET_BYTES, TARGET_SECONDS = 1.5e9, 30.0

CHILD = """
import json, resource, sys, time
start = time.perf_counter()
from matchopt.tasks import load_task
imported = time.perf_counter()
import_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
task = load_task("tfbind10", sys.argv[1])
loaded = time.perf_counter()
scores = task.score(task.offline.x[:128])
scored = time.perf_counter()
print(json.dumps({
    "import_seconds": imported - start,
    "load_seconds": loaded - imported,
    "score_128_ms": (scored - loaded) * 1000,
    "import_maxrss": import_rss,
    "offline_rows": len(task.offline),
    "y_min": task.y_min,
    "y_max": task.y_max,
}))
"""


def shard_file(root: Path, axis: str, k: int) -> Path:
    return root / FOLDER / f"{PREFIX}-{axis}-{k}.npy"


def fixture_complete(root: Path) -> bool:
    """Whether every shard exists with the right shape (read from the headers only)."""
    for k, n in enumerate(SHARD_ROWS):
        try:
            x = np.load(shard_file(root, "x", k), mmap_mode="r")
            y = np.load(shard_file(root, "y", k), mmap_mode="r")
        except (OSError, ValueError):
            return False
        if x.shape != (n, 10) or y.shape != (n, 1):
            return False
    return True


def generate(root: Path, seed: int) -> None:
    """Write the fixture shard by shard (never more than one shard in memory)."""
    (root / FOLDER).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for k, n in enumerate(SHARD_ROWS):
        np.save(shard_file(root, "x", k), rng.integers(0, 4, size=(n, 10), dtype=np.int32))
        np.save(shard_file(root, "y", k), rng.standard_normal((n, 1), dtype=np.float32))


def maxrss_bytes(value: int) -> int:
    """``ru_maxrss`` in bytes (Linux reports KiB, macOS bytes)."""
    return value if sys.platform == "darwin" else value * 1024


def measure(root: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"loading failed:\n{proc.stderr}")
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    # The only child this process has waited for is the loader.
    peak = maxrss_bytes(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    after_import = maxrss_bytes(child.pop("import_maxrss"))
    return {
        "rows": sum(SHARD_ROWS),
        "load_seconds": round(child.pop("load_seconds"), 2),
        "process_seconds": round(wall, 2),
        "peak_rss_mib": round(peak / 2**20, 1),
        "rss_after_imports_mib": round(after_import / 2**20, 1),
        "import_seconds": round(child.pop("import_seconds"), 2),
        "score_128_ms": round(child.pop("score_128_ms"), 2),
        **child,
        "peak_under_1.5GB": peak < TARGET_BYTES,
        "load_under_30s": wall < TARGET_SECONDS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="fixture folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep a generated fixture")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated fixture")
    args = parser.parse_args()
    root = args.dir if args.dir is not None else Path(tempfile.mkdtemp(prefix="tfbind10-"))
    generated = not fixture_complete(root)
    try:
        if generated:
            start = time.perf_counter()
            generate(root, args.seed)
            print(f"wrote the fixture to {root} in {time.perf_counter() - start:.1f} s", flush=True)
        else:
            print(f"reusing the fixture in {root}", flush=True)
        result = measure(root)
    finally:
        if generated and not args.keep:
            shutil.rmtree(root / FOLDER, ignore_errors=True)
            if args.dir is None:
                shutil.rmtree(root, ignore_errors=True)
    print(
        f"load {result['load_seconds']} s (process {result['process_seconds']} s), "
        f"peak RSS {result['peak_rss_mib']} MiB ({result['rss_after_imports_mib']} MiB after "
        "imports)",
        flush=True,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
