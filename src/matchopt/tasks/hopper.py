"""Hopper controller tasks: a design is the weight vector of a small MLP policy for Hopper.

A design ``x`` (5,126 floats) is read in order as ``W0`` (11 x 64), ``b0`` (64), ``W1``
(64 x 64), ``b1`` (64), ``W2`` (64 x 3), ``b2`` (3) and 3 unused values (a Gaussian policy's
log-std in design-bench's files). The policy is deterministic:
``action = tanh(tanh(obs W0 + b0) W1 + b1) W2 + b2``, passed to the environment unclipped
(MuJoCo clamps the torques to [-1, 1]; the control cost is charged on the raw action, as in
design-bench). The oracle is the mean return over ``episodes`` episodes; episode ``i`` resets
the environment with seed ``seed + i``, so the oracle is deterministic.

Environment: ``gymnasium``'s ``Hopper-v5`` on the ``mujoco`` package (``pip install
'matchopt[mujoco]'``). Design-bench's ``HopperController-Exact-v0`` used gym's ``Hopper-v2`` on
mujoco-py (MuJoCo 1.50) with an unseeded reset. The differences: (1) a different MuJoCo engine
version, so the same weights give a somewhat different trajectory; (2) ``v5`` pays the healthy
reward only while the hopper is healthy, so a terminated episode's last step earns 1 less than in
``v2``; (3) seeded resets here (the reset noise is uniform in +-0.005 either way); the
observation (11 values), the action (3 torques), the reward terms, the health checks and the
1,000-step limit are the same. The design-bench file's y values were measured in ``v2``; tasks
still normalize with that file's min and max, as design-bench does.

Rollouts run in a process pool (``spawn`` start method; by default ``min(cores, designs)``
workers). Scripts that score Hopper designs through a pool must guard their entry point with
``if __name__ == "__main__":`` as ``spawn`` re-imports the main module.

``hopper-local`` builds its own dataset here, once, so that a Hopper task runs without a
download. Generation (:func:`generate_hopper_local`, settings :class:`HopperLocalConfig`):

* ``runs`` independent evolution-strategy runs (OpenAI-ES style: antithetic Gaussian
  perturbations with standard deviation ``sigma``, centered-rank fitness shaping, an Adam step of
  size ``learning_rate`` on the mean), seeded by ``(seed, run)``;
* each run starts from random weights: every weight matrix uniform in
  ``+-1 / sqrt(fan_in)`` (PyTorch's default for linear layers), biases 0; the 3 unused values
  are 0 and never perturbed;
* each generation evaluates ``population`` perturbed policies of every run with the task's own
  oracle (one episode of ``max_episode_steps`` steps, reset seed ``episode_seed``); the runs
  advance in lockstep so a generation's ``runs x population`` rollouts share the pool;
* EVERY evaluated perturbed policy is kept (the mean policies are not evaluated): the first
  generations hold poor random policies and the later ones increasingly good ones, so the
  ``runs x population x generations`` rows (3,200 by default) span poor to good returns, like
  design-bench's file of policies from a training run. Kept rows are stored with their exact
  oracle value, so ``task.score(offline.x)`` gives ``offline.y`` (up to float32 rounding);
* the offline set is all rows (max_percentile 100, as design-bench's Hopper task), and scores
  are normalized with the generated data's min and max.

Defaults: 4 runs x 16 policies x 50 generations = 3,200 rows, full 1,000-step episodes. Returns
rise from about 0 (random weights fall at once) to about 1,050 (the ES runs learn to stay up for
the whole episode, moving forward a little); with 1,000-step episodes most of the cost is in the
late, long-lived policies. Measured: under 5 minutes on 2 busy cores (the generation.json beside
the files records the time and the return range).

The files go to ``<data_dir>/hopper_local/`` in the design-bench layout
(``hopper_local-x-0.npy`` float32 (N, 5126), ``hopper_local-y-0.npy`` float32 (N, 1)) with
``generation.json`` (the settings, written last); they are regenerated when the settings
differ. Parallel loads wait on a file lock, so the data is generated once.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from matchopt.data import DesignSpace
from matchopt.errors import MatchoptError
from matchopt.io import atomic_write_bytes, file_lock
from matchopt.tasks.base import Task, resolve_data_dir
from matchopt.tasks.design_bench import DesignBenchTask
from matchopt.tasks.rollouts import DEFAULT_WORKERS, open_pool, pooled_map, resolve_workers
from matchopt.tasks.shards import load_shards, shard_paths

ENV_ID = "Hopper-v5"
OBS_DIM, HIDDEN_DIM, ACTION_DIM = 11, 64, 3
#: Shapes of the parameter blocks of a design, in order (the last one is unused).
LAYOUT: tuple[tuple[int, ...], ...] = (
    (OBS_DIM, HIDDEN_DIM),
    (HIDDEN_DIM,),
    (HIDDEN_DIM, HIDDEN_DIM),
    (HIDDEN_DIM,),
    (HIDDEN_DIM, ACTION_DIM),
    (ACTION_DIM,),
    (ACTION_DIM,),
)
N_PARAMS = sum(int(np.prod(s)) for s in LAYOUT)  # 5126
INSTALL_HINT = "pip install 'matchopt[mujoco]'"


def require_gymnasium() -> None:
    """Raise a :class:`MatchoptError` naming the install command if gymnasium/mujoco is absent."""
    missing = [m for m in ("gymnasium", "mujoco") if importlib.util.find_spec(m) is None]
    if missing:
        raise MatchoptError(
            f"the Hopper tasks need {' and '.join(missing)}, which is not installed: {INSTALL_HINT}"
        )


def decode_policy(x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Split one design (5126,) into ``(W0, b0, W1, b1, W2, b2)`` (float64; unused tail dropped).

    Shapes: W0 11 x 64, b0 64, W1 64 x 64, b1 64, W2 64 x 3, b2 3.
    """
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    if x.size != N_PARAMS:
        raise MatchoptError(f"a Hopper policy has {N_PARAMS} values, got {x.size}")
    blocks, start = [], 0
    for shape in LAYOUT:
        size = int(np.prod(shape))
        blocks.append(x[start : start + size].reshape(shape))
        start += size
    return tuple(blocks[:-1])


def policy_action(weights: tuple[np.ndarray, ...], obs: np.ndarray) -> np.ndarray:
    """The policy's action (3,) for one observation (11,): ``tanh(tanh(o W0+b0) W1+b1) W2+b2``."""
    w0, b0, w1, b1, w2, b2 = weights
    hidden = np.tanh(np.tanh(obs @ w0 + b0) @ w1 + b1)
    return hidden @ w2 + b2


# One environment per process and episode length: building it compiles the MuJoCo model.
_ENVS: dict[int, object] = {}


def _environment(max_episode_steps: int):
    if max_episode_steps not in _ENVS:
        require_gymnasium()
        import gymnasium

        _ENVS[max_episode_steps] = gymnasium.make(
            ENV_ID, max_episode_steps=max_episode_steps, disable_env_checker=True
        )
    return _ENVS[max_episode_steps]


def hopper_return(
    x: np.ndarray, episodes: int = 1, seed: int = 0, max_episode_steps: int = 1000
) -> float:
    """Mean return of the policy ``x`` (5126,) over ``episodes`` episodes (reset seeds seed+i)."""
    weights = decode_policy(x)
    env = _environment(max_episode_steps)
    total = 0.0
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        while True:
            obs, reward, terminated, truncated, _ = env.step(policy_action(weights, obs))
            total += float(reward)
            if terminated or truncated:
                break
    return total / episodes


def _rollout_job(args: tuple[np.ndarray, int, int, int]) -> float:
    return hopper_return(*args)


class PolicyEvaluator:
    """Scores batches of policies (:func:`~matchopt.tasks.rollouts.pooled_map`).

    Use as a context manager to keep one pool for several batches (the pool's workers import
    gymnasium once); :meth:`__call__` outside a ``with`` block opens a pool for that batch.

    Args:
        episodes: episodes per policy (the return is their mean).
        seed: reset seed of the first episode (episode i uses ``seed + i``).
        max_episode_steps: step limit of an episode.
        workers: processes (:data:`~matchopt.tasks.rollouts.DEFAULT_WORKERS`: 1, here);
            ``None`` means one per core.
    """

    def __init__(
        self,
        episodes: int = 1,
        seed: int = 0,
        max_episode_steps: int = 1000,
        workers: int | None = DEFAULT_WORKERS,
    ):
        self.episodes = episodes
        self.seed = seed
        self.max_episode_steps = max_episode_steps
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def _check(self) -> None:
        if self.episodes < 1 or self.max_episode_steps < 1:
            raise MatchoptError(
                f"Hopper episodes and max_episode_steps must be >= 1, got {self.episodes} and "
                f"{self.max_episode_steps}"
            )
        resolve_workers(self.workers, 1)
        require_gymnasium()

    def __enter__(self) -> PolicyEvaluator:
        self._check()
        workers = resolve_workers(self.workers, os.cpu_count() or 1)
        if workers > 1:
            self._pool = open_pool(workers)
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __call__(
        self, designs: np.ndarray, progress: bool = False, desc: str = "Hopper"
    ) -> np.ndarray:
        """Mean returns (n,) of the policies ``designs`` (n x 5126)."""
        self._check()
        designs = np.asarray(designs)
        if designs.ndim != 2 or designs.shape[1] != N_PARAMS:
            raise MatchoptError(
                f"Hopper designs must have shape (n, {N_PARAMS}), got {designs.shape}"
            )
        jobs = [(row, self.episodes, self.seed, self.max_episode_steps) for row in designs]
        results = pooled_map(
            _rollout_job, jobs, self.workers, pool=self._pool, progress=progress, desc=desc
        )
        return np.asarray(results, dtype=np.float64)


class _HopperTask(Task):
    """Shared oracle of the Hopper tasks: mean return of the decoded policy."""

    space = DesignSpace.continuous(N_PARAMS)

    def _evaluator(self) -> PolicyEvaluator:
        return PolicyEvaluator(self.episodes, self.seed, self.max_episode_steps, self.workers)

    def _score(self, designs: np.ndarray) -> np.ndarray:
        return self._evaluator()(designs)


class HopperController(_HopperTask, DesignBenchTask):
    """Hopper controller (design-bench HopperController-Exact-v0) on gymnasium's Hopper-v5.

    Offline set: all 3,200 rows of design-bench's file (max_percentile 100); scores normalized
    with that file's min and max (87.93491 / 1361.6106, measured in gym's Hopper-v2).
    Oracle: mean return over ``episodes`` seeded episodes of Hopper-v5 (see the module notes on
    how it differs from design-bench's Hopper-v2).

    Args:
        data_dir: folder with design-bench files (``hopper_controller/hopper_controller-*.npy``).
        episodes: episodes per design (design-bench's v0: 1; its v1: 10).
        seed: reset seed of the first episode (episode i uses ``seed + i``).
        max_episode_steps: step limit of an episode (1000 as in design-bench; less for tests).
        workers: processes for the oracle's rollouts (default 1, here); ``None``: one per core.
    """

    name = "hopper"
    design_bench_name = "HopperController-Exact-v0"
    summary = "Hopper MLP controller weights, 5126-d; gymnasium Hopper-v5 rollout oracle"
    offline_size = 3_200
    folder, prefix, n_shards, max_percentile = "hopper_controller", "hopper_controller", 1, 100.0

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        episodes: int = 1,
        seed: int = 0,
        max_episode_steps: int = 1000,
        workers: int | None = DEFAULT_WORKERS,
    ):
        self.episodes = episodes
        self.seed = seed
        self.max_episode_steps = max_episode_steps
        self.workers = workers
        require_gymnasium()
        super().__init__(data_dir)

    def _build_oracle(self, x: np.ndarray, y: np.ndarray) -> PolicyEvaluator:
        return self._evaluator()


@dataclass(frozen=True)
class HopperLocalConfig:
    """How hopper-local's dataset is generated (the module docstring gives the algorithm)."""

    #: Independent evolution-strategy runs (different random starting policies).
    runs: int = 4
    #: Perturbed policies evaluated per run and generation (even: antithetic pairs).
    population: int = 16
    #: Generations per run; rows = runs x population x generations.
    generations: int = 50
    #: Standard deviation of the Gaussian perturbations of the weights.
    sigma: float = 0.05
    #: Adam step size on the mean weights.
    learning_rate: float = 0.03
    #: Step limit of an episode (1000 as in design-bench); the oracle uses the same.
    max_episode_steps: int = 1000
    #: Reset seed of the single evaluation episode; the oracle uses the same.
    episode_seed: int = 0
    #: Seed of the starting weights and the perturbations.
    seed: int = 0

    @property
    def n_rows(self) -> int:
        return self.runs * self.population * self.generations

    def validate(self) -> None:
        for field in ("runs", "population", "generations", "max_episode_steps"):
            if getattr(self, field) < 1:
                raise MatchoptError(
                    f"hopper-local {field} must be >= 1, got {getattr(self, field)}"
                )
        if self.population % 2:
            raise MatchoptError(f"hopper-local population must be even, got {self.population}")
        if not (self.sigma > 0 and self.learning_rate > 0):
            raise MatchoptError("hopper-local sigma and learning_rate must be > 0")


GENERATOR_VERSION = 1


def random_policy(rng: np.random.Generator) -> np.ndarray:
    """Random starting weights (5126,): matrices uniform in +-1/sqrt(fan_in), biases and tail 0."""
    blocks = []
    for shape in LAYOUT[:-1]:
        if len(shape) == 2:
            bound = 1.0 / np.sqrt(shape[0])
            blocks.append(rng.uniform(-bound, bound, size=shape).reshape(-1))
        else:
            blocks.append(np.zeros(shape[0]))
    blocks.append(np.zeros(LAYOUT[-1][0]))
    return np.concatenate(blocks)


def _centered_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks scaled to [-0.5, 0.5] (ties broken by order): ES fitness shaping."""
    ranks = np.empty(len(values))
    ranks[np.argsort(values, kind="stable")] = np.arange(len(values))
    return ranks / max(len(values) - 1, 1) - 0.5


def generate_hopper_local(
    config: HopperLocalConfig, workers: int | None = None, progress: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Run the seeded ES runs of ``config`` and return every evaluated policy.

    Returns:
        x (config.n_rows x 5126, float32) and y (config.n_rows,) their returns, in the order
        generation, run, population member.
    """
    config.validate()
    n_params, half = N_PARAMS, config.population // 2
    trainable = np.ones(n_params)
    trainable[-LAYOUT[-1][0] :] = 0.0  # the unused tail stays 0
    rngs = [np.random.default_rng([config.seed, run]) for run in range(config.runs)]
    means = np.stack([random_policy(rng) for rng in rngs])
    first, second = np.zeros_like(means), np.zeros_like(means)  # Adam moments
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    xs, ys = [], []
    evaluator = PolicyEvaluator(1, config.episode_seed, config.max_episode_steps, workers)
    bar = tqdm(total=config.n_rows, desc="hopper-local: generating policies", disable=not progress)
    with evaluator, bar:
        for generation in range(config.generations):
            noise = np.stack([rng.standard_normal((half, n_params)) * trainable for rng in rngs])
            perturbed = np.concatenate(
                [means[:, None] + config.sigma * noise, means[:, None] - config.sigma * noise],
                axis=1,
            )  # runs x population x params
            candidates = perturbed.reshape(-1, n_params).astype(np.float32)
            returns = evaluator(candidates).reshape(config.runs, config.population)
            xs.append(candidates)
            ys.append(returns.reshape(-1))
            bar.update(len(candidates))
            bar.set_postfix(best=f"{returns.max():.0f}", median=f"{np.median(returns):.0f}")
            for run in range(config.runs):
                shaped = _centered_ranks(returns[run])
                gradient = (shaped[:half] - shaped[half:]) @ noise[run]
                gradient /= config.population * config.sigma
                first[run] = beta1 * first[run] + (1 - beta1) * gradient
                second[run] = beta2 * second[run] + (1 - beta2) * gradient**2
                step = generation + 1
                unbiased = first[run] / (1 - beta1**step)
                scale = np.sqrt(second[run] / (1 - beta2**step)) + eps
                means[run] += config.learning_rate * unbiased / scale
    return np.concatenate(xs), np.concatenate(ys)


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


class HopperLocal(_HopperTask):
    """Hopper controller with a dataset generated here (no download), cached in the data folder.

    Same design space and oracle as :class:`HopperController` (Hopper-v5, one seeded episode).
    Data: every policy evaluated by seeded evolution-strategy runs from random weights (module
    docstring); offline set = all rows; normalized with their min and max.

    Args:
        data_dir: folder where ``hopper_local/`` is cached (generated on first load).
        generation: the generation settings (the default makes 3,200 policies).
        workers: processes for the oracle's rollouts (default 1, here); ``None``: one per core.
        generation_workers: processes that generate the dataset (once; default one per core).
    """

    name = "hopper-local"
    summary = (
        "Hopper MLP controller weights, 5126-d; data generated here by seeded ES (no download)"
    )
    offline_size = HopperLocalConfig().n_rows
    folder, prefix = "hopper_local", "hopper_local"
    config_file = "generation.json"

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        generation: HopperLocalConfig | None = None,
        workers: int | None = DEFAULT_WORKERS,
        generation_workers: int | None = None,
    ):
        self.generation = generation if generation is not None else HopperLocalConfig()
        self.episodes = 1
        self.seed = self.generation.episode_seed
        self.max_episode_steps = self.generation.max_episode_steps
        self.workers = workers
        self.generation_workers = generation_workers
        require_gymnasium()
        self.generation.validate()
        super().__init__(data_dir)

    @classmethod
    def required_files(cls, data_dir: Path | None) -> list[Path]:
        paths = shard_paths(data_dir, cls.folder, cls.prefix, 1)
        return [*paths, Path(data_dir or ".") / cls.folder / cls.config_file]

    @classmethod
    def missing_files(cls, data_dir: str | os.PathLike | None) -> list[Path]:
        """None: the files are generated on first load, nothing has to come from outside."""
        return []

    @classmethod
    def data_status(
        cls,
        data_dir: str | os.PathLike | None = None,
        generation: HopperLocalConfig | None = None,
    ) -> str:
        """``"present"`` (cached for ``generation``, default settings if None) or ``"generate"``
        (built on first load)."""
        config = generation if generation is not None else HopperLocalConfig()
        return "present" if cls._cached(resolve_data_dir(data_dir), config) else "generate"

    @classmethod
    def _settings(cls, config: HopperLocalConfig) -> dict:
        return {"generator_version": GENERATOR_VERSION, **dataclasses.asdict(config)}

    @classmethod
    def _cached(cls, folder: Path, config: HopperLocalConfig) -> bool:
        *data, settings = cls.required_files(folder)
        if not all(p.is_file() for p in (*data, settings)):
            return False
        try:
            stored = json.loads(settings.read_text())
        except (OSError, ValueError, RecursionError):
            return False
        return isinstance(stored, dict) and stored.get("settings") == cls._settings(config)

    def _load(self):
        folder = self.data_dir
        paths = self.required_files(folder)
        # Checked before and under the lock: a cached copy is read without writing anything, so a
        # read-only data folder works once the data is there.
        if not self._cached(folder, self.generation):
            try:
                with file_lock(folder / self.folder / ".lock"):
                    if not self._cached(folder, self.generation):
                        self._generate(paths)
            except OSError as err:
                raise MatchoptError(
                    f"task {self.name!r} cannot write its generated data under {folder}: {err}"
                ) from None
        x, y = load_shards(paths[:2])
        if x.shape != (self.generation.n_rows, N_PARAMS):
            raise MatchoptError(
                f"{paths[0]}: expected shape ({self.generation.n_rows}, {N_PARAMS}), got "
                f"{x.shape}; delete {folder / self.folder} to regenerate it"
            )
        return x.astype(np.float32), y, y

    def _generate(self, paths: list[Path]) -> None:
        import gymnasium
        import mujoco

        # generation.json marks a complete cache: drop a stale one before replacing the data.
        paths[2].unlink(missing_ok=True)
        start = time.perf_counter()
        x, y = generate_hopper_local(self.generation, workers=self.generation_workers)
        atomic_write_bytes(paths[0], _npy_bytes(x))
        atomic_write_bytes(paths[1], _npy_bytes(y.astype(np.float32).reshape(-1, 1)))
        info = {
            "settings": self._settings(self.generation),
            "environment": ENV_ID,
            "gymnasium": gymnasium.__version__,
            "mujoco": mujoco.__version__,
            "seconds": round(time.perf_counter() - start, 1),
            "workers": resolve_workers(
                self.generation_workers, self.generation.runs * self.generation.population
            ),
            "y_min": float(y.min()),
            "y_median": float(np.median(y)),
            "y_max": float(y.max()),
        }
        atomic_write_bytes(paths[2], (json.dumps(info, indent=2) + "\n").encode())
