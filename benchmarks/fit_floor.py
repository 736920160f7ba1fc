"""The arithmetic floor of a MATCH-OPT ensemble's fit: the matrix products no step can skip.

A member's training step (the closed-form step of ``fused_loss_and_gradients``, the paper's
eqs. 13-14) takes the surrogate's value and input gradient at every trajectory point and every
interior quadrature node (R = T + (T - 1)(kappa - 1) rows), then the parameter gradients of the
matching term. Whatever else it does, it multiplies, for every hidden layer after the first,
four matrices of R rows (the forward pass, the input gradient, the weight gradient and the
gradient passed back), and for the first layer three of T rows (the points, the segments and the
weight gradient). This times exactly those products, one at a time with ``torch.mm`` in this
process's threads, and multiplies by the steps of a fit (members x steps a member takes on the
table, :meth:`MatchOptEnsemble.member_epochs`):

    floor = n_models x steps x sum of the products' times

a lower bound of the fit's time at that precision (the value term, elementwise work, Adam and
Python are left out). Tables: TF-Bind-8's offline rows and the 2,000-row protein table of
``benchmarks/fit_speed.py`` (``tev-screen``). Precisions: float32 (what the fit uses) and
bfloat16 (for comparison: this CPU's products at half the bytes; the fit does not use it).

Beside the floor it times the whole step (``fused_loss_and_gradients`` and the fused Adam
update, on a trajectory of the table's width) three ways, and scales each to a fit the same way:
as the fit runs it (eager, float32); compiled by ``torch.compile`` (float32: the elementwise work
fused, the same arithmetic up to round-off); and compiled under bfloat16 autocast (the products
in bfloat16, the parameters and Adam in float32). For each it prints the parameter gradients'
relative difference from the eager step's at the same parameters, and the seconds the
first compiled call took (a cold compile: the compiler's cache is a new temporary folder).
Neither compiled step is used by any method: this says what they would buy.

    python benchmarks/fit_floor.py [--method matchopt-ens-mix-near] [--repeats 50] [--no-steps]

The last line of output is one JSON object of every number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np
import torch

from matchopt.encodings import DesignEncoder
from matchopt.methods import make_method
from matchopt.methods.matchopt import fused_loss_and_gradients, quadrature_rule, rank_buckets
from matchopt.models import MLP
from matchopt.runtime import set_threads
from matchopt.tasks import load_task

#: The tables of the issue's targets and the targets, in seconds per run (fit and search).
TABLES = {"tfbind8": 120.0, "tev-screen": 40.0}


def products(d: int, hidden: tuple[int, ...], points: int, kappa: int) -> list[tuple[int, ...]]:
    """The (m, k, n) shapes of the matrix products of one member's step (module notes)."""
    rows = points + (points - 1) * (kappa - 1)
    first = hidden[0]
    shapes = [(points, d, first), (points - 1, d, first), (first, points - 1, d)]
    for width_in, width_out in zip(hidden, hidden[1:]):
        shapes += [
            (rows, width_in, width_out),  # forward
            (rows, width_out, width_in),  # input gradient
            (width_out, rows, width_in),  # weight gradient
            (rows, width_in, width_out),  # gradient passed back
        ]
    return shapes


def product_ms(shape: tuple[int, int, int], dtype: torch.dtype, repeats: int) -> float:
    """Median milliseconds of one ``torch.mm`` of ``shape`` (m x k times k x n)."""
    m, k, n = shape
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    for _ in range(5):
        torch.mm(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def table_floor(task_name: str, method: str, repeats: int, steps_too: bool = True) -> dict:
    """The floor of ``method``'s fit on ``task_name``'s offline table, both precisions, and
    (``steps_too``) the whole step's time each way of :data:`STEP_WAYS`."""
    data = load_task(task_name).offline
    solver = make_method(method, "paper", seed=0)
    config = solver.config_
    d = DesignEncoder(data.space).fit(data.x, data.y).encode_x(data.x[:1]).shape[1]
    epochs = solver.member_epochs(config, len(data))
    per_epoch = len(rank_buckets(np.zeros(len(data)), config.trajectory_length)[0])
    steps = epochs * per_epoch
    shapes = products(d, tuple(config.hidden), config.trajectory_length, config.kappa)
    result = {"rows": len(data), "features": d, "steps": steps, "n_models": config.n_models}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        step_ms = sum(product_ms(shape, dtype, repeats) for shape in shapes)
        result[f"{name}_step_ms"] = round(step_ms, 3)
        result[f"{name}_floor_s"] = round(config.n_models * steps * step_ms / 1e3, 1)
    if steps_too:
        result |= whole_steps(d, tuple(config.hidden), config, repeats)
        for name in STEP_WAYS:
            ms = result[f"{name}_ms"]
            result[f"{name}_fit_s"] = round(config.n_models * steps * ms / 1e3, 1)
    return result


#: The three ways :func:`whole_steps` runs a step.
STEP_WAYS = ("eager_float32", "compiled_float32", "compiled_bfloat16")


def whole_steps(d: int, hidden: tuple[int, ...], config, repeats: int) -> dict:
    """Median milliseconds of one whole member step (loss, closed-form gradients, Adam) each
    way of :data:`STEP_WAYS`, with the gradients' relative difference from the eager step's and
    the compiled ways' first-call seconds."""
    torch.manual_seed(0)
    x = torch.randn(config.trajectory_length, d)
    y = torch.sort(torch.randn(config.trajectory_length)).values
    rule = quadrature_rule(config.quadrature, config.kappa)

    def loss_and_gradients(model: MLP) -> torch.Tensor:
        return fused_loss_and_gradients(model, x, y, rule, config.alpha, config.rank_weight)

    def in_bfloat16(model: MLP) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return loss_and_gradients(model)

    ways = {
        "eager_float32": loss_and_gradients,
        "compiled_float32": torch.compile(loss_and_gradients),
        "compiled_bfloat16": torch.compile(in_bfloat16),
    }
    result: dict = {}
    reference: list[torch.Tensor] = []
    for name, compute in ways.items():
        torch.manual_seed(1)
        model = MLP(d, hidden)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)
        start = time.perf_counter()
        compute(model)  # the compiled ways compile here
        result[f"{name}_first_call_s"] = round(time.perf_counter() - start, 2)
        grads = [p.grad.detach().float().clone() for p in model.parameters()]
        reference = reference or grads
        result[f"{name}_grad_difference"] = max(
            float((g - r).norm() / r.norm()) for g, r in zip(grads, reference)
        )

        def step(compute=compute, model=model, optimizer=optimizer) -> None:
            compute(model)
            optimizer.step()

        for _ in range(5):
            step()
        times = []
        for _ in range(repeats):
            begin = time.perf_counter()
            step()
            times.append(time.perf_counter() - begin)
        result[f"{name}_ms"] = round(1e3 * statistics.median(times), 3)
    return result


def print_row(task_name: str, row: dict, target: float, ways: tuple[str, ...]) -> None:
    """One table's floor, and its whole step each of ``ways``."""
    precisions = "  ".join(
        f"{name} {row[f'{name}_step_ms']:6.3f} ms/step floor {row[f'{name}_floor_s']:6.1f} s"
        for name in ("float32", "bfloat16")
    )
    print(
        f"{task_name:10s} {row['rows']:6d} rows d={row['features']:3d} "
        f"{row['n_models']} x {row['steps']} steps  {precisions}  target {target:.0f} s  "
        f"float32 floor / target = {row['float32_floor_s'] / target:.2f}"
    )
    for name in ways:
        print(
            f"{'':10s} whole step {name:17s} {row[f'{name}_ms']:6.3f} ms  fit "
            f"{row[f'{name}_fit_s']:6.1f} s  fit / target = "
            f"{row[f'{name}_fit_s'] / target:.2f}  gradients differ by "
            f"{row[f'{name}_grad_difference']:.1e}  first call {row[f'{name}_first_call_s']:.1f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="matchopt-ens-mix-near")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument(
        "--no-steps", action="store_true", help="time the products only, not the whole step"
    )
    args = parser.parse_args()
    threads = set_threads()
    print(f"{args.method}, {threads} thread(s), torch {torch.__version__}")
    results = {"method": args.method, "threads": threads}
    # A compiler cache of its own, so that the first calls show a cold compile's seconds.
    with tempfile.TemporaryDirectory(prefix="matchopt-fit-floor-") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        for task_name, target in TABLES.items():
            row = table_floor(task_name, args.method, args.repeats, not args.no_steps)
            results[task_name] = row | {"target_s": target}
            print_row(task_name, row, target, () if args.no_steps else STEP_WAYS)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
