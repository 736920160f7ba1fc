"""Tiny data files in the design-bench layout, and one factory that builds every registered task
on them (the task contract runs over all of it; task tests use the writers).

Each fixture keeps the layout a task reads (folder, file names, shard count) with few rows, and
the costly oracles are shortened (Hopper episodes of a few steps, one worker).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from matchopt.tasks import TASKS, Task, load_task

#: Hopper episodes in fixtures: long enough to move, short enough to be fast.
HOPPER_STEPS = 20


def write_shards(root: Path, folder: str, prefix: str, x, y, sizes) -> None:
    """``<root>/<folder>/<prefix>-{x,y}-<k>.npy`` holding consecutive blocks of ``sizes`` rows."""
    base = Path(root) / folder
    base.mkdir(parents=True, exist_ok=True)
    start = 0
    for k, n in enumerate(sizes):
        np.save(base / f"{prefix}-x-{k}.npy", x[start : start + n])
        np.save(base / f"{prefix}-y-{k}.npy", np.asarray(y[start : start + n]).reshape(-1, 1))
        start += n


def decode_codes(codes: np.ndarray, length: int) -> np.ndarray:
    """Tokens (n x length) of base-4 codes (n,)."""
    powers = 4 ** np.arange(length - 1, -1, -1)
    return ((codes[:, None] // powers) % 4).astype(np.int32)


def write_sequences(root: Path, task_cls, n_rows: int, seed: int = 0) -> None:
    """Distinct random k-mers with random scores, split over the task's shard count."""
    rng = np.random.default_rng(seed)
    length = task_cls.space.shape[0]
    codes = rng.choice(4**length, size=n_rows, replace=False)
    sizes = np.diff(np.linspace(0, n_rows, task_cls.n_shards + 1).round().astype(int))
    y = rng.normal(size=n_rows).astype(np.float32)
    write_shards(root, task_cls.folder, task_cls.prefix, decode_codes(codes, length), y, sizes)


def write_landscape(root: Path, task_cls, n_rows: int, seed: int = 0) -> tuple[list[str], list]:
    """A GraphFLA-style CSV (``sequences,pos1..posK,fitness``) of ``n_rows`` distinct random
    variants in ``<root>/landscapes``; returns (sequences, fitness). A tenth of the rows are 0,
    as in PhoQ's dead variants."""
    from matchopt.tasks.landscapes import AMINO_ACIDS, LANDSCAPES_FOLDER

    rng = np.random.default_rng(seed)
    sites = task_cls.space.shape[0]
    codes = rng.choice(20**sites, size=n_rows, replace=False)
    tokens = (codes[:, None] // 20 ** np.arange(sites - 1, -1, -1)) % 20
    sequences = ["".join(AMINO_ACIDS[t] for t in row) for row in tokens]
    fitness = np.round(rng.gamma(2.0, 1.0, size=n_rows), 6)
    fitness[rng.random(n_rows) < 0.1] = 0.0
    folder = Path(root) / LANDSCAPES_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    header = ",".join(["sequences", *(f"pos{i + 1}" for i in range(sites)), "fitness"])
    lines = [header] + [",".join([seq, *seq, repr(float(f))]) for seq, f in zip(sequences, fitness)]
    (folder / task_cls.file_name).write_text("\n".join(lines) + "\n")
    return sequences, list(fitness)


def write_utr(root: Path, n_rows: int = 280, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random 50-nt UTRs with random loads in 0..12 over the task's 14 shards; returns (x, y)."""
    from matchopt.tasks.design_bench import UTR

    rng = np.random.default_rng(seed)
    x = rng.integers(0, 4, size=(n_rows, 50)).astype(np.int32)
    y = rng.uniform(0.0, 12.0, size=n_rows).astype(np.float32)
    sizes = np.diff(np.linspace(0, n_rows, UTR.n_shards + 1).round().astype(int))
    write_shards(root, UTR.folder, UTR.prefix, x, y, sizes)
    return x, y


def write_superconductor(root: Path, sizes=(100, 100, 100, 100, 60), seed: int = 1):
    """Sparse element counts with a learnable critical temperature; returns (x, y)."""
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    x = rng.poisson(0.3, size=(n, 86)).astype(np.float32) * (rng.random((n, 86)) < 0.1)
    weights = rng.normal(size=86) * (rng.random(86) < 0.2)
    y = (20 + 10 * x @ weights + rng.normal(scale=1.0, size=n)).clip(0.1).astype(np.float32)
    write_shards(root, "superconductor", "superconductor", x, y, list(sizes))
    return x, y


def random_policies(n: int, seed: int = 0) -> np.ndarray:
    """``n`` Hopper controllers (n x 5126) from the task's own initializer."""
    from matchopt.tasks.hopper import random_policy

    rng = np.random.default_rng(seed)
    return np.stack([random_policy(rng) for _ in range(n)]).astype(np.float32)


def write_hopper(root: Path, x: np.ndarray, y: np.ndarray) -> None:
    """design-bench's hopper_controller files (one shard)."""
    write_shards(root, "hopper_controller", "hopper_controller", x, y.astype(np.float32), [len(x)])


def random_policy_weights(rng, obs_dim: int, action_dim: int = 12, hidden: int = 32) -> dict:
    """A dict in the format of design-bench's morphology oracle pickles (W as out x in)."""
    from matchopt.tasks.morphology import POLICY_KEYS

    shapes = [(hidden, obs_dim), (hidden,), (hidden, hidden), (hidden,)]
    shapes += [(2 * action_dim, hidden), (2 * action_dim,)]
    return {
        key: rng.normal(0.0, 1.0 / np.sqrt(shape[-1]), shape).astype(np.float32)
        for key, shape in zip(POLICY_KEYS, shapes)
    }


def random_morphologies(rng, env_cls, n: int) -> np.ndarray:
    low, high = np.tile(env_cls.leg_low, 4), np.tile(env_cls.leg_high, 4)
    return rng.uniform(low, high, size=(n, low.size)).astype(np.float32)


def write_policy(path: Path, weights: dict, protocol: int = 3) -> None:
    """Pickle ``weights`` as a numpy-1 era file (protocol 3, ``numpy.core`` module paths)."""
    data = pickle.dumps(dict(weights), protocol=protocol)
    # numpy 2 writes numpy._core; the old name has the same length minus one and protocol 3 has
    # no frame lengths, so the bytes stay a valid pickle.
    path.write_bytes(data.replace(b"numpy._core.", b"numpy.core."))


def write_morphology(root: Path, task_cls, env_cls, n: int = 40, seed: int = 0):
    """<folder>/<prefix>-{x,y}-0.npy and <folder>/<robot>_oracle.pkl; returns (x, y)."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / task_cls.folder
    folder.mkdir(parents=True)
    x = random_morphologies(rng, env_cls, n)
    y = rng.normal(0.0, 100.0, size=(n, 1)).astype(np.float32)
    np.save(folder / f"{task_cls.prefix}-x-0.npy", x)
    np.save(folder / f"{task_cls.prefix}-y-0.npy", y)
    write_policy(folder / task_cls.policy_file, random_policy_weights(rng, env_cls.obs_dim))
    return x, y.reshape(-1)


def make_task(name: str, root: Path) -> Task:
    """Every registered task on a tiny fixture under ``root`` (embedded tasks as they are)."""
    root = Path(root)
    if TASKS[name].embedded:
        return load_task(name)
    if name in ("tfbind8", "tfbind10"):
        write_sequences(root, TASKS[name], n_rows=400 if name == "tfbind8" else 840)
        return load_task(name, root)
    if name == "tfbind8-replicates":
        write_sequences(root, TASKS["tfbind8"], n_rows=400)
        return load_task(name, root)
    if getattr(TASKS[name], "file_name", "").endswith(".csv"):  # protein landscapes
        write_landscape(
            root, TASKS[name], n_rows=2_400 if TASKS[name].space.shape[0] == 4 else 1_200
        )
        return load_task(name, root)
    if name == "utr":
        write_utr(root)
        return load_task(name, root)
    if name == "superconductor":
        write_superconductor(root)
        return load_task(name, root)
    if name == "hopper":
        from matchopt.tasks.hopper import HopperController

        write_hopper(root, random_policies(6, seed=2), np.linspace(10.0, 600.0, 6))
        return HopperController(root, max_episode_steps=HOPPER_STEPS, workers=1)
    if name == "hopper-local":
        from matchopt.tasks.hopper import HopperLocal, HopperLocalConfig

        config = HopperLocalConfig(
            runs=2, population=4, generations=2, max_episode_steps=HOPPER_STEPS
        )
        return HopperLocal(root, generation=config, workers=1, generation_workers=1)
    if name in ("ant", "dkitty"):
        from matchopt.tasks import morphology as M

        task_cls, env_cls = {
            "ant": (M.AntMorphology, M.AntEnv),
            "dkitty": (M.DKittyMorphology, M.DKittyEnv),
        }[name]
        write_morphology(root, task_cls, env_cls)
        return task_cls(root, workers=1)
    raise KeyError(f"no fixture for task {name!r}: add one to tests/task_fixtures.py")
