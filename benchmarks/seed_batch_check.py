"""A batched seed against its run alone, on a device: how far apart they end.

Seed k of a batch of seeds should give the designs of seed k trained alone, up to float
round-off. ``tests/methods/test_seed_batches.py`` checks it on the CPU; this script measures it
on any device (``benchmarks/gpu_grid.sh`` runs it on the GPU before its grid), where the
batched products may choose other kernels than a run alone's. For each method that batches seeds, at
the quick preset on both embedded tasks, it trains seeds 0 and 1 as one batch and each alone,
and prints per method and task: the largest parameter difference relative to the largest
parameter, the largest relative difference of the epoch losses, and how many designs are
equal (tokens) or within 2^10 float32 round-offs (continuous designs).

    python benchmarks/seed_batch_check.py [--device cuda] [--methods mins,bonet]

The last line of output is one JSON list of every number.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from matchopt.methods import make_method
from matchopt.methods.training import fit_seeds
from matchopt.runtime import resolve_device
from matchopt.tasks import load_task

#: Method -> the attributes holding its trained networks.
NETWORKS = {
    "ddom": ("net_",),
    "coms": ("model_",),
    "mins": ("generator_", "critic_"),
    "bonet": ("model_",),
    "ens-mean": ("ensemble_",),
}
TASKS = ("styblinski-tang", "potts")
SEEDS = (0, 1)
N_DESIGNS = 32
#: Relative bound on continuous designs (tests/methods/test_seed_batches.py's TRAINING_ROUNDOFF).
ROUNDOFF = 2**10 * torch.finfo(torch.float32).eps / 2


def flat(method: object, names: tuple[str, ...]) -> torch.Tensor:
    """Every parameter of the method's trained networks, flattened, on the CPU."""
    return torch.cat(
        [p.detach().cpu().flatten() for name in names for p in getattr(method, name).parameters()]
    )


def compare(name: str, task: str, device: str) -> list[dict]:
    """Seeds 0 and 1 of ``name`` on ``task``: batched against alone, one row per seed."""
    data = load_task(task).offline
    alone = [make_method(name, "quick", seed=s, device=device).fit(data) for s in SEEDS]
    fresh = [make_method(name, "quick", seed=s, device=device) for s in SEEDS]
    batch = fit_seeds(fresh, data)
    rows = []
    for one, batched in zip(alone, batch):
        mine, theirs = flat(one, NETWORKS[name]), flat(batched, NETWORKS[name])
        own, other = one.propose(N_DESIGNS), batched.propose(N_DESIGNS)
        if data.space.is_discrete:
            close = (own == other).all(axis=1)
        else:
            tolerance = ROUNDOFF * np.abs(own).max()
            close = (np.abs(own - other) <= tolerance).all(axis=1)
        losses = np.asarray(getattr(one, "losses_", []), dtype=np.float64)
        batch_losses = np.asarray(getattr(batched, "losses_", []), dtype=np.float64)
        # Methods without epoch losses (the Gaussian ensembles keep none): None.
        loss_difference = (
            float(np.max(np.abs(batch_losses - losses) / np.abs(losses).clip(1e-30)))
            if losses.size
            else None
        )
        rows.append(
            {
                "method": name,
                "task": task,
                "seed": one.seed,
                "device": device,
                "parameters_equal": bool(torch.equal(mine, theirs)),
                "parameter_difference": float((mine - theirs).abs().max() / mine.abs().max()),
                "loss_difference": loss_difference,
                "designs_close": int(close.sum()),
                "designs": N_DESIGNS,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: MATCHOPT_DEVICE)")
    parser.add_argument("--methods", default=",".join(NETWORKS), help="comma-separated")
    args = parser.parse_args()
    device = str(resolve_device(args.device))
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(NETWORKS))
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(NETWORKS)}")
    print(f"batched seeds {SEEDS} against each run alone, quick preset, {device}")
    header = "seed  params equal  params rel. diff  losses rel. diff  designs"
    print(f"{'method':9} {'task':16} {header}")
    rows = []
    for name in methods:
        for task in TASKS:
            for row in compare(name, task, device):
                rows.append(row)
                loss = row["loss_difference"]
                print(
                    f"{name:9} {task:16} {row['seed']:4}  {str(row['parameters_equal']):12}"
                    f"  {row['parameter_difference']:16.2e}"
                    f"  {'-' if loss is None else f'{loss:.2e}':>16}"
                    f"  {row['designs_close']}/{row['designs']}",
                    flush=True,
                )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
