"""Several seeds of one network as one: parameters stacked on a leading seed dimension.

Small networks on a GPU spend their time launching kernels, not computing: four
seeds trained one after the other launch four times the kernels of one. :class:`SeedStack`
holds S copies of an architecture (one per seed, each initialized as its seed's run alone
initializes it) as stacked parameters and calls them all in one pass
(``torch.func.vmap`` over ``functional_call``), so one optimizer step trains every seed.

Why the seeds stay independent: the loss a batched loop minimizes is the sum of the seeds'
losses, so the gradient in seed k's slice is seed k's own gradient; Adam's update is
elementwise, so its slice of the state is seed k's own. Each seed's random draws come from its
own generator, in the order its run alone draws them. A batched seed therefore trains as its
run alone, up to the summation order of the batched products (float round-off; bitwise where
the kernels are the same).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from matchopt.errors import MatchoptError
from matchopt.models.sampling import gumbel_noise
from matchopt.state_checks import check_number


class SeedStack(nn.Module):
    """S modules of one architecture, stacked: ``stack(*inputs)`` is
    ``[modules[k](*inputs_k) for k]`` stacked, where every input has the seed dimension first.

    Args:
        modules: the seeds' networks (same architecture, no buffers); not changed.
    """

    def __init__(self, modules: Sequence[nn.Module]):
        super().__init__()
        modules = list(modules)
        if not modules:
            raise MatchoptError("a seed stack needs at least one module")
        if any(True for m in modules for _ in m.buffers()):
            raise MatchoptError("a seed stack holds modules without buffers only")
        shapes = [[(n, p.shape) for n, p in m.named_parameters()] for m in modules]
        if any(s != shapes[0] for s in shapes):
            raise MatchoptError("the modules of a seed stack must share one architecture")
        params, _ = stack_module_state(modules)
        self.names = list(params)
        self.stacked = nn.ParameterList(
            nn.Parameter(params[n].detach().clone()) for n in self.names
        )
        # Kept out of the module tree (a list): a shape template without storage.
        self._template = [copy.deepcopy(modules[0]).to("meta")]

    @property
    def n_seeds(self) -> int:
        return self.stacked[0].shape[0]

    def forward(self, *inputs: torch.Tensor) -> Any:
        """Every seed's module on its own inputs (each input: seeds x ...), in one pass."""
        template, names = self._template[0], self.names

        def one(params: tuple[torch.Tensor, ...], *args: torch.Tensor) -> Any:
            return functional_call(template, dict(zip(names, params)), args)

        return vmap(one)(tuple(self.stacked), *inputs)

    @torch.no_grad()
    def unstack_into(self, modules: Sequence[nn.Module]) -> None:
        """Copy each seed's parameters back into its module (same order as given)."""
        if len(modules) != self.n_seeds:
            raise MatchoptError(f"{len(modules)} modules for a stack of {self.n_seeds} seeds")
        for k, module in enumerate(modules):
            own = dict(module.named_parameters())
            for name, stacked in zip(self.names, self.stacked):
                own[name].copy_(stacked[k])


def per_seed(fn: Any, stack: SeedStack) -> Any:
    """``fn(net, *args)`` for every seed at once: ``fn`` receives a callable network and that
    seed's slice of each argument (seeds x ...); returns the results stacked on the seeds.

    ``fn`` is written for one seed's run alone (e.g. a denoising loss that calls ``net``); here
    ``net`` is the seed's slice of the stack, vectorized over the seeds by ``vmap``.
    """
    template, names = stack._template[0], stack.names

    def one(params: tuple[torch.Tensor, ...], *args: torch.Tensor) -> Any:
        def net(*inputs: torch.Tensor) -> Any:
            return functional_call(template, dict(zip(names, params)), inputs)

        return fn(net, *args)

    def batched(*args: torch.Tensor) -> Any:
        return vmap(one)(tuple(stack.stacked), *args)

    return batched


class SeedDraws:
    """The random draws of one run, or of a batch of seeds trained together.

    Each seed draws from its own generator, on the CPU, in the order its run alone draws, then
    the draws move to ``device``. One run (``batched`` False) gets its draws as its own code
    would make them; a batch gets every seed's draw of the same kind stacked on a leading seed
    dimension. Training code written with these draws and shape-agnostic losses serves both.

    Args:
        generators: one per seed (one for a single run).
        device: where the draws go.
        batched: stack the draws on a seed dimension (else exactly one generator).
    """

    def __init__(self, generators: Sequence[torch.Generator], device: torch.device, batched: bool):
        if not batched and len(generators) != 1:
            raise MatchoptError("draws of one run take one generator")
        self.generators = list(generators)
        self.device = device
        self.batched = batched

    def _each(self, draw: Any) -> torch.Tensor:
        drawn = [draw(generator) for generator in self.generators]
        return (torch.stack(drawn) if self.batched else drawn[0]).to(self.device)

    def randperm(self, n: int) -> torch.Tensor:
        return self._each(lambda g: torch.randperm(n, generator=g))

    def randn(self, *shape: int) -> torch.Tensor:
        return self._each(lambda g: torch.randn(shape, generator=g))

    def rand(self, *shape: int) -> torch.Tensor:
        return self._each(lambda g: torch.rand(shape, generator=g))

    def gumbel(self, *shape: int) -> torch.Tensor:
        """Standard Gumbel noise (:func:`~matchopt.models.sampling.gumbel_noise`)."""
        return self._each(lambda g: gumbel_noise(shape, g, self.device))


# --- Layers written with the seed dimension (for networks whose draws vmap cannot split) -------


class SeedLinear(nn.Module):
    """S independent linear maps in one batched product: ``y[k] = x[k] @ weight[k] + bias[k]``.

    For networks written with the seed dimension first (a single run is S = 1), where
    :class:`SeedStack`'s ``vmap`` cannot serve: their random draws (dropout) must come from
    each seed's own generator inside the forward pass.

    Args:
        n_seeds: S.
        in_features, out_features: the shape of each seed's map.
    """

    def __init__(self, n_seeds: int, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_seeds, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(n_seeds, 1, out_features))

    def __matchopt_check__(self) -> None:
        """Checks of a layer read from a model file (:mod:`matchopt.state`)."""
        weight = module_tensor(self, "weight")
        if weight.dim() != 3:
            raise MatchoptError(
                f"weight has shape {tuple(weight.shape)}, expected (seeds, in, out)"
            )
        check_shape(self, "bias", (weight.shape[0], 1, weight.shape[2]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (S x ... x in) -> (S x ... x out)."""
        flat = x.reshape(x.shape[0], -1, x.shape[-1])
        return torch.baddbmm(self.bias, flat, self.weight).view(*x.shape[:-1], -1)


class SeedLayerNorm(nn.Module):
    """S layer norms over the last dimension, each with its own scale and shift (ones and zeros)."""

    def __init__(self, n_seeds: int, width: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n_seeds, 1, width))
        self.bias = nn.Parameter(torch.zeros(n_seeds, 1, width))
        self.eps = eps

    def __matchopt_check__(self) -> None:
        """Checks of a layer read from a model file (:mod:`matchopt.state`)."""
        weight = module_tensor(self, "weight")
        if weight.dim() != 3 or weight.shape[1] != 1:
            raise MatchoptError(
                f"weight has shape {tuple(weight.shape)}, expected (seeds, 1, width)"
            )
        check_shape(self, "bias", weight.shape)
        check_number(self, "eps", 0.0, above=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (S x ... x width), normalized per row, then scaled and shifted per seed."""
        flat = x.reshape(x.shape[0], -1, x.shape[-1])
        normal = nn.functional.layer_norm(flat, flat.shape[-1:], eps=self.eps)
        return torch.addcmul(self.bias, normal, self.weight).view(x.shape)


def module_tensor(module: nn.Module, name: str) -> torch.Tensor:
    """``module``'s parameter or buffer ``name`` (or a submodule's: ``"head.weight"``); a missing
    one is an error naming it (a model file of another version)."""
    owner = module
    *path, last = name.split(".")
    for part in path:
        owner = owner._modules.get(part)  # type: ignore[assignment]
        if not isinstance(owner, nn.Module):
            raise MatchoptError(f"no submodule {part!r} in {name!r}")
    tensor = owner._parameters.get(last, owner._buffers.get(last))
    if not isinstance(tensor, torch.Tensor):
        raise MatchoptError(f"no tensor {name!r}")
    return tensor


def check_shape(module: nn.Module, name: str, shape: Sequence[int]) -> torch.Tensor:
    """:func:`module_tensor` ``name`` of ``module``, refused unless of ``shape``."""
    tensor = module_tensor(module, name)
    if tuple(tensor.shape) != tuple(shape):
        raise MatchoptError(
            f"{name} has shape {tuple(tensor.shape)}, expected {tuple(int(n) for n in shape)}"
        )
    return tensor


class SeedDropout:
    """Dropout of a network written with the seed dimension first, each seed's masks drawn from
    its own generator (on the activations' device), in the order its run alone draws them.

    Args:
        p: probability of zeroing an activation.
        generators: one per seed, on the device the activations live on.
    """

    def __init__(self, p: float, generators: Sequence[torch.Generator]):
        if not 0.0 <= p < 1.0:
            raise MatchoptError(f"dropout must be in [0, 1), got {p}")
        self.p = p
        self.generators = list(generators)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (S x ...) with each seed's dropped entries zeroed and the rest scaled by
        1 / (1 - p), as ``torch.nn.functional.dropout``."""
        if self.p == 0.0:
            return x
        if len(self.generators) != x.shape[0]:
            raise MatchoptError(f"{len(self.generators)} dropout generators for {x.shape[0]} seeds")
        noise = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        for own, generator in zip(noise, self.generators):  # each seed's torch.rand
            own.uniform_(generator=generator)
        # One boolean mask kept for the backward pass, not a float one.
        return (x * (1.0 / (1.0 - self.p))).masked_fill_(noise < self.p, 0.0)


@torch.no_grad()
def clip_seed_grad_norms(parameters: Sequence[nn.Parameter], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` of every seed on its own: each parameter has the seed
    dimension first, and seed k's gradients are scaled by ``min(1, max_norm / (norm_k +
    1e-6))``, ``norm_k`` the 2-norm of all of seed k's gradient entries. Returns the norms (S,)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norms = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads]), dim=0
    )
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return norms
