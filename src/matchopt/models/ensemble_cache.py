"""A folder of trained Gaussian ensembles, keyed by what their training reads.

GA, Ens-Mean and Ens-Min fit the same bootstrapped ensemble (same architecture, training
settings, data and seed) and differ only in how many members they keep and how the search
combines them; CMA-ES and BO-qEI share theirs likewise. Members trained one after another do not
depend on how many members follow them (initialization, bootstrap draws and batch orders are
taken member after member from the seeded generators, :meth:`GaussianEnsemble.fit`), so the
first ``n`` members of a trained ``k``-member ensemble *are* the ``n``-member ensemble: GA's model
is member 0 of Ens-Mean's, bit for bit. Narrow members train in lockstep
(:func:`~matchopt.models.gaussian.fit_members`), whose float rounding depends on the member count,
so those are shared only between requests of the same size (CMA-ES and BO-qEI). Which run takes
which ensemble from a folder, and when it trains one, is :mod:`matchopt.shared_ensembles`'s; this
module stores and loads the members.

Files are matchopt state files (:mod:`matchopt.state`: tensors and plain data, read with no
pickle), written atomically below the results folder without following a link
(:mod:`matchopt.safe_paths`), and keyed by a digest of everything the training reads. A file of
the older ``torch.save`` format is set aside and its ensemble trained again. Removing a cache
folder (:func:`remove_cache_folder`) deletes the files of the names the cache gives (a digest's
32 hex digits and ``.pt``) and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from matchopt.errors import MatchoptError
from matchopt.safe_paths import (
    LinkError,
    managed_root,
    open_folder,
    parts_below,
    read_below,
    write_below,
)
from matchopt.state import MAX_FILE_BYTES, StateError, load_state, state_bytes

#: The ``kind`` of the state files (:mod:`matchopt.state`) that hold cached ensembles.
CACHE_KIND = "shared-ensemble"
#: The name of a cache file: the first 32 hex digits of its key.
CACHE_NAME = re.compile(r"[0-9a-f]{32}\.pt")


def training_fields(
    config: Any, grouped: bool, seed_batch: Sequence[int] | None = None
) -> dict[str, Any]:
    """The fields of an ensemble config that its trained members depend on: not n_models for
    members trained one after another (a prefix is exact), n_models too for ``grouped`` ones
    (:func:`~matchopt.models.gaussian.trains_grouped`). Ensembles trained in a seed batch
    (:meth:`~matchopt.models.GaussianEnsemble.trained_seeds`) also depend on its seeds; their
    members are shared as a prefix of the batch's (``grouped`` is not asked then)."""
    if seed_batch is not None:
        return {**training_fields(config, False), "seed_batch": [int(s) for s in seed_batch]}
    return {
        "members": int(config.n_models) if grouped else None,
        "hidden": list(config.hidden),
        "activation": config.activation,
        "epochs": int(config.epochs),
        "batch_size": int(config.batch_size),
        "lr": float(config.lr),
        "bootstrap": bool(getattr(config, "bootstrap", True)),
    }


def ensemble_key(
    x: torch.Tensor,
    y: torch.Tensor,
    config: Any,
    seed: int,
    grouped: bool,
    seed_batch: Sequence[int] | None = None,
) -> str:
    """Digest of what an ensemble's training reads: features, scores, training fields (and the
    seed batch it trained in), seed, and the thread count and device type (they change float
    summation order)."""
    digest = hashlib.sha256()
    fields = training_fields(config, grouped, seed_batch)
    digest.update(json.dumps([fields, int(seed)]).encode())
    digest.update(f"{torch.get_num_threads()} {x.device.type}".encode())
    digest.update(np.ascontiguousarray(x.cpu().numpy()).tobytes())
    digest.update(np.ascontiguousarray(y.cpu().numpy()).tobytes())
    return digest.hexdigest()


class EnsembleCache:
    """A folder of trained ensembles, one file per key, each with as many members as the largest
    request so far.

    Args:
        folder: where the files go (created on first store).
        root: the folder below which no link is followed (default: the results folder holding
            ``folder``'s ``.snapshots``, else ``folder`` itself;
            :func:`~matchopt.safe_paths.managed_root`).
    """

    def __init__(self, folder: str | os.PathLike, root: str | os.PathLike | None = None):
        self.folder = Path(folder)
        self.root = managed_root(self.folder) if root is None else Path(root)
        parts_below(self.root, self.folder)

    def path(self, key: str) -> Path:
        return self.folder / f"{key[:32]}.pt"

    def load(self, key: str, ensemble: torch.nn.Module) -> tuple[int, float]:
        """Fill the first members of ``ensemble`` (an untrained :class:`GaussianEnsemble`) with
        the trained members of ``key``; returns how many it filled (0: none cached) and the
        seconds the cached members took to train (where they were trained)."""
        entry = self._read(key)
        if entry is None:
            return 0, 0.0
        n = min(len(ensemble.members), int(entry["n_models"]))
        prefix = tuple(f"members.{i}." for i in range(n))
        state = {k: v for k, v in entry["state"].items() if k.startswith(prefix)}
        expected = {k: v.shape for k, v in ensemble.state_dict().items() if k.startswith(prefix)}
        if {k: v.shape for k, v in state.items()} != expected:
            return 0, 0.0  # an entry short of tensors (or of other shapes) is a cache miss
        ensemble.load_state_dict(state, strict=False)
        return n, float(entry["train_seconds"])

    def store(
        self, key: str, ensemble: torch.nn.Module, members: int, train_seconds: float
    ) -> None:
        """Keep the first ``members`` trained members of ``ensemble`` under ``key``, replacing
        what the cache holds: callers store only members beyond those they loaded."""
        prefix = tuple(f"members.{i}." for i in range(members))
        entry = {
            "key": key,
            "n_models": members,
            "train_seconds": float(train_seconds),
            "state": {
                k: v.detach().cpu().clone()
                for k, v in ensemble.state_dict().items()
                if k.startswith(prefix)
            },
        }
        write_below(self.root, self.path(key), state_bytes(entry, CACHE_KIND))

    def remove(self, key: str) -> None:
        with open_folder(self.root, parts_below(self.root, self.folder)) as folder:
            if folder is not None:
                folder.remove(self.path(key).name)

    def _read(self, key: str) -> dict[str, Any] | None:
        """The entry of ``key``, or None. A file that is not an entry matchopt could have written
        (damaged, of the older format, wrong field types, weights that are not finite or are
        beyond :data:`MAX_WEIGHT`) is set aside (renamed ``*.rejected``, with a warning naming
        it), so that a rerun trains the ensemble again instead of failing on it again."""
        path = self.path(key)
        try:
            data = read_below(self.root, path, MAX_FILE_BYTES, "shared ensemble")
        except LinkError:
            raise
        except MatchoptError:  # not a regular file, too large, unreadable
            return self._reject(path, "not readable")
        if data is None:
            return None
        if data[:4] == b"PK\x03\x04":
            return self._reject(path, "was written by an older matchopt (torch.save)")
        try:
            entry = load_state(data, CACHE_KIND, str(path))
        except StateError:
            return self._reject(path, "not readable")
        problem = _entry_problem(entry, key)
        return self._reject(path, problem) if problem else entry

    def _reject(self, path: Path, why: str) -> None:
        aside = path.with_name(path.name + ".rejected")
        try:
            with open_folder(self.root, parts_below(self.root, self.folder)) as folder:
                folder.rename(path.name, aside.name)
        except OSError:
            aside = path
        warnings.warn(
            f"shared ensemble {path} {why}: set aside as {aside.name}; training it again",
            stacklevel=3,
        )
        return None


def remove_cache_temporaries(
    folder: str | os.PathLike, root: str | os.PathLike | None = None
) -> None:
    """Remove the temporary files a killed write left in a cache folder (those of the
    names :data:`CACHE_NAME`), each by its exact name."""
    _remove_cache_files(Path(folder), root, temporaries_only=True)


def remove_cache_folder(folder: str | os.PathLike, root: str | os.PathLike | None = None) -> None:
    """Delete a cache folder (when is its user's choice): the files whose names the cache
    gives (:data:`CACHE_NAME`, and their temporary files), then the folder if that leaves it
    empty. Anything else (a ``*.rejected`` file, a file of the user's) stays; no link below the
    results folder is followed."""
    folder = Path(folder)
    root = managed_root(folder) if root is None else Path(root)
    _remove_cache_files(folder, root, temporaries_only=False)
    parts = parts_below(root, folder)
    if parts:
        with open_folder(root, parts[:-1]) as parent:
            if parent is not None:
                parent.remove_folder(parts[-1])


def _remove_cache_files(
    folder: Path, root: str | os.PathLike | None, temporaries_only: bool
) -> None:
    """Delete the files of ``folder`` named as the cache names its files (and their temporary
    files), or only those temporary files."""
    root = managed_root(folder) if root is None else Path(root)
    with open_folder(root, parts_below(root, folder)) as opened:
        for name in opened.names() if opened is not None else ():
            temporary = name.startswith(".") and name.endswith(".tmp")
            if temporaries_only and not temporary:
                continue
            if CACHE_NAME.fullmatch(name[1:-4] if temporary else name):
                opened.remove(name)


#: Largest absolute weight a cached ensemble may hold (trained members hold values near 1).
MAX_WEIGHT = 1e6


def _entry_problem(entry: Any, key: str) -> str | None:
    """What makes ``entry`` other than what :meth:`EnsembleCache.store` writes, or None."""
    if not isinstance(entry, dict) or entry.get("key") != key:
        return "is not an entry of this key"
    n_models, seconds, state = entry.get("n_models"), entry.get("train_seconds"), entry.get("state")
    if not isinstance(n_models, int) or isinstance(n_models, bool) or n_models < 1:
        return f"has n_models {n_models!r}, not a count"
    if not isinstance(seconds, float) or not 0 <= seconds < 3.2e7:
        return f"has train_seconds {seconds!r}, not a duration"
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        return "holds a state that is not named tensors"
    for name, tensor in state.items():
        if tensor.is_floating_point() and not (
            torch.isfinite(tensor).all() and tensor.abs().max() <= MAX_WEIGHT
        ):
            return f"holds {name} with values that are not finite or beyond {MAX_WEIGHT:g}"
    return None
