"""The pretrained morphology-conditioned policy of the Ant and D'Kitty oracles, and rollouts.

The policy file is read with a restricted unpickler that only rebuilds numpy arrays, dicts and
lists; any other object in the file is refused (a pickle can otherwise run arbitrary code).

Designs are scored by processes started with ``spawn`` (``workers`` of them) or serially
  (``workers=1``, the default: see :data:`DEFAULT_WORKERS`). Scripts that score with
  ``workers > 1`` must guard their entry point with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import importlib
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from matchopt.errors import MatchoptError
from matchopt.tasks.morphology_bodies import (
    POLICY_KEYS,
    ROLLOUT_STEPS,
    AntEnv,
    DKittyEnv,
    MorphologyEnv,
    require_mujoco,
)
from matchopt.tasks.rollouts import DEFAULT_WORKERS, pooled_map, resolve_workers

# ----------------------------------------------------------------------------------------------
# Policy and rollouts
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MorphologyPolicy:
    """The pretrained policy: 3 dense layers, ReLU between, tanh of the mean action.

    ``action = tanh(first half of W2 relu(W1 relu(W0 obs + b0) + b1) + b2)``.

    Attributes:
        weights: (W0, b0, W1, b1, W2, b2), float64; W0 h1 x obs_dim, W1 h2 x h1,
            W2 (2 * action_dim) x h2 (the second half of its output, a log-std, is unused).
    """

    weights: tuple[np.ndarray, ...]

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Action (action_dim,) for one observation (obs_dim,)."""
        w0, b0, w1, b1, w2, b2 = self.weights
        hidden = np.maximum(0.0, w0 @ obs + b0)
        hidden = np.maximum(0.0, w1 @ hidden + b1)
        out = w2 @ hidden + b2
        return np.tanh(out[: out.size // 2])


# The exact names a policy pickle may look up: numpy arrays, dtypes and scalars (numpy 1 and 2
# module paths) and ordered dicts. Plain dicts, lists, tuples and numbers need no lookup.
# Nothing else, not even another name of an allowed module (a whole-module rule let a crafted
# file reach numpy.dtypes.__builtins__).
_SAFE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("collections", "OrderedDict"),
}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _SAFE_GLOBALS:
            raise pickle.UnpicklingError(
                f"the file holds a {module}.{name} object; only numpy arrays in a dict are read"
            )
        if module.startswith("numpy.core") and hasattr(np, "_core"):
            # numpy 2 moved numpy.core to numpy._core (the old path warns on import).
            module = "numpy._core" + module[len("numpy.core") :]
        return getattr(importlib.import_module(module), name)


def read_policy_file(path: str | os.PathLike) -> Any:
    """Unpickle a policy file allowing only numpy arrays and containers (see the module notes)."""
    try:
        with open(path, "rb") as handle:
            return _ArrayUnpickler(handle).load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError) as err:
        raise MatchoptError(f"cannot read policy file {path}: {err}") from None


def policy_from_mapping(
    weights: Any, obs_dim: int, action_dim: int, source: str = "policy"
) -> MorphologyPolicy:
    """Check a mapping of :data:`POLICY_KEYS` to arrays and build the policy.

    Args:
        weights: mapping with the six keys (extra keys are ignored).
        obs_dim: input size the environment produces.
        action_dim: actions of the environment (the last layer has twice as many outputs).
        source: name of the file (or object) for error messages.
    """
    if not isinstance(weights, Mapping):
        raise MatchoptError(
            f"{source}: expected a dict of numpy arrays, got {type(weights).__name__}"
        )
    missing = [key for key in POLICY_KEYS if key not in weights]
    if missing:
        raise MatchoptError(f"{source}: missing layer(s) {', '.join(missing)}")
    arrays = []
    for key in POLICY_KEYS:
        try:
            array = np.asarray(weights[key], dtype=np.float64)
        except (TypeError, ValueError):
            raise MatchoptError(f"{source}: layer {key} is not a numeric array") from None
        if not np.isfinite(array).all():
            raise MatchoptError(f"{source}: layer {key} has NaN or infinite values")
        arrays.append(array)
    w0, _, w1, _, w2, _ = arrays
    h1 = w0.shape[0] if w0.ndim == 2 else -1
    h2 = w1.shape[0] if w1.ndim == 2 else -1
    expected = [
        (h1, obs_dim),
        (h1,),
        (h2, h1),
        (h2,),
        (2 * action_dim, h2),
        (2 * action_dim,),
    ]
    for key, array, shape in zip(POLICY_KEYS, arrays, expected):
        if array.shape != shape or min(shape) < 1:
            want = " x ".join("h" if s < 0 else str(s) for s in shape)
            raise MatchoptError(
                f"{source}: layer {key} has shape {array.shape}, expected ({want}) for an "
                f"environment with {obs_dim} observations and {action_dim} actions"
            )
    return MorphologyPolicy(tuple(arrays))


def load_policy(path: str | os.PathLike, obs_dim: int, action_dim: int) -> MorphologyPolicy:
    """Read design-bench's ``ant_oracle.pkl`` / ``dkitty_oracle.pkl`` and check its shapes."""
    return policy_from_mapping(read_policy_file(path), obs_dim, action_dim, source=str(path))


def morphology_return(
    env: MorphologyEnv, policy: MorphologyPolicy, steps: int = ROLLOUT_STEPS
) -> float:
    """Sum of rewards of one episode of at most ``steps`` steps (summed in float32, as
    design-bench does)."""
    obs = env.reset()
    total = np.float32(0.0)
    for _ in range(steps):
        obs, reward, done = env.step(policy(obs))
        if not np.isfinite(reward):
            break
        total += np.float32(reward)
        if done:
            break
    return float(total)


ROBOTS: dict[str, type[MorphologyEnv]] = {"ant": AntEnv, "dkitty": DKittyEnv}

# State of a pool worker, set once by _init_worker so that jobs carry only a design.
_WORKER: dict[str, Any] = {}


def _init_worker(
    robot: str, policy: MorphologyPolicy, steps: int, env_kwargs: dict[str, Any]
) -> None:
    _WORKER.update(robot=robot, policy=policy, steps=steps, env_kwargs=env_kwargs)


def _worker_return(design: np.ndarray) -> float:
    env = ROBOTS[_WORKER["robot"]](design, **_WORKER["env_kwargs"])
    return morphology_return(env, _WORKER["policy"], _WORKER["steps"])


def score_designs(
    robot: str,
    designs: np.ndarray,
    policy: MorphologyPolicy,
    steps: int = ROLLOUT_STEPS,
    workers: int | None = DEFAULT_WORKERS,
    env_kwargs: dict[str, Any] | None = None,
) -> np.ndarray:
    """Returns (n,) of designs (n x 4 * fields) of ``robot`` (``"ant"`` or ``"dkitty"``).

    Args:
        robot: key of :data:`ROBOTS`.
        designs: designs, one per row (clipped to the leg bounds before building).
        policy: the pretrained policy.
        steps: rollout length.
        workers: processes (``spawn``); 1 scores here, serially; ``None`` means one per core.
        env_kwargs: extra arguments of the environment class (e.g. ``contact_forces``).
    """
    if robot not in ROBOTS:
        raise MatchoptError(f"unknown robot {robot!r}; known: {', '.join(ROBOTS)}")
    if int(steps) != steps or steps < 1:
        raise MatchoptError(f"rollout steps must be an integer >= 1, got {steps}")
    resolve_workers(workers, 1)
    require_mujoco()
    returns = pooled_map(
        _worker_return,
        np.asarray(designs),
        workers,
        initializer=_init_worker,
        initargs=(robot, policy, int(steps), dict(env_kwargs or {})),
        desc=robot,
    )
    return np.array(returns, dtype=np.float64)
