"""Random draws shared by the generative methods (MINs, CbAS)."""

from __future__ import annotations

import torch


def gumbel_noise(
    shape: torch.Size | tuple[int, ...], generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """Standard Gumbel draws ``-log(-log(u))``, ``u ~ U(0, 1)`` clamped away from 0.

    ``argmax(logits + noise)`` samples ``softmax(logits)`` (Gumbel-max); ``softmax((logits +
    noise) / t)`` is its relaxation (Gumbel-softmax). Drawn on the generator's CPU, then moved:
    the same noise on every device.
    """
    uniform = torch.rand(shape, generator=generator).to(device).clamp_(min=1e-20)
    return -torch.log(-torch.log(uniform))
