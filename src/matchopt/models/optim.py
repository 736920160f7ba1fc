"""The optimizer every trained network here uses: Adam (or AdamW) with torch's fused kernel.

The fused kernel updates all parameters in one pass instead of foreach's chain of list
operations; the update is Adam's, equal to the foreach one up to float rounding
(``tests/test_speedups.py``). Measured per training step on this project's CPUs
(``python benchmarks/speedups.py``): 1.12-1.55x on GA, DDOM and MINs-sized networks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def adam(
    params: Iterable[Any],
    lr: float,
    *,
    betas: tuple[float, float] = (0.9, 0.999),
    weight_decay: float = 0.0,
    decoupled: bool = False,
    fused: bool = True,
) -> torch.optim.Optimizer:
    """Adam over ``params`` (tensors or parameter groups); AdamW when ``decoupled``.

    ``fused=False`` gives torch's default (foreach) implementation: the reference the fused one
    is checked against.
    """
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    options: dict[str, Any] = {"lr": lr, "betas": betas, "weight_decay": weight_decay}
    if fused:
        options["fused"] = True
    return kind(params, **options)
