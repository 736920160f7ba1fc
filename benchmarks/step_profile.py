"""Where a training step of the GPU-bound baselines spends its time: ``torch.profiler`` counts.

Issue 28: small networks wait on kernel launches and on the host. A GPU pays for every operator
launched and stalls at every host sync (``.item()``, ``.cpu()``, ``.tolist()``: one
``aten::_local_scalar_dense`` or a device-to-host copy each). This profiles a few training steps
of each method (paper preset, TF-Bind-8 rows, as ``benchmarks/gpu_bound.py`` times them; one seed
alone and 4 seeds batched) on the CPU, or CUDA with ``--device cuda``, and prints per
optimizer step: aten operators dispatched; host syncs (``.item()`` or ``float()`` of a tensor,
outside the optimizer's CPU step counters) and the lines that make them; the share of wall
time the operators account for (the rest is Python and framework overhead on the host: what
CUDA graphs or ``torch.compile`` would remove); and the operators of largest self time.

    python benchmarks/step_profile.py [--steps 4] [--methods ddom,ensemble] [--device cpu]

The last line of output is one JSON object of every number.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bound import METHODS, SEEDS, epoch_slice, rows_of, task_rows  # noqa: E402

from matchopt.methods import make_method  # noqa: E402
from matchopt.methods.training import fit_seeds  # noqa: E402

#: The operator under ``.item()`` and ``float(tensor)``: on a GPU the host waits there for the
#: device to finish and hand the value over.
SYNC_OPERATOR = "aten::_local_scalar_dense"
#: Profiles tried per fit (see the retry in :func:`profiled_fit`).
MAX_ATTEMPTS = 3


def profiled_fit(key: str, data, device: str, steps: int, seeds: tuple) -> dict:
    """Profile one epoch of ``steps`` optimizer steps of ``fit`` (one seed) or ``fit_seeds``."""
    name = METHODS[key][0]
    timing, subset, n_steps = epoch_slice(key, data, steps)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    for attempt in range(MAX_ATTEMPTS):
        methods = [make_method(name, "paper", timing, seed=s, device=device) for s in seeds]
        start = time.perf_counter()
        try:
            with profile(activities=activities, with_stack=True) as prof:
                if len(methods) == 1:
                    methods[0].fit(subset)
                else:
                    fit_seeds(methods, subset)
                if device == "cuda":
                    torch.cuda.synchronize()
            wall = time.perf_counter() - start
            events = prof.key_averages()
            break
        except UnicodeDecodeError:
            # torch 2.13's profiler now and then fails to decode an event name when it parses
            # its results (here: one run of this script in six); the fit is the same: again.
            if attempt == MAX_ATTEMPTS - 1:
                raise
    # Every aten call, nested ones too (aten::linear calls aten::addmm): what is dispatched.
    calls = sum(e.count for e in events if e.key.startswith("aten::"))
    # Host syncs outside the optimizer: torch.optim's ``.item()`` of its step counters reads
    # 0-dim CPU tensors (they stay on the CPU beside CUDA parameters), which wait for nothing.
    sites: dict[str, int] = {}
    for event in prof.events():
        if event.name != SYNC_OPERATOR:
            continue
        chain, caller = [], event  # its callers: operators, then Python frames (with_stack)
        while caller.cpu_parent is not None:
            caller = caller.cpu_parent
            chain.append(caller.name)
        if any("torch/optim" in frame for frame in chain):
            continue
        own = [f for f in chain if "matchopt/" in f]
        site = own[0] if own else (chain[0] if chain else "?")
        sites[site] = sites.get(site, 0) + 1
    syncs = sum(sites.values())
    copies = sum(e.count for e in events if e.key == "aten::copy_")  # both ways, and on-device
    operator_seconds = sum(e.self_cpu_time_total for e in events if e.key.startswith("aten::"))
    top = sorted(
        (e for e in events if e.key.startswith("aten::")),
        key=lambda e: -e.self_cpu_time_total,
    )[:5]
    return {
        "method": key,
        "seeds": len(seeds),
        "device": device,
        "steps": n_steps,
        "wall_s": wall,
        "operators_per_step": calls / n_steps,
        "host_syncs_per_step": syncs / n_steps,
        "copies_per_step": copies / n_steps,
        "operator_share": operator_seconds / 1e6 / wall,
        "sync_sites": sorted(sites.items(), key=lambda item: -item[1])[:5],
        "top_operators": [
            (e.key, e.count // n_steps, round(e.self_cpu_time_total / 1e6 / wall, 3)) for e in top
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps profiled per fit")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    keys = [k for k in args.methods.split(",") if k]
    unknown = [k for k in keys if k not in METHODS]
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {list(METHODS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    data = task_rows("tfbind8")
    print(
        f"TF-Bind-8, paper preset, {args.steps} steps per fit; torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads, {args.device}"
    )
    print(
        f"{'method':<9} {'seeds':>5} {'ops/step':>9} {'syncs/step':>11} {'ops share':>10}  "
        "largest self time (operator, calls/step, share of wall)"
    )
    rows = []
    for key in keys:
        profiled_fit(key, rows_of(data, 64), args.device, 1, SEEDS[:1])  # warm-up
        for seeds in (SEEDS[:1], SEEDS):
            row = profiled_fit(key, data, args.device, args.steps, seeds)
            rows.append(row)
            top = "; ".join(f"{k} {n} {s:.2f}" for k, n, s in row["top_operators"][:3])
            print(
                f"{key:<9} {len(seeds):>5} {row['operators_per_step']:>9.0f} "
                f"{row['host_syncs_per_step']:>11.2f} {row['operator_share']:>10.2f}  {top}",
                flush=True,
            )
            for site, count in row["sync_sites"]:
                print(f"{'':<16}sync: {count / row['steps']:.2f}/step at {site}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
