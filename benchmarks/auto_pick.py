"""How often `auto`'s protocol picks the pool member that leads on the task (docs/suite-rounds.md,
round 5), from the records of a results folder.

    python benchmarks/auto_pick.py results/dev
    python benchmarks/auto_pick.py results/round8 --members results/dev   # round 8

For every `auto` record (task, seed): its pick (the record's fit report), and every pool
member's own run of the same task and seed (records of the member anywhere under the folder).
The seed's leader is the member whose run has the best mean of p100 and p50; ties count as a
match for any tied member. Prints one row per task (picks, leaders, matches) and the share of
(task, seed) pairs where the pick is the leader. The oracle scored only designs the members
returned in their own runs; nothing here feeds a method.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from matchopt.records import load_records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--method", default="auto", help="the per-table choice's method name")
    parser.add_argument(
        "--members",
        type=Path,
        default=None,
        help="the folder of the pool members' own runs (default: FOLDER itself)",
    )
    args = parser.parse_args(argv)
    records = load_records(args.folder)
    members = records if args.members is None else load_records(args.members)
    runs = {(r.task, r.method, r.seed): r for r in members}
    rows = defaultdict(list)
    for record in records:
        if record.method != args.method:
            continue
        fit = record.extra.get("fit", {})
        members = list(fit.get("protocol", {})) or [fit.get("choice")]
        merit = {}
        for member in members:
            run = runs.get((record.task, member, record.seed))
            if run is not None:
                merit[member] = (run.p100 + run.p50) / 2
        if len(merit) < len(members):
            missing = sorted(set(members) - set(merit))
            print(f"{record.task} seed {record.seed}: no run of {', '.join(missing)} yet")
            continue
        best = max(merit.values())
        leaders = sorted(m for m, v in merit.items() if v == best)
        rows[record.task].append((record.seed, fit.get("choice"), leaders, merit))
    if not rows:
        print(f"no {args.method} record with every member's run in {args.folder}")
        return 1
    matched = total = 0
    print("| task | seed | pick | leader | pick's merit | leader's merit |")
    print("|---|---|---|---|---|---|")
    for task in sorted(rows):
        for seed, pick, leaders, merit in sorted(rows[task]):
            hit = pick in leaders
            matched += hit
            total += 1
            print(
                f"| {task} | {seed} | {pick}{' (leader)' if hit else ''} | {', '.join(leaders)} "
                f"| {merit[pick]:.3f} | {merit[leaders[0]]:.3f} |"
            )
    print(f"\nthe pick is the leader in {matched} of {total} (task, seed) pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
