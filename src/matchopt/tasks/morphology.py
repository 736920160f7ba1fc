"""Ant and D'Kitty morphology tasks (design-bench AntMorphology-, DKittyMorphology-Exact-v0).

A design is a robot body: 4 legs of 15 values (Ant, 60 floats) or 14 values (D'Kitty, 56 floats),
each leg ``(x, y, z, a, b, c, hip_center, hip_range, thigh_center, thigh_range, ankle_center,
ankle_range[, hip_size], thigh_size, ankle_size)``: where the leg attaches to the torso, its Euler
orientation, the center and half-width of each joint's range, and the segment lengths. The oracle
clips every leg to the bounds below, builds the MuJoCo model of that body, rolls out a fixed
pretrained morphology-conditioned policy for 100 steps, and returns the sum of rewards.

The bodies and environments are in :mod:`matchopt.tasks.morphology_bodies` (with the public
files they follow and how they differ from design-bench), the pretrained policy and the rollouts
in :mod:`matchopt.tasks.morphology_policy`; their names are re-exported here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from matchopt.data import DesignSpace
from matchopt.tasks.design_bench import DesignBenchTask

# Re-exported: the bodies and environments, the policy and the rollouts.
from matchopt.tasks.morphology_bodies import (  # noqa: F401
    ANT_LEG_FIELDS,
    DKITTY_LEG_FIELDS,
    N_LEGS,
    POLICY_KEYS,
    ROLLOUT_STEPS,
    AntEnv,
    DKittyEnv,
    MorphologyEnv,
    euler_rxyz_to_matrix,
    matrix_to_euler_rxyz,
    normalize_legs,
    require_mujoco,
)
from matchopt.tasks.morphology_policy import (  # noqa: F401
    ROBOTS,
    MorphologyPolicy,
    load_policy,
    policy_from_mapping,
    read_policy_file,
    score_designs,
)
from matchopt.tasks.rollouts import DEFAULT_WORKERS
from matchopt.tasks.shards import shard_paths

# ----------------------------------------------------------------------------------------------
# Tasks
# ----------------------------------------------------------------------------------------------


class _MorphologyTask(DesignBenchTask):
    """Shared loading and oracle of the morphology tasks.

    Args:
        data_dir: folder with design-bench files (``<folder>/<prefix>-{x,y}-0.npy`` and
            ``<folder>/<robot>_oracle.pkl``).
        workers: processes for the rollouts (``spawn``); 1 (default) scores serially, ``None``
            uses one per core.
        rollout_steps: steps per rollout (100 as design-bench; fewer only for quick checks).
    """

    robot: ClassVar[str]
    folder: ClassVar[str]
    prefix: ClassVar[str]
    policy_file: ClassVar[str]
    n_shards: ClassVar[int] = 1
    max_percentile: ClassVar[float] = 40.0
    #: 40th percentile of 25,009 rows (design-bench's documented offline size).
    offline_size = 10_004

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        workers: int | None = DEFAULT_WORKERS,
        rollout_steps: int = ROLLOUT_STEPS,
    ):
        self.workers = workers
        self.rollout_steps = rollout_steps
        require_mujoco()
        super().__init__(data_dir)

    @classmethod
    def required_files(cls, data_dir: Path | None) -> list[Path]:
        shards = shard_paths(data_dir, cls.folder, cls.prefix, cls.n_shards)
        return shards + [Path(data_dir or ".") / cls.folder / cls.policy_file]

    def _env_kwargs(self) -> dict[str, Any]:
        return {}

    def _build_oracle(self, x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        env = ROBOTS[self.robot]
        self._policy = load_policy(
            self.required_files(self.data_dir)[-1], env.obs_dim, env.action_dim
        )
        return self._rollouts

    def _rollouts(self, designs: np.ndarray) -> np.ndarray:
        return score_designs(
            self.robot,
            designs,
            self._policy,
            steps=self.rollout_steps,
            workers=self.workers,
            env_kwargs=self._env_kwargs(),
        )


class AntMorphology(_MorphologyTask):
    """Ant morphology (design-bench AntMorphology-Exact-v0): 4 legs x 15 values.

    Offline set: rows with y <= the 40th percentile of the full data (10,004 of 25,009).
    Oracle: 100-step return of the pretrained policy on the Ant built from the design (module
    notes: how it differs from design-bench's mujoco-py environment).

    Args:
        data_dir: folder with ``ant_morphology/ant_morphology-{x,y}-0.npy`` and
            ``ant_morphology/ant_oracle.pkl``.
        workers: processes for the rollouts (``spawn``); 1 (default) scores serially, ``None``
            uses one per core.
        rollout_steps: steps per rollout (100 as design-bench).
        contact_forces: feed the policy MuJoCo 1.50-style contact forces instead of zeros.
    """

    name = "ant"
    design_bench_name = "AntMorphology-Exact-v0"
    summary = "Ant morphology, 4 legs x 15 values; MuJoCo rollout of a pretrained policy"
    space = DesignSpace.continuous(N_LEGS * len(ANT_LEG_FIELDS))
    robot = "ant"
    folder, prefix, policy_file = "ant_morphology", "ant_morphology", "ant_oracle.pkl"

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        workers: int | None = DEFAULT_WORKERS,
        rollout_steps: int = ROLLOUT_STEPS,
        contact_forces: bool = False,
    ):
        self.contact_forces = contact_forces
        super().__init__(data_dir, workers, rollout_steps)

    def _env_kwargs(self) -> dict[str, Any]:
        return {"contact_forces": bool(self.contact_forces)}


class DKittyMorphology(_MorphologyTask):
    """D'Kitty morphology (design-bench DKittyMorphology-Exact-v0): 4 legs x 14 values.

    Offline set: rows with y <= the 40th percentile of the full data (10,004 of 25,009).
    Oracle: 100-step return of the pretrained policy walking the D'Kitty built from the design
    towards a target 2 m ahead (module notes: how it differs from design-bench's ROBEL one).

    Args:
        data_dir: folder with ``dkitty_morphology/dkitty_morphology-{x,y}-0.npy`` and
            ``dkitty_morphology/dkitty_oracle.pkl``.
        workers: processes for the rollouts (``spawn``); 1 (default) scores serially, ``None``
            uses one per core.
        rollout_steps: steps per rollout (100 as design-bench).
    """

    name = "dkitty"
    design_bench_name = "DKittyMorphology-Exact-v0"
    summary = "D'Kitty morphology, 4 legs x 14 values; MuJoCo rollout of a pretrained policy"
    space = DesignSpace.continuous(N_LEGS * len(DKITTY_LEG_FIELDS))
    robot = "dkitty"
    folder, prefix, policy_file = "dkitty_morphology", "dkitty_morphology", "dkitty_oracle.pkl"
