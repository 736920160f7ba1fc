"""Multi-layer perceptron surrogates with piecewise-linear activations."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from matchopt.errors import MatchoptError
from matchopt.state_checks import check_number, describe

ACTIVATIONS = {
    "leaky_relu": lambda: nn.LeakyReLU(0.3),
    "relu": nn.ReLU,
    "softplus": nn.Softplus,
    "swish": nn.SiLU,
    "tanh": nn.Tanh,
}


def mlp_layers(
    in_features: int, hidden: Sequence[int], out_features: int, activation: str = "relu"
) -> nn.Sequential:
    """``Linear -> activation`` for each hidden width, then a final ``Linear`` (no activation).

    ``activation`` is one of ``leaky_relu`` (slope 0.3, the Keras default design-baselines uses),
    ``relu``,
    ``softplus``, ``swish``, ``tanh``.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {list(ACTIVATIONS)}")
    widths = [in_features, *hidden]
    layers: list[nn.Module] = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), ACTIVATIONS[activation]()]
    layers.append(nn.Linear(widths[-1], out_features))
    return nn.Sequential(*layers)


class MLP(nn.Module):
    """Scalar-output MLP ``d -> hidden[0] -> ... -> hidden[-1] -> 1`` with LeakyReLU.

    The activation is piecewise linear (ReLU when ``negative_slope`` is 0), so its derivative is
    a constant mask per unit; :mod:`matchopt.methods.matchopt` uses that to compute input
    gradients of many points in closed form.

    Args:
        in_features: input dimension d.
        hidden: widths of the hidden layers.
        negative_slope: LeakyReLU slope for negative inputs.
    """

    def __init__(
        self, in_features: int, hidden: Sequence[int] = (512, 128, 32), negative_slope: float = 0.3
    ):
        super().__init__()
        widths = [in_features, *hidden]
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.output = nn.Linear(widths[-1], 1)
        self.negative_slope = negative_slope

    def __matchopt_check__(self) -> None:
        """Checks of a network read from a model file (:mod:`matchopt.state`; each layer is
        checked there): linear layers that fit each other, ending in 1 output."""
        hidden = self._modules.get("hidden")
        output = self._modules.get("output")
        if not isinstance(hidden, nn.ModuleList) or not all(
            isinstance(layer, nn.Linear) for layer in hidden
        ):
            raise MatchoptError(f"hidden is {describe(hidden)}, expected a list of Linear layers")
        if not isinstance(output, nn.Linear) or output.out_features != 1:
            raise MatchoptError(f"output is {describe(output)}, expected a Linear with 1 output")
        layers = [*hidden, output]
        for index, (before, layer) in enumerate(zip(layers[:-1], layers[1:])):
            if layer.in_features != before.out_features:
                raise MatchoptError(
                    f"layer {index + 1} takes {layer.in_features} features after a layer "
                    f"giving {before.out_features}"
                )
        check_number(self, "negative_slope")

    @property
    def in_features(self) -> int:
        """Input dimension d."""
        return (self.hidden[0] if len(self.hidden) else self.output).in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Predicted scores (n,) of features ``x`` (n x d)."""
        h = x
        for layer in self.hidden:
            h = nn.functional.leaky_relu(layer(h), self.negative_slope)
        return self.output(h).squeeze(-1)
