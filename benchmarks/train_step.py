"""Time one MATCH-OPT training step: matchopt's implementation vs the public script's formulation.

One step = one trajectory of 128 points (127 pairs), trapezoid quadrature with kappa = 5, value
regularizer included (alpha = 1), Adam update, on the paper's MLP d -> 512 -> 128 -> 32 -> 1.

* ours: :func:`matchopt.methods.matchopt.fused_loss_and_gradients` (closed-form gradients).
* autograd: :func:`matchopt.methods.matchopt.gradient_matching_loss` (one reverse pass for all
  input gradients, then ``backward``); shown for information.
* jacobian: the public script's formulation: at every quadrature node, the full batch Jacobian
  ``torch.autograd.functional.jacobian`` of the 127 outputs w.r.t. the 127 inputs, of which only
  the diagonal is used (O(batch^2) work).

All three compute the same loss (printed as a check). Usage::

    python benchmarks/train_step.py [--repeats 20] [--jacobian-repeats 3]

The last line of output is one JSON object with the timings in milliseconds per step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.autograd import functional as autograd_functional

from matchopt.methods.matchopt import (
    fused_loss_and_gradients,
    gradient_matching_loss,
    quadrature_rule,
)
from matchopt.models import MLP
from matchopt.runtime import keep_freed_memory

TRAJECTORY, KAPPA, ALPHA = 128, 5, 1.0


def jacobian_loss(model: MLP, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Loss of the public script's formulation, with the paper's trapezoid weights."""
    xu, xv = x[:-1], x[1:]
    integral = torch.zeros_like(xu)
    for j in range(KAPPA + 1):
        t = j / KAPPA
        weight = (0.5 if j in (0, KAPPA) else 1.0) / KAPPA
        nodes = xu * (1 - t) + xv * t
        jac = autograd_functional.jacobian(
            lambda inp: model(inp).flatten(), nodes, create_graph=True
        )
        integral = integral + weight * torch.einsum("aab->ab", jac)
    estimates = (integral * (xv - xu)).sum(1)
    matching = torch.nn.functional.mse_loss(estimates, y[1:] - y[:-1])
    return matching + ALPHA * torch.nn.functional.mse_loss(model(x), y)


def time_steps(step, repeats: int) -> tuple[float, float]:
    """Median milliseconds per step over ``repeats`` after one warm-up step, and the warm-up
    step's loss (computed before any update, so comparable between implementations)."""
    first_loss = step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), first_loss


def bench(d: int, repeats: int, jacobian_repeats: int) -> dict:
    torch.manual_seed(0)
    x = torch.randn(TRAJECTORY, d)
    y = torch.sort(torch.randn(TRAJECTORY)).values
    rule = quadrature_rule("trapezoid", KAPPA)
    results = {}
    for name in ("ours", "autograd", "jacobian"):
        torch.manual_seed(1)
        model = MLP(d)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, fused=True)

        def step(name=name, model=model, optimizer=optimizer):
            if name == "ours":
                loss = fused_loss_and_gradients(model, x, y, rule, ALPHA)
            else:
                optimizer.zero_grad()
                if name == "autograd":
                    value = gradient_matching_loss(model, x, y, rule, ALPHA)
                else:
                    value = jacobian_loss(model, x, y)
                value.backward()
                loss = value.item()
            optimizer.step()
            return loss

        reps = jacobian_repeats if name == "jacobian" else repeats
        ms, first_loss = time_steps(step, reps)  # same initial parameters: same first loss
        results[name] = (ms, first_loss)
        print(f"d={d:>3} {name:<9} {ms:10.2f} ms/step   loss at init {first_loss:.6f}", flush=True)
    ours, jac = results["ours"][0], results["jacobian"][0]
    return {
        "ours_ms": round(ours, 3),
        "autograd_ms": round(results["autograd"][0], 3),
        "jacobian_ms": round(jac, 3),
        "speedup": round(jac / ours, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--jacobian-repeats", type=int, default=5)
    args = parser.parse_args()
    keep_freed_memory()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    out = {f"d{d}": bench(d, args.repeats, args.jacobian_repeats) for d in (24, 86)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
