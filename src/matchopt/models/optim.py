"""The optimizer every trained network here uses: Adam (or AdamW) with torch's fused kernel;
and :class:`LossTotal`, the epoch's running loss that never makes a step wait on the device.

The fused kernel updates all parameters in one pass instead of foreach's chain of list
operations; the update is Adam's, equal to the foreach one up to float rounding
(``tests/benchmarks/test_speedups.py``). Measured per training step on this project's CPUs
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


class LossTotal:
    """A sum of batch losses, each times its row count, kept on the losses' device.

    ``total += loss.item() * count`` after every step makes the host wait for the device (a
    sync per step: on a GPU, small networks then spend their time waiting). This keeps the sum
    as a float64 tensor where the losses are and reads it once (:meth:`value`, at an epoch's
    end). It adds in the same order and precision as that Python float sum (float64 products of
    float32 losses), so :meth:`value` is that sum, bit for bit.
    """

    def __init__(self) -> None:
        self._sum: torch.Tensor | None = None

    def add(self, loss: torch.Tensor | LossTotal, count: int = 1) -> None:
        """Add ``loss * count`` (a scalar tensor), or another total as it stands."""
        if isinstance(loss, LossTotal):
            if loss._sum is None:  # an empty total adds nothing
                return
            term = loss._sum
        else:
            term = loss.detach().double() * count
        self._sum = term if self._sum is None else self._sum + term

    def value(self) -> float:
        """The sum as a Python float (0.0 when nothing was added): one read of the device."""
        return 0.0 if self._sum is None else float(self._sum.item())
