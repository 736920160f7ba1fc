"""Bodies and environments of the Ant and D'Kitty morphology tasks, written directly over
``mujoco.MjData`` (no gym, no ROBEL).

Everything here was written from reading these public files (nothing is imported from them):

* morphing-agents (brandontrabucco/morphing-agents, v1.5.1, the version design-bench pins):
  ``morphing_agents/mujoco/ant/elements.py`` and ``dkitty/elements.py`` (the LEG fields and their
  bounds), ``ant/designs.py`` / ``dkitty/designs.py`` (``normalize_design_vector``:
  ``2 (x - low) / max(high - low, 1e-5) - 1``), ``ant/base.xml`` and ``ant/env.py`` (the Ant body
  built from a design, its observation and reward), ``dkitty/env.py`` (how a design edits
  ROBEL's D'Kitty model: leg body position and Euler angles, joint and actuator ranges, segment
  lengths; the per-design joint bounds of the robot group).
* ROBEL (google-research/robel, 0.1.2) and its scene files (google-research/robel-scenes):
  ``robel/dkitty/assets/dkitty_walk-v0.xml``, ``robel-scenes/dkitty/assets/chainA_xh-v2.1.xml``
  and ``dependenciesA_xh-v2.1.xml`` (the D'Kitty body, contact and actuator settings),
  ``robel-scenes/scenes/basic_scene.xml`` (floor), ``robel-scenes/dkitty/meshes/
  bulkhead_low_poly{,1..5}.stl`` (the six torso collision meshes: eight vertices each, written
  below as inline vertex lists), ``robel/robot_env.py`` (step: clip the action to [-1, 1],
  observation = concatenated keys, reward = sum of the reward terms),
  ``robel/components/robot/robot.py`` and ``group_config.py`` (normalized action -> joint target,
  clipped to the joint bounds and to a velocity bound of pi rad/s), ``robel/components/tracking/
  tracker.py`` and ``group_config.py`` (torso pose from the six root joints, Euler convention
  ``rxyz`` of transforms3d), ``robel/dkitty/base_env.py`` (upright terms, reset to a standing
  pose), ``robel/utils/math_utils.py`` (``calculate_cosine``).
* design-bench (brandontrabucco/design-bench, 2.0.20): ``design_bench/oracles/exact/
  ant_morphology_oracle.py`` and ``dkitty_morphology_oracle.py`` (clip each leg, build
  ``MorphingAntEnv`` / ``MorphingDKittyEnv(expose_design=True, normalize_design=True)``, reset,
  roll out ``rollout_horizon=100`` steps, stop early when ``done``, sum rewards in float32; the
  policy pickle ``<folder>/<robot>_oracle.pkl`` is a mapping of numpy arrays
  ``base_network.network.{0,2,4}.{weight,bias}``, weights stored (out, in); action =
  ``tanh`` of the first half of the last layer's output, i.e. the mean of a Gaussian policy whose
  second half is the log-std), ``design_bench/__init__.py`` (``max_percentile=40``, no
  subsampling), ``design_bench/datasets/continuous/*_morphology_dataset.py`` (file names).

The environments, as implemented here directly over ``mujoco.MjData`` (no gym, no ROBEL):

* **Ant** (``MorphingAntEnv``): timestep 0.01 s, RK4, 5 substeps per step (dt 0.05 s); each leg is
  three capsules (radius 0.08) with hip, thigh and ankle hinges (ranges in degrees) driven by
  motors of gear 150 and control range [-1, 1]. Reset: the model's initial pose (torso at height
  1.25, all joint angles 0), no noise. Observation (179): ``qpos[2:]`` (17), ``qvel`` (18), the
  external contact forces ``cfrc_ext`` clipped to [-1, 1] (14 bodies x 6 = 84), the normalized
  design (60). Reward: ``(x_after - x_before) / dt - 0.5 |a|^2 - 0.5e-3 |clip(cfrc_ext)|^2 + 1``
  with ``x`` the torso frame's x position read after each ``mj_step`` (as gym's
  ``get_body_com``); episodes end only on a non-finite state.
* **D'Kitty** (``MorphingDKittyEnv`` = ROBEL's ``DKittyWalkFixed`` edited by the design):
  timestep 0.0025 s, 40 substeps (dt 0.1 s); position actuators (kp 5) on the 12 leg joints.
  A normalized action a in [-1, 1]^12 becomes the joint target ``center + a * half_width`` of the
  design's joint bounds, clipped to those bounds and to at most pi rad/s * dt away from the
  current angle. Reset: root at the origin, leg angles 0 clipped to the joint bounds, target at
  (0, 2). Observation (108): root position (3), root Euler angles (3), leg angles (12), root
  velocity (3), root angular velocity (3), leg velocities (12), last action (12), upright (the z
  component of the torso's z axis), heading (cosine between the torso's y axis and the direction
  to the target), target minus root xy (2), normalized design (56). Reward: ``(upright - 0.9) /
  0.1 - 500 [upright < 0.9] - 4 d + 2 (heading - 0.9) / 0.1 + 5 ([d < 0.5] + [heading > 0.9]) +
  10 [d < 0.5][heading > 0.9]`` with d the distance to the target; the episode ends when
  ``upright < 0.9`` (that step's -500 included) or the observation is not finite.

Where this differs from design-bench:

* Engine: the ``mujoco`` package (MuJoCo 3/4 bindings) instead of mujoco-py on MuJoCo 2.0
  (ROBEL's requirement) and gym < 0.26. The same body, options and control give a close but not
  bit-identical trajectory, so a design's return can differ somewhat from the y in design-bench's
  file (which is still used to normalize scores, as in design-bench).
* Ant contact forces: MuJoCo >= 2.0 fills ``cfrc_ext`` only when a sensor needs it (gym issue
  #1541), so under mujoco-py 2.x the 84 contact-force inputs of the policy and the contact cost
  are zero. ROBEL, which the D'Kitty oracle needs, requires MuJoCo 2.00, so design-bench most
  likely ran that way; this module keeps them zero by default (``contact_forces=False``).
  ``contact_forces=True`` computes them after each step instead (mujoco-py 1.50 behaviour, as
  gymnasium does). Which one the pretrained policy saw cannot be checked without its file: with
  the real files, score some dataset rows both ways and keep the setting that reproduces y.
* Models keep only what changes the physics: the visual meshes (mass 0, no collisions, excluded
  from inertia), cameras, lights, sites and ROBEL's joint sensors are left out; the D'Kitty
  height field (all zero, 5 mm below the floor plane in ``DKittyWalkFixed``) is left out; the
  torso collision meshes are inline vertex lists of the same eight vertices as the STL files;
  MuJoCo 3+ sizes its memory itself (``njmax`` and ``nconmax`` are still given).
* morphing-agents builds the D'Kitty thigh joint and actuator range from ``thigh_center +-
  hip_range`` while the action scaling uses ``thigh_center +- thigh_range``; kept as is.
* If the simulation blows up, MuJoCo resets the state (its auto-reset; ROBEL only logged the
  warning) and the episode goes on; a non-finite reward would end the episode without counting it.
The real ``ant_oracle.pkl`` / ``dkitty_oracle.pkl`` were not available where this was written, so
the returns of the real policy were not compared with design-bench's y values. What was checked:
models build and step for random in-bound designs, returns are deterministic, and the observation
sizes (179, 108) are those of the environments above (the input size of the policy's first layer
must match; :func:`load_policy` checks it).
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import numpy as np

from matchopt.errors import MatchoptError

INSTALL_HINT = "pip install 'matchopt[mujoco]'"
N_LEGS = 4
#: Steps of one rollout (design-bench's ``rollout_horizon``).
ROLLOUT_STEPS = 100
# The oracle scores serially unless told otherwise (matchopt.tasks.rollouts.DEFAULT_WORKERS).
# Measured on one loaded core: an Ant rollout takes about 0.1 s (128 random designs: 14 s), a full
# 100-step D'Kitty rollout about 0.6 s (128 random designs, most of which fall early: 34 s).

ANT_LEG_FIELDS = (
    "x", "y", "z", "a", "b", "c", "hip_center", "hip_range", "thigh_center", "thigh_range",
    "ankle_center", "ankle_range", "hip_size", "thigh_size", "ankle_size",
)  # fmt: skip
# Angles in degrees (the Ant model uses angle="degree"); lengths in meters.
ANT_LEG_LOW = np.array(
    [-0.1, -0.1, -0.1, -180, -180, -180, -180, 5, -180, 5, -180, 5, 0.1, 0.1, 0.2], dtype=np.float64
)
ANT_LEG_HIGH = np.array(
    [0.1, 0.1, 0.1, 180, 180, 180, 180, 45, 180, 45, 180, 45, 0.4, 0.4, 0.8], dtype=np.float64
)

DKITTY_LEG_FIELDS = (
    "x", "y", "z", "a", "b", "c", "hip_center", "hip_range", "thigh_center", "thigh_range",
    "ankle_center", "ankle_range", "thigh_size", "ankle_size",
)  # fmt: skip
_PI = np.pi
# Angles in radians; z is fixed at 0 (low == high).
DKITTY_LEG_LOW = np.array(
    [-0.09, -0.122, 0, -_PI, -_PI, -_PI, -_PI, _PI / 35, -_PI, _PI / 35, -_PI, _PI / 35]
    + [0.0965, 0.0945],
    dtype=np.float64,
)
DKITTY_LEG_HIGH = np.array(
    [0.09, 0.122, 0, _PI, _PI, _PI, _PI, _PI / 4, _PI, _PI / 4, _PI, _PI / 2, 0.1365, 0.1345],
    dtype=np.float64,
)

#: Keys of the policy pickle, in order W0, b0, W1, b1, W2, b2 (PyTorch layout: W is out x in).
POLICY_KEYS = tuple(
    f"base_network.network.{layer}.{kind}" for layer in (0, 2, 4) for kind in ("weight", "bias")
)


def require_mujoco() -> Any:
    """Import and return the ``mujoco`` module; a :class:`MatchoptError` names the install command
    when it is missing."""
    try:
        return importlib.import_module("mujoco")
    except ImportError:
        raise MatchoptError(
            f"the Ant and D'Kitty morphology tasks need the mujoco package, which is not "
            f"installed: {INSTALL_HINT}"
        ) from None


def clip_legs(design: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """One design (4 * fields,) as legs (4 x fields), each clipped to ``[low, high]`` (fields,)."""
    design = np.asarray(design, dtype=np.float64).reshape(-1)
    if design.size != N_LEGS * low.size:
        raise MatchoptError(
            f"a design has {N_LEGS} legs of {low.size} values ({N_LEGS * low.size} in all), "
            f"got {design.size} values"
        )
    return np.clip(design.reshape(N_LEGS, low.size), low, high)


def normalize_legs(legs: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Legs (4 x fields) mapped to [-1, 1] by the bounds, flattened (4 * fields,); a field whose
    bounds are equal maps to -1 (morphing-agents divides by ``max(high - low, 1e-5)``)."""
    return (2 * (legs - low) / np.maximum(high - low, 1e-5) - 1.0).reshape(-1)


def _num(value: float) -> str:
    # repr of a Python float round-trips exactly, so MuJoCo parses the very same double.
    return repr(float(value))


def _nums(*values: float) -> str:
    return " ".join(_num(v) for v in values)


# ----------------------------------------------------------------------------------------------
# Ant
# ----------------------------------------------------------------------------------------------

_ANT_XML = """<mujoco model="morphing_ant">
  <compiler angle="degree" inertiafromgeom="true"/>
  <option integrator="RK4" timestep="0.01"/>
  <default>
    <joint armature="1" damping="1" limited="true"/>
    <geom conaffinity="0" condim="3" density="5.0" friction="1 0.5 0.5" margin="0.01"/>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="40 40 40" conaffinity="1" condim="3"/>
    <body name="torso" pos="0 0 1.25">
      <geom name="torso_geom" type="sphere" size="0.25"/>
      <joint name="root" type="free" armature="0" damping="0" limited="false" margin="0.01"/>
{legs}
    </body>
  </worldbody>
  <actuator>
{motors}
  </actuator>
</mujoco>
"""

_ANT_LEG_XML = """      <body name="leg_{i}_body" pos="{pos}" euler="{euler}">
        <geom name="leg_{i}_geom" type="capsule" size="0.08" fromto="0 0 0 {hip_end} 0"/>
        <body name="thigh_{i}_body" pos="{hip_end} 0">
          <joint name="hip_{i}_joint" type="hinge" axis="-1 1 0" range="{hip_range}"/>
          <joint name="thigh_{i}_joint" type="hinge" axis="0 0 1" range="{thigh_range}"/>
          <geom name="thigh_{i}_geom" type="capsule" size="0.08" fromto="0 0 0 {thigh_end} 0"/>
          <body name="ankle_{i}_body" pos="{thigh_end} 0">
            <joint name="ankle_{i}_joint" type="hinge" axis="-1 1 0" range="{ankle_range}"/>
            <geom name="ankle_{i}_geom" type="capsule" size="0.08" fromto="0 0 0 {ankle_end} 0"/>
          </body>
        </body>
      </body>"""


def ant_xml(legs: np.ndarray) -> str:
    """MJCF of the Ant with legs (4 x 15, in bounds): morphing-agents' ``AntEnv`` body."""
    parts, motors = [], []
    for i, leg in enumerate(legs):
        f = dict(zip(ANT_LEG_FIELDS, (float(v) for v in leg)))
        parts.append(
            _ANT_LEG_XML.format(
                i=i,
                pos=_nums(f["x"], f["y"], f["z"]),
                euler=_nums(f["a"], f["b"], f["c"]),
                hip_end=_nums(f["hip_size"], f["hip_size"]),
                thigh_end=_nums(f["thigh_size"], f["thigh_size"]),
                ankle_end=_nums(f["ankle_size"], f["ankle_size"]),
                hip_range=_nums(f["hip_center"] - f["hip_range"], f["hip_center"] + f["hip_range"]),
                thigh_range=_nums(
                    f["thigh_center"] - f["thigh_range"], f["thigh_center"] + f["thigh_range"]
                ),
                ankle_range=_nums(
                    f["ankle_center"] - f["ankle_range"], f["ankle_center"] + f["ankle_range"]
                ),
            )
        )
        for joint in ("hip", "thigh", "ankle"):
            motors.append(
                f'    <motor joint="{joint}_{i}_joint" ctrllimited="true" ctrlrange="-1 1" '
                f'gear="150"/>'
            )
    return _ANT_XML.format(legs="\n".join(parts), motors="\n".join(motors))


class MorphologyEnv:
    """A robot of one design in MuJoCo, with a minimal ``reset`` / ``step`` interface.

    Args:
        design: one design (4 * fields,); each leg is clipped to the leg bounds first.

    Attributes:
        legs: the clipped legs (4 x fields).
        model, data: the ``mujoco.MjModel`` and ``mujoco.MjData``.
    """

    leg_low: ClassVar[np.ndarray]
    leg_high: ClassVar[np.ndarray]
    #: Size of the observation vector.
    obs_dim: ClassVar[int]
    #: Size of the action vector (3 joints per leg).
    action_dim: ClassVar[int] = 3 * N_LEGS
    #: MuJoCo steps per environment step.
    frame_skip: ClassVar[int]

    def __init__(self, design: np.ndarray):
        self._mujoco = require_mujoco()
        self.legs = clip_legs(design, self.leg_low, self.leg_high)
        self.model = self._mujoco.MjModel.from_xml_string(self.xml(self.legs))
        self.data = self._mujoco.MjData(self.model)
        self.dt = self.model.opt.timestep * self.frame_skip
        self._design_obs = normalize_legs(self.legs, self.leg_low, self.leg_high)

    @staticmethod
    def xml(legs: np.ndarray) -> str:
        """MJCF text of the robot with these legs."""
        raise NotImplementedError

    def reset(self) -> np.ndarray:
        """Put the robot in its initial state; return the observation (obs_dim,)."""
        raise NotImplementedError

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool]:
        """Apply an action (action_dim,); return (observation, reward, done)."""
        raise NotImplementedError

    def _simulate(self) -> None:
        for _ in range(self.frame_skip):
            self._mujoco.mj_step(self.model, self.data)


class AntEnv(MorphologyEnv):
    """morphing-agents' ``AntEnv`` (expose_design=True, normalize_design=True).

    Args:
        design: one design (60,).
        contact_forces: compute ``cfrc_ext`` after each step (MuJoCo 1.50 behaviour) instead of
            leaving it zero (MuJoCo >= 2.0 without force sensors); see the module notes.
    """

    leg_low, leg_high = ANT_LEG_LOW, ANT_LEG_HIGH
    obs_dim = 17 + 18 + 14 * 6 + N_LEGS * len(ANT_LEG_FIELDS)  # 179
    frame_skip = 5

    def __init__(self, design: np.ndarray, contact_forces: bool = False):
        super().__init__(design)
        self.contact_forces = contact_forces
        self._torso = self.model.body("torso").id

    xml = staticmethod(ant_xml)

    def _obs(self) -> np.ndarray:
        d = self.data
        forces = np.clip(d.cfrc_ext, -1, 1).ravel()
        return np.concatenate([d.qpos[2:], d.qvel, forces, self._design_obs])

    def reset(self) -> np.ndarray:
        self._mujoco.mj_resetData(self.model, self.data)
        self._mujoco.mj_forward(self.model, self.data)
        if self.contact_forces:
            self._mujoco.mj_rnePostConstraint(self.model, self.data)
        else:
            # mj_forward leaves cfrc_ext at zero too; say so rather than rely on it.
            self.data.cfrc_ext[:] = 0.0
        return self._obs()

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool]:
        action = np.asarray(action, dtype=np.float64)
        x_before = float(self.data.xpos[self._torso, 0])
        self.data.ctrl[:] = action
        self._simulate()
        if self.contact_forces:
            self._mujoco.mj_rnePostConstraint(self.model, self.data)
        x_after = float(self.data.xpos[self._torso, 0])
        forward = (x_after - x_before) / self.dt
        ctrl_cost = 0.5 * float(np.square(action).sum())
        contact_cost = 0.5e-3 * float(np.square(np.clip(self.data.cfrc_ext, -1, 1)).sum())
        reward = forward - ctrl_cost - contact_cost + 1.0
        state_ok = np.isfinite(self.data.qpos).all() and np.isfinite(self.data.qvel).all()
        return self._obs(), reward, not state_ok


# ----------------------------------------------------------------------------------------------
# D'Kitty
# ----------------------------------------------------------------------------------------------

# Torso collision meshes of ROBEL's D'Kitty (robel-scenes dkitty/meshes/bulkhead_low_poly*.stl):
# their eight vertices (float32 values of the STL files) and the masses chainA_xh-v2.1.xml gives.
_DKITTY_TORSO_MESHES = (
    (
        0.038,
        "0.062442467 -0.10598844 0.017618868 0.062335484 -0.13791662 0.017618868 "
        "0.062335484 -0.13791662 -0.017621377 0.062442467 -0.10598844 -0.017621377 "
        "-0.062335514 -0.1379166 0.017618868 -0.062335514 -0.1379166 -0.017621377 "
        "-0.062442478 -0.10598843 0.017618868 -0.062442478 -0.10598843 -0.017621377",
    ),
    (
        0.085,
        "0.044275615 -0.053331602 0.017618857 0.061666217 -0.105820425 0.017618857 "
        "0.061666217 -0.105820425 -0.017621366 0.044275615 -0.053331602 -0.017621366 "
        "-0.061666235 -0.10582041 0.017618857 -0.061666235 -0.10582041 -0.017621366 "
        "-0.044275615 -0.053331587 0.017618857 -0.044275615 -0.053331587 -0.017621366",
    ),
    (
        0.065,
        "0.039430376 0.0011132256 0.017618867 0.04458495 -0.05353843 0.017618867 "
        "0.04458495 -0.05353843 -0.017621374 0.039430376 0.0011132256 -0.017621374 "
        "-0.044584956 -0.053538416 0.017618867 -0.044584956 -0.053538416 -0.017621374 "
        "-0.039430376 0.0011132375 0.017618867 -0.039430376 0.0011132375 -0.017621374",
    ),
    (
        0.065,
        "-0.039430376 -0.0011132315 0.017618818 -0.044584956 0.053538423 0.017618818 "
        "-0.044584956 0.053538423 -0.017621348 -0.039430376 -0.0011132315 -0.017621348 "
        "0.04458495 0.053538423 0.017618818 0.04458495 0.053538423 -0.017621348 "
        "0.039430376 -0.0011132315 0.017618818 0.039430376 -0.0011132315 -0.017621348",
    ),
    (
        0.085,
        "-0.044275615 0.053331554 0.017618867 -0.061666228 0.10582037 0.017618867 "
        "-0.061666228 0.10582037 -0.017621366 -0.044275615 0.053331554 -0.017621366 "
        "0.061666228 0.10582037 0.017618867 0.061666228 0.10582037 -0.017621366 "
        "0.044275615 0.053331554 0.017618867 0.044275615 0.053331554 -0.017621366",
    ),
    (
        0.038,
        "-0.06244247 0.10598838 0.017618867 -0.0623355 0.13791656 0.017618867 "
        "-0.0623355 0.13791656 -0.017621366 -0.06244247 0.10598838 -0.017621366 "
        "0.0623355 0.13791656 0.017618867 0.0623355 0.13791656 -0.017621366 "
        "0.06244247 0.10598838 0.017618867 0.06244247 0.10598838 -0.017621366",
    ),
)

_DKITTY_XML = """<mujoco model="morphing_dkitty">
  <compiler angle="radian" inertiafromgeom="auto" inertiagrouprange="4 5"/>
  <option timestep="0.0025"/>
  <size njmax="2000" nconmax="400"/>
  <default>
    <default class="dkitty">
      <joint limited="true" damping="1" armature="0.001"/>
      <geom contype="1" conaffinity="1" condim="4" group="4" margin="0.001" solref=".02 1"
            solimp=".8 .9 .01"/>
      <position ctrllimited="true" kp="5"/>
    </default>
  </default>
  <asset>
{meshes}
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1" contype="1" conaffinity="1" condim="3"/>
    <body name="kitty_frame" pos="0 0 .3">
      <geom type="sphere" size="0.010" mass="0.010" group="4"/>
      <joint name="Tx" type="slide" axis="1 0 0" limited="true" range="-10 10"/>
      <joint name="Ty" type="slide" axis="0 1 0" limited="true" range="-10 10"/>
      <joint name="Tz" type="slide" axis="0 0 1" limited="true" range="-2 2"/>
      <joint name="Rx" type="hinge" axis="1 0 0" limited="true" range="-3.14 3.14"/>
      <joint name="Ry" type="hinge" axis="0 1 0" limited="true" range="-3.14 3.14"/>
      <joint name="Rz" type="hinge" axis="0 0 1" limited="true" range="-3.14 3.14"/>
      <body name="dkitty" childclass="dkitty">
{torso}
        <geom type="box" pos="0.078 -0.122 0" size="0.024 0.018 0.015" mass=".086"/>
        <geom type="box" pos="-0.078 -0.122 0" size="0.024 0.018 0.015" mass=".086"/>
        <geom type="box" pos="-0.078 0.122 0" size="0.024 0.018 0.015" mass=".086"/>
        <geom type="box" pos="0.078 0.122 0" size="0.024 0.018 0.015" mass=".086"/>
{legs}
      </body>
    </body>
  </worldbody>
  <actuator>
{actuators}
  </actuator>
</mujoco>
"""

# One leg of chainA_xh-v2.1.xml (collision geoms only; the four legs are alike).
_DKITTY_LEG_XML = """        <body name="{leg}0" pos="{pos}" euler="{euler}">
          <joint name="{leg}_hip" axis="0 1 0" range="{hip_range}"/>
          <geom type="box" euler="0 0 1.57" pos="0 -0.02 0.026" size="0.0015 0.013 0.029"
                mass=".005"/>
          <geom type="box" euler="0 0 1.57" pos="0 0.02 0.026" size="0.0015 0.013 0.029"
                mass=".005"/>
          <geom type="box" euler="0 0 1.57" pos="0 0 0.051" size="0.019 0.016 0.004" mass=".008"/>
          <geom type="box" pos="0 0 0.061" size="0.019 0.013 0.006" mass=".005"/>
          <geom type="box" pos="0 0 0.084" size="0.018 0.015 0.024" mass=".095"/>
          <body name="{leg}1" pos="0 0 {thigh_size}">
            <joint name="{leg}_thigh" axis="1 0 0" range="{thigh_range}"/>
            <geom type="box" pos="0 0 0.051" size="0.019 0.016 0.004" mass=".008"/>
            <geom type="box" pos="-0.02 0 0.026" size="0.0015 0.013 0.029" mass=".005"/>
            <geom type="box" pos="0.02 0 0.026" size="0.0015 0.013 0.029" mass=".005"/>
            <geom type="box" pos="0 0 0.084" size="0.018 0.015 0.023" mass=".095"/>
            <geom type="box" pos="0 0 0.06" size="0.019 0.013 0.006" mass=".005"/>
            <body name="{leg}2" pos="0 0 {ankle_size}">
              <joint name="{leg}_ankle" axis="1 0 0" range="{ankle_range}"/>
              <geom type="box" pos="0.02 0 0.026" size="0.0015 0.013 0.029" mass=".005"/>
              <geom type="box" pos="-0.02 0 0.026" size="0.0015 0.013 0.029" mass=".005"/>
              <geom type="box" pos="0 0 0.052" size="0.019 0.016 0.004" mass=".008"/>
              <geom type="box" pos="0 0 0.058" size="0.025 0.014 0.003" mass=".002"/>
              <geom type="capsule" pos="0 0 0.082" size="0.0103 0.0187" mass=".02"/>
            </body>
          </body>
        </body>"""

#: Leg names in design order (front right, front left, back left, back right), as ROBEL's A:FR1x,
#: A:FL2x, A:BL3x, A:BR4x.
DKITTY_LEGS = ("FR", "FL", "BL", "BR")


def _dkitty_ranges(leg: dict[str, float]) -> tuple[tuple[float, float], ...]:
    """(low, high) of the hip, thigh and ankle joints in the MODEL (thigh uses hip_range, as
    morphing-agents writes it)."""
    return (
        (leg["hip_center"] - leg["hip_range"], leg["hip_center"] + leg["hip_range"]),
        (leg["thigh_center"] - leg["hip_range"], leg["thigh_center"] + leg["hip_range"]),
        (leg["ankle_center"] - leg["ankle_range"], leg["ankle_center"] + leg["ankle_range"]),
    )


def dkitty_xml(legs: np.ndarray) -> str:
    """MJCF of the D'Kitty with legs (4 x 14, in bounds): ROBEL's walk model as
    morphing-agents' ``DKittyEnv`` edits it (collision geometry only)."""
    meshes = "\n".join(
        f'    <mesh name="bulkhead_{k}" vertex="{vertices}"/>'
        for k, (_, vertices) in enumerate(_DKITTY_TORSO_MESHES)
    )
    torso = "\n".join(
        f'        <geom type="mesh" mesh="bulkhead_{k}" mass="{mass}"/>'
        for k, (mass, _) in enumerate(_DKITTY_TORSO_MESHES)
    )
    parts, actuators = [], []
    for name, values in zip(DKITTY_LEGS, legs):
        f = dict(zip(DKITTY_LEG_FIELDS, (float(v) for v in values)))
        hip, thigh, ankle = _dkitty_ranges(f)
        parts.append(
            _DKITTY_LEG_XML.format(
                leg=name,
                pos=_nums(f["x"], f["y"], f["z"]),
                euler=_nums(f["a"], f["b"], f["c"]),
                thigh_size=_num(f["thigh_size"]),
                ankle_size=_num(f["ankle_size"]),
                hip_range=_nums(*hip),
                thigh_range=_nums(*thigh),
                ankle_range=_nums(*ankle),
            )
        )
        for joint, bounds in zip(("hip", "thigh", "ankle"), (hip, thigh, ankle)):
            actuators.append(
                f'    <position joint="{name}_{joint}" class="dkitty" '
                f'ctrlrange="{_nums(*bounds)}"/>'
            )
    return _DKITTY_XML.format(
        meshes=meshes, torso=torso, legs="\n".join(parts), actuators="\n".join(actuators)
    )


def euler_rxyz_to_matrix(angles: np.ndarray) -> np.ndarray:
    """Rotation (3 x 3) of rotating-axes x-y-z Euler angles (a, b, c): Rx(a) Ry(b) Rz(c)."""
    a, b, c = (float(v) for v in angles)
    ca, sa, cb, sb, cc, sc = np.cos(a), np.sin(a), np.cos(b), np.sin(b), np.cos(c), np.sin(c)
    return np.array(
        [
            [cb * cc, -cb * sc, sb],
            [ca * sc + sa * sb * cc, ca * cc - sa * sb * sc, -sa * cb],
            [sa * sc - ca * sb * cc, sa * cc + ca * sb * sc, ca * cb],
        ]
    )


def matrix_to_euler_rxyz(rot: np.ndarray) -> np.ndarray:
    """Rotating-axes x-y-z Euler angles (3,) of a rotation, with b in [-pi/2, pi/2] (the branch
    transforms3d's ``mat2euler(axes="rxyz")`` returns; a = 0 at gimbal lock)."""
    cy = np.hypot(rot[2, 2], rot[1, 2])
    if cy > 4 * np.finfo(float).eps:
        return np.array(
            [np.arctan2(-rot[1, 2], rot[2, 2]), np.arctan2(rot[0, 2], cy),
             np.arctan2(-rot[0, 1], rot[0, 0])]
        )  # fmt: skip
    return np.array([0.0, np.arctan2(rot[0, 2], cy), np.arctan2(rot[1, 0], rot[1, 1])])


class DKittyEnv(MorphologyEnv):
    """morphing-agents' ``MorphingDKittyEnv`` (ROBEL ``DKittyWalkFixed``, design exposed and
    normalized), without hardware, noise or rendering."""

    leg_low, leg_high = DKITTY_LEG_LOW, DKITTY_LEG_HIGH
    obs_dim = 3 + 3 + 12 + 3 + 3 + 12 + 12 + 1 + 1 + 2 + N_LEGS * len(DKITTY_LEG_FIELDS)  # 108
    frame_skip = 40
    #: Walk target (x, y): 2 m along the initial heading (+y), as DKittyWalkFixed.
    target_xy = 2.0 * np.array([np.cos(np.pi / 2), np.sin(np.pi / 2)])
    upright_threshold = 0.9
    #: ROBEL's bound on commanded joint speed (rad/s), float32 as in its group config.
    max_joint_speed = np.float32(np.pi)

    def __init__(self, design: np.ndarray):
        super().__init__(design)
        # The robot group's joint bounds (float32 as ROBEL stores them): the design's center +-
        # range for all three joints (unlike the model's thigh range, see _dkitty_ranges).
        bounds = []
        for values in self.legs:
            f = dict(zip(DKITTY_LEG_FIELDS, values))
            for joint in ("hip", "thigh", "ankle"):
                center, half = f[f"{joint}_center"], f[f"{joint}_range"]
                bounds.append((center - half, center + half))
        self.joint_bounds = np.array(bounds, dtype=np.float32)
        self._center = self.joint_bounds.mean(axis=1)
        self._half_width = 0.5 * (self.joint_bounds[:, 1] - self.joint_bounds[:, 0])
        self._last_action = np.zeros(self.action_dim, dtype=np.float32)

    xml = staticmethod(dkitty_xml)

    def _obs_terms(self) -> tuple[np.ndarray, float, float, np.ndarray]:
        """(observation, upright, heading, target error) of the current state."""
        qpos, qvel = self.data.qpos, self.data.qvel
        rot = euler_rxyz_to_matrix(qpos[3:6])
        upright = float(rot[2, 2])
        error = self.target_xy - qpos[0:2]
        # Cosine between the torso's y axis (xy) and the direction to the target (ROBEL's
        # calculate_cosine: a zero norm product divides by 1).
        heading_axis = rot[:2, 1]
        norms = float(np.linalg.norm(heading_axis) * np.linalg.norm(error))
        heading = float(heading_axis @ error) / (norms if norms != 0 else 1.0)
        obs = np.concatenate(
            [
                qpos[0:3],
                matrix_to_euler_rxyz(rot),
                qpos[6:18],
                qvel[0:3],
                qvel[3:6],
                qvel[6:18],
                self._last_action,
                [upright, heading],
                error,
                self._design_obs,
            ]
        )
        return obs, upright, heading, error

    def reset(self) -> np.ndarray:
        mj = self._mujoco
        mj.mj_resetData(self.model, self.data)
        mj.mj_forward(self.model, self.data)
        # Standing pose: leg angles 0 clipped to the joint bounds; root at the origin.
        self.data.qpos[6:18] = np.clip(0.0, self.joint_bounds[:, 0], self.joint_bounds[:, 1])
        self.data.qvel[6:18] = 0.0
        self.data.qpos[0:6] = 0.0
        mj.mj_forward(self.model, self.data)
        self._last_action = np.zeros(self.action_dim, dtype=np.float32)
        return self._obs_terms()[0]

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool]:
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        target = self._center + action * self._half_width
        target = np.clip(target, self.joint_bounds[:, 0], self.joint_bounds[:, 1])
        current = self.data.qpos[6:18]
        speed = np.clip((target - current) / self.dt, -self.max_joint_speed, self.max_joint_speed)
        self.data.ctrl[:] = current + speed * self.dt
        self._simulate()
        self._last_action = action
        obs, upright, heading, error = self._obs_terms()
        distance = float(np.linalg.norm(error))
        threshold = self.upright_threshold
        near, aligned = distance < 0.5, heading > 0.9
        reward = (
            (upright - threshold) / (1 - threshold)
            - 500.0 * (upright < threshold)
            - 4.0 * distance
            + 2.0 * (heading - 0.9) / 0.1
            + 5.0 * (near + aligned)
            + 10.0 * (near and aligned)
        )
        done = upright < threshold or not np.isfinite(obs).all()
        return obs, float(reward), bool(done)
