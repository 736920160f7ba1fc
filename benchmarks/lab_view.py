"""Add the lab view to records made before runs kept it, from their stored designs.

A run's lab view (:func:`matchopt.evaluation.lab_view`: distinct designs, designs repeating an
offline row, unmeasured designs, and p100 / p50 over the distinct new designs) depends only on
its designs, their scores (kept in the record) and the task's offline rows, so it can be
computed after the fact from ``seed<k>.designs.npy``. Records that already hold one, or whose
designs file is absent (hopper designs are not kept in the repository), are left as they are;
nothing else in a record changes.

    python benchmarks/lab_view.py results/dev results/main     # rewrite the records in place
    python benchmarks/lab_view.py results/dev --dry-run         # only count what would change
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from matchopt.errors import MatchoptError
from matchopt.evaluation import lab_view
from matchopt.io import atomic_write_bytes
from matchopt.records import RECORD_NAME, read_record
from matchopt.tasks import load_task


def records_without_lab(folder: Path) -> list[Path]:
    """Record files under ``folder`` (not following links) whose record has no lab view."""
    found = []
    for path in sorted(folder.rglob("seed*.json")):
        if path.is_symlink() or not RECORD_NAME.match(path.name):
            continue
        if "lab" not in read_record(path).extra:
            found.append(path)
    return found


def add_lab_view(path: Path, tasks: dict) -> bool:
    """Add the lab view to one record from its designs file; False if that file is absent."""
    designs_path = path.with_name(path.name.replace(".json", ".designs.npy"))
    if not designs_path.is_file() or designs_path.is_symlink():
        return False
    record = read_record(path)
    if record.task not in tasks:
        tasks[record.task] = load_task(record.task)
    task = tasks[record.task]
    designs = task.space.validate(np.load(designs_path, allow_pickle=False), str(designs_path))
    if len(designs) != len(record.scores):
        raise MatchoptError(
            f"{designs_path}: {len(designs)} designs for {len(record.scores)} scores"
        )
    raw = json.loads(path.read_text())
    raw["extra"]["lab"] = lab_view(designs, record.scores, task.offline.x, task.measured(designs))
    atomic_write_bytes(path, json.dumps(raw).encode())
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="count, change nothing")
    args = parser.parse_args(argv)
    tasks: dict = {}
    for folder in args.folders:
        paths = records_without_lab(folder)
        if args.dry_run:
            print(f"{folder}: {len(paths)} records without a lab view")
            continue
        added = sum(add_lab_view(path, tasks) for path in paths)
        print(f"{folder}: lab view added to {added} of {len(paths)} records without one")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MatchoptError as err:
        sys.exit(f"error: {err}")
