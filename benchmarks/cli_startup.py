"""How long ``matchopt --help`` and every subcommand's ``--help`` take, against the 1 s target.

    python benchmarks/cli_startup.py [--repeats 5]

Each command runs in a fresh interpreter (as a user's shell starts it); the best of the repeats
is reported, with its ratio to the target. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

TARGET_SECONDS = 1.0
COMMANDS = [
    [],
    ["run"],
    ["bench"],
    ["report"],
    ["study"],
    ["study", "search-settings"],
    ["data", "fetch"],
    ["optimize"],
    ["propose"],
    ["tasks"],
    ["methods"],
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    worst = 0.0
    print(f"| command | best of {args.repeats} (s) | / target {TARGET_SECONDS:g} s |")
    print("|---|---:|---:|")
    for words in COMMANDS:
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "matchopt.cli", *words, "--help"],
                capture_output=True,
                text=True,
            )
            times.append(time.perf_counter() - start)
            if done.returncode:
                print(done.stderr, file=sys.stderr)
                return 1
        best = min(times)
        worst = max(worst, best)
        command = " ".join(["matchopt", *words, "--help"])
        print(f"| {command} | {best:.3f} | {best / TARGET_SECONDS:.2f} |")
    print(f"\nslowest: {worst:.3f} s ({'within' if worst < TARGET_SECONDS else 'over'} the target)")
    return 0 if worst < TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
