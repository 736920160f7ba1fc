"""The UTR task's oracle: a convolutional network of mean ribosome load from a 50-nt 5' UTR.

Design-Bench scores UTR designs with a network trained on all 280,000 rows (UTR-ResNet-v0),
whose weights are not distributed with the data. This module holds the network fitted here in
its place, in the spirit of Sample et al.'s Optimus 5-Prime (Nature Biotechnology 2019, the
model those data were measured for): one-hot input, three convolutions of 120 filters of width
8 (ReLU, same padding), a dense layer of 40 (ReLU) with dropout 0.2, one linear output; mean
squared error on z-scored loads, Adam (lr 1e-3), batches of 128, 3 epochs, one fixed seed.

The fitted weights ship with matchopt (``utr_oracle/weights.safetensors``: raw tensors behind a
JSON header, no pickle) beside ``utr_oracle/oracle.json`` (the recipe, the target's scaling, the
held-out accuracy, the weights' sha256 and the command that regenerated them:
``python benchmarks/fit_utr_oracle.py``). Every number that changes a score (the weights, the
recipe, the target's mean and scale) is covered by one sha256 written in this module
(:data:`ORACLE_SHA256`, :func:`oracle_digest`), not in the files it checks: a copy whose weights
or ``oracle.json`` numbers were edited is refused, whatever digest the files say. Loading also
checks every tensor's shape, and reads both files only as regular files of bounded size.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from matchopt.errors import MatchoptError
from matchopt.evaluation import fit_accuracy
from matchopt.safe_paths import read_regular

#: The folder of the shipped oracle, inside the package.
ORACLE_FOLDER = "utr_oracle"
WEIGHTS_FILE = "weights.safetensors"
HEADER_FILE = "oracle.json"
#: :func:`oracle_digest` of the shipped oracle (``benchmarks/fit_utr_oracle.py`` prints the
#: value of one it fits, to write here with the files).
ORACLE_SHA256 = "392f60d6e2456dc8404a6a1f1e424453d775e178f0f028f25320626381d9b821"
#: Largest files read: the weights take 1.9 MB, the header 1 KB.
MAX_WEIGHTS_BYTES, MAX_HEADER_BYTES = 64 * 2**20, 2**20


@dataclass(frozen=True)
class OracleRecipe:
    """How the oracle is trained (Optimus 5-Prime's architecture and schedule)."""

    length: int = 50
    vocab_size: int = 4
    filters: int = 120
    kernel_size: int = 8
    conv_layers: int = 3
    dense: int = 40
    dropout: float = 0.2
    epochs: int = 3
    batch_size: int = 128
    lr: float = 1e-3
    seed: int = 0


class OptimusNet(nn.Module):
    """Optimus 5-Prime's network: one-hot (n, L, 4) -> conv x3 -> dense -> load (z-scored)."""

    def __init__(self, recipe: OracleRecipe):
        super().__init__()
        layers: list[nn.Module] = []
        channels = recipe.vocab_size
        for _ in range(recipe.conv_layers):
            # Keras' padding="same" with an even kernel pads 3 left and 4 right.
            left = (recipe.kernel_size - 1) // 2
            layers += [
                nn.ConstantPad1d((left, recipe.kernel_size - 1 - left), 0.0),
                nn.Conv1d(channels, recipe.filters, recipe.kernel_size),
                nn.ReLU(),
            ]
            channels = recipe.filters
        self.convs = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(recipe.filters * recipe.length, recipe.dense),
            nn.ReLU(),
            nn.Dropout(recipe.dropout),
            nn.Linear(recipe.dense, 1),
        )
        self.vocab_size = recipe.vocab_size

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Z-scored loads (n,) of token sequences (n, L)."""
        one_hot = nn.functional.one_hot(tokens.long(), self.vocab_size).float()
        return self.head(self.convs(one_hot.transpose(1, 2))).squeeze(-1)


def _seeded_net(recipe: OracleRecipe) -> OptimusNet:
    torch.manual_seed(recipe.seed)
    return OptimusNet(recipe)


def train_network(
    x: np.ndarray,
    y: np.ndarray,
    recipe: OracleRecipe = OracleRecipe(),
    progress: bool = True,
) -> tuple[OptimusNet, float, float]:
    """Fit the network on token sequences x (N, L) and loads y (N,) by the recipe.

    Returns the network (in eval mode) and the mean and std the loads were z-scored with.
    Everything random (initial weights, batch order, dropout) comes from ``recipe.seed``.
    """
    from tqdm.auto import tqdm

    y = np.asarray(y, dtype=np.float64).reshape(-1)
    y_mean, y_std = float(y.mean()), float(y.std())
    net = _seeded_net(recipe)
    tokens = torch.as_tensor(np.asarray(x, dtype=np.int64))
    target = torch.as_tensor((y - y_mean) / y_std, dtype=torch.float32)
    generator = torch.Generator().manual_seed(recipe.seed)
    optimizer = torch.optim.Adam(net.parameters(), lr=recipe.lr)
    steps = math.ceil(len(target) / recipe.batch_size)
    net.train()
    for epoch in range(recipe.epochs):
        order = torch.randperm(len(target), generator=generator)
        total = 0.0
        bar = tqdm(range(steps), desc=f"UTR oracle, epoch {epoch + 1}", disable=not progress)
        for step in bar:
            rows = order[step * recipe.batch_size : (step + 1) * recipe.batch_size]
            loss = nn.functional.mse_loss(net(tokens[rows]), target[rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(rows)
            if step % 200 == 0:
                seen = min(len(target), (step + 1) * recipe.batch_size)
                bar.set_postfix(mse=f"{total / seen:.4f}")
    net.eval()
    return net, y_mean, y_std


@torch.no_grad()
def predict(
    net: OptimusNet, x: np.ndarray, y_mean: float, y_std: float, batch: int = 4096
) -> np.ndarray:
    """Loads (n,) predicted for token sequences x (n, L), in the data's units."""
    net.eval()
    out = np.empty(len(x), dtype=np.float64)
    for start in range(0, len(x), batch):
        tokens = torch.as_tensor(np.asarray(x[start : start + batch], dtype=np.int64))
        out[start : start + batch] = net(tokens).double().numpy()
    return out * y_std + y_mean


def oracle_digest(weights: bytes, recipe: dict[str, Any], y_mean: float, y_std: float) -> str:
    """sha256 of what defines the oracle: the bytes of its weights file, its recipe, and the
    mean and scale its predictions are mapped back with (every number that changes a score)."""
    digest = hashlib.sha256(weights)
    numbers = {"recipe": recipe, "y_mean": y_mean, "y_std": y_std}
    digest.update(json.dumps(numbers, sort_keys=True).encode())
    return digest.hexdigest()


def save_oracle(
    folder: Path, net: OptimusNet, y_mean: float, y_std: float, header: dict[str, Any]
) -> dict[str, Any]:
    """Write the weights (safetensors) and the JSON header (with their sha256 and the oracle's
    :func:`oracle_digest`, which :data:`ORACLE_SHA256` must then hold) into ``folder``."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / WEIGHTS_FILE
    state = {name: t.detach().contiguous() for name, t in net.state_dict().items()}
    save_file(state, str(weights))
    raw = weights.read_bytes()
    header = {
        **header,
        "y_mean": y_mean,
        "y_std": y_std,
        "weights_sha256": hashlib.sha256(raw).hexdigest(),
        "oracle_sha256": oracle_digest(raw, header["recipe"], y_mean, y_std),
        "shapes": {name: list(t.shape) for name, t in state.items()},
    }
    (folder / HEADER_FILE).write_text(json.dumps(header, indent=2) + "\n")
    return header


class UTROracle:
    """The shipped oracle: mean ribosome load of 50-nt UTRs (tokens 0-3: A, C, G, T).

    Reads ``oracle.json`` and ``weights.safetensors`` from ``folder`` (default: the copy inside
    the package), checks that they are the oracle of ``sha256`` (:func:`oracle_digest`; default
    :data:`ORACLE_SHA256`, the shipped one) and each tensor's shape against the recipe's
    network, and refuses anything else with the reason.
    """

    def __init__(self, folder: Path | None = None, sha256: str = ORACLE_SHA256):
        base = Path(folder) if folder is not None else _package_folder()
        self.header, raw = _read_files(base)
        header_path, weights_path = base / HEADER_FILE, base / WEIGHTS_FILE
        try:
            self.recipe = OracleRecipe(**self.header["recipe"])
            self.y_mean = float(self.header["y_mean"])
            self.y_std = float(self.header["y_std"])
            found = oracle_digest(raw, self.header["recipe"], self.y_mean, self.y_std)
        except (KeyError, TypeError, ValueError) as err:
            raise MatchoptError(f"{header_path}: not a UTR oracle header ({err})") from None
        if found != sha256:
            raise MatchoptError(
                f"{base}: the oracle's weights and numbers (sha256 {found[:16]}...) are not "
                f"those of the oracle matchopt ships ({sha256[:16]}...): {WEIGHTS_FILE} or the "
                f"recipe, y_mean or y_std of {HEADER_FILE} changed; reinstall matchopt, or "
                "regenerate both with `python benchmarks/fit_utr_oracle.py`"
            )
        self.net = OptimusNet(self.recipe)
        state = _weights(raw, weights_path)
        expected = {name: tuple(t.shape) for name, t in self.net.state_dict().items()}
        shapes = {name: tuple(t.shape) for name, t in state.items()}
        if expected != shapes:
            raise MatchoptError(f"{weights_path}: tensors {shapes} do not fit the recipe's network")
        self.net.load_state_dict(state)
        self.net.eval()

    def __call__(self, designs: np.ndarray) -> np.ndarray:
        """Predicted mean ribosome load (n,) of designs (n, 50)."""
        with torch.inference_mode():
            return predict(self.net, designs, self.y_mean, self.y_std)


def _read_files(base: Path) -> tuple[dict[str, Any], bytes]:
    """The header and the weights' bytes of the oracle in ``base`` (regular files, bounded)."""
    header_path = base / HEADER_FILE
    try:
        header = json.loads(read_regular(header_path, MAX_HEADER_BYTES, "UTR oracle header"))
        raw = read_regular(base / WEIGHTS_FILE, MAX_WEIGHTS_BYTES, "UTR oracle weights file")
    except (ValueError, RecursionError) as err:
        raise MatchoptError(f"cannot read the UTR oracle in {base}: {err}") from None
    except MatchoptError as err:
        raise MatchoptError(f"cannot read the UTR oracle in {base}: {err}") from None
    if not isinstance(header, dict):
        raise MatchoptError(f"{header_path}: expected a JSON object")
    return header, raw


def _weights(raw: bytes, path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        return load(raw)
    except (SafetensorError, ValueError) as err:
        raise MatchoptError(f"{path}: not a safetensors file ({err})") from None


def _package_folder() -> Path:
    return Path(str(resources.files("matchopt.tasks").joinpath(ORACLE_FOLDER)))


def fit_and_measure(
    x: np.ndarray,
    y: np.ndarray,
    out: Path,
    recipe: OracleRecipe = OracleRecipe(),
    held_out: float = 0.1,
    command: str = "",
) -> dict[str, Any]:
    """The oracle's full recipe: accuracy on a held-out share first, then the fit on all rows.

    The held-out rows are a uniform draw of ``held_out`` of the rows (seed ``recipe.seed``).
    Writes the oracle into ``out`` and returns its header.
    """
    rng = np.random.default_rng(recipe.seed)
    order = rng.permutation(len(y))
    n_test = int(round(held_out * len(y)))
    test, train = order[:n_test], order[n_test:]
    started = time.perf_counter()
    net, y_mean, y_std = train_network(x[train], y[train], recipe)
    measured = fit_accuracy(y[test], predict(net, x[test], y_mean, y_std))
    held_out_seconds = time.perf_counter() - started
    print(
        f"held-out {held_out:.0%} ({n_test:,} rows): R^2 {measured['r2']:.4f}, "
        f"Spearman {measured['spearman']:.4f} ({held_out_seconds:.0f} s)",
        flush=True,
    )
    started = time.perf_counter()
    net, y_mean, y_std = train_network(x, y, recipe)
    header = {
        "task": "utr",
        "recipe": asdict(recipe),
        "rows": int(len(y)),
        "held_out": {"fraction": held_out, "rows": n_test, **measured},
        "train_seconds": round(time.perf_counter() - started, 1),
        "torch": torch.__version__,
        "command": command,
    }
    return save_oracle(out, net, y_mean, y_std, header)
