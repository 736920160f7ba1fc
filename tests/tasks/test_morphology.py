"""Ant and D'Kitty morphology tasks: models, policy file, design-bench-layout fixtures."""

import collections
import pickle
import sys

import numpy as np
import pytest

pytest.importorskip("mujoco")

from task_fixtures import (  # noqa: E402
    random_morphologies,
    random_policy_weights,
    write_morphology,
    write_policy,
)

from matchopt.errors import MatchoptError  # noqa: E402
from matchopt.tasks import TASKS, load_task  # noqa: E402
from matchopt.tasks import morphology as M  # noqa: E402

ROBOTS = [("ant", M.AntEnv, M.AntMorphology), ("dkitty", M.DKittyEnv, M.DKittyMorphology)]
IDS = [name for name, _, _ in ROBOTS]


random_weights = random_policy_weights
random_designs = random_morphologies
write_fixture = write_morphology


def test_tasks_are_registered():
    assert TASKS["ant"] is M.AntMorphology and TASKS["dkitty"] is M.DKittyMorphology
    assert M.AntMorphology.space.shape == (60,) and M.DKittyMorphology.space.shape == (56,)


def test_observation_sizes_are_those_of_the_design_bench_environments():
    # Ant: qpos[2:] 17 + qvel 18 + cfrc_ext 14 bodies x 6 + design 60; D'Kitty: 52 state + 56.
    assert M.AntEnv.obs_dim == 179 and M.DKittyEnv.obs_dim == 108


@pytest.mark.parametrize("name, env_cls, task_cls", ROBOTS, ids=IDS)
def test_random_designs_build_and_step(name, env_cls, task_cls):
    rng = np.random.default_rng(1)
    for design in random_designs(rng, env_cls, 3):
        env = env_cls(design)
        assert env.model.nu == env_cls.action_dim == 12
        obs = env.reset()
        assert obs.shape == (env_cls.obs_dim,) and np.isfinite(obs).all()
        np.testing.assert_allclose(
            obs[-design.size :], M.normalize_legs(env.legs, env.leg_low, env.leg_high)
        )
        assert np.abs(obs[-design.size :]).max() <= 1.0
        start = env.data.qpos.copy()
        for _ in range(15):
            obs, reward, done = env.step(rng.uniform(-1, 1, size=12))
            assert obs.shape == (env_cls.obs_dim,) and np.isfinite(obs).all()
            assert np.isfinite(reward)
            if done:
                break
        assert not np.allclose(env.data.qpos, start)


@pytest.mark.parametrize("name, env_cls, task_cls", ROBOTS, ids=IDS)
def test_out_of_bound_designs_are_clipped(name, env_cls, task_cls):
    rng = np.random.default_rng(2)
    low, high = np.tile(env_cls.leg_low, 4), np.tile(env_cls.leg_high, 4)
    wild = rng.uniform(low - 2 * (high - low) - 1, high + 2 * (high - low) + 1)
    clipped = np.clip(wild, low, high)
    assert not np.allclose(wild, clipped)
    env, ref = env_cls(wild), env_cls(clipped)
    np.testing.assert_array_equal(env.legs.reshape(-1), clipped)
    for field in ("body_pos", "body_quat", "jnt_range", "actuator_ctrlrange", "body_mass"):
        np.testing.assert_array_equal(getattr(env.model, field), getattr(ref.model, field))
    policy = M.policy_from_mapping(random_weights(rng, env_cls.obs_dim), env_cls.obs_dim, 12)
    returns = M.score_designs(name, np.stack([wild, clipped]), policy, steps=20)
    assert returns[0] == returns[1]
    with pytest.raises(MatchoptError, match="4 legs"):
        env_cls(wild[:-1])


def test_ant_model_follows_the_design():
    rng = np.random.default_rng(3)
    design = random_designs(rng, M.AntEnv, 1)[0]
    env = M.AntEnv(design)
    leg = dict(zip(M.ANT_LEG_FIELDS, env.legs[2]))
    model = env.model
    np.testing.assert_allclose(model.body("leg_2_body").pos, [leg["x"], leg["y"], leg["z"]])
    np.testing.assert_allclose(
        model.body("thigh_2_body").pos, [leg["hip_size"], leg["hip_size"], 0.0]
    )
    np.testing.assert_allclose(
        model.body("ankle_2_body").pos, [leg["thigh_size"], leg["thigh_size"], 0.0]
    )
    lo, hi = leg["ankle_center"] - leg["ankle_range"], leg["ankle_center"] + leg["ankle_range"]
    np.testing.assert_allclose(model.joint("ankle_2_joint").range, np.deg2rad([lo, hi]))
    np.testing.assert_allclose(model.actuator_gear[:, 0], 150.0)


def test_ant_contact_forces_are_zero_unless_asked_for():
    rng = np.random.default_rng(8)
    design = random_designs(rng, M.AntEnv, 1)[0]
    forces = slice(35, 35 + 84)  # after qpos[2:] (17) and qvel (18)
    actions = rng.uniform(-1, 1, size=(30, 12))
    seen = {}
    for contact_forces in (False, True):
        env = M.AntEnv(design, contact_forces=contact_forces)
        env.reset()
        total = 0.0
        for action in actions:
            obs, _, _ = env.step(action)
            total += np.abs(obs[forces]).sum()
        seen[contact_forces] = total
    assert seen[False] == 0.0 and seen[True] > 0.0


def test_dkitty_model_follows_the_design():
    rng = np.random.default_rng(4)
    env = M.DKittyEnv(random_designs(rng, M.DKittyEnv, 1)[0])
    leg = dict(zip(M.DKITTY_LEG_FIELDS, env.legs[1]))  # front left
    model = env.model
    np.testing.assert_allclose(model.body("FL0").pos, [leg["x"], leg["y"], leg["z"]])
    np.testing.assert_allclose(model.body("FL1").pos, [0, 0, leg["thigh_size"]])
    np.testing.assert_allclose(model.body("FL2").pos, [0, 0, leg["ankle_size"]])
    hip = [leg["hip_center"] - leg["hip_range"], leg["hip_center"] + leg["hip_range"]]
    # morphing-agents writes the thigh's model range with hip_range (kept on purpose).
    thigh = [leg["thigh_center"] - leg["hip_range"], leg["thigh_center"] + leg["hip_range"]]
    np.testing.assert_allclose(model.joint("FL_hip").range, hip)
    np.testing.assert_allclose(model.joint("FL_thigh").range, thigh)
    np.testing.assert_allclose(model.actuator_ctrlrange[4], thigh)
    # ...while the action is scaled by thigh_range (ROBEL's robot group).
    np.testing.assert_allclose(
        env.joint_bounds[4],
        [leg["thigh_center"] - leg["thigh_range"], leg["thigh_center"] + leg["thigh_range"]],
        rtol=1e-6,
    )
    # Joint order in qpos: 6 root joints, then FR, FL, BL, BR (hip, thigh, ankle).
    assert model.joint("FL_thigh").qposadr[0] == 6 + 4
    # The total mass is ROBEL's collision masses: the torso's plus four legs'.
    leg_mass = 0.005 * 2 + 0.008 + 0.005 + 0.095 + 0.008 + 0.005 * 2 + 0.095 + 0.005
    leg_mass += 0.005 * 2 + 0.008 + 0.002 + 0.02
    torso_mass = 0.038 * 2 + 0.085 * 2 + 0.065 * 2 + 0.086 * 4
    np.testing.assert_allclose(model.body_mass.sum(), 0.01 + torso_mass + 4 * leg_mass)


def test_dkitty_reward_of_a_standing_start():
    # The default D'Kitty of morphing-agents: the torso faces the target 2 m ahead.
    pi = np.pi
    legs = []
    for x, y, b, hip in [
        (0.09, 0.122, -3.14, -0.1105),
        (-0.09, 0.122, 3.14, 0.1105),
        (-0.09, -0.122, 3.14, 0.1105),
        (0.09, -0.122, -3.14, -0.1105),
    ]:
        legs += [x, y, 0, 0, b, 0, hip, 0.3895, pi / 4, pi / 4, -1.0, 1.0, 0.0965, 0.0945]
    env = M.DKittyEnv(np.array(legs))
    obs = env.reset()
    np.testing.assert_allclose(obs[:6], 0.0)
    assert obs[48] == pytest.approx(1.0) and obs[49] == pytest.approx(1.0)  # upright, heading
    np.testing.assert_allclose(obs[50:52], [0.0, 2.0], atol=1e-12)
    _, reward, done = env.step(np.zeros(12))
    upright, heading, error = obs_terms = env._obs_terms()[1:]
    assert not done and upright > 0.9
    expected = (upright - 0.9) / 0.1 - 4 * np.linalg.norm(error) + 2 * (heading - 0.9) / 0.1
    expected += 5 * ((np.linalg.norm(error) < 0.5) + (heading > 0.9))
    assert reward == pytest.approx(expected), obs_terms


def test_euler_convention_matches_the_root_joints():
    env = M.DKittyEnv(random_designs(np.random.default_rng(5), M.DKittyEnv, 1)[0])
    env.reset()
    import mujoco

    angles = np.array([0.3, -1.2, 2.0])
    env.data.qpos[3:6] = angles
    mujoco.mj_forward(env.model, env.data)
    rot = env.data.body("kitty_frame").xmat.reshape(3, 3)
    np.testing.assert_allclose(M.euler_rxyz_to_matrix(angles), rot, atol=1e-12)
    np.testing.assert_allclose(M.matrix_to_euler_rxyz(rot), angles, atol=1e-12)


def test_policy_pickle_is_read_and_computes_the_mean_action(tmp_path):
    rng = np.random.default_rng(6)
    weights = random_weights(rng, 179)
    path = tmp_path / "ant_oracle.pkl"
    write_policy(path, weights)
    assert b"numpy.core.multiarray" in path.read_bytes()
    policy = M.load_policy(path, 179, 12)
    for key, array in zip(M.POLICY_KEYS, policy.weights):
        np.testing.assert_array_equal(array, weights[key])
    obs = rng.normal(size=179)
    w = [weights[key].astype(np.float64) for key in M.POLICY_KEYS]
    h = np.maximum(0, w[0] @ obs + w[1])
    h = np.maximum(0, w[2] @ h + w[3])
    np.testing.assert_allclose(policy(obs), np.tanh((w[4] @ h + w[5])[:12]))
    # An ordered dict written by numpy 2 (protocol 5) reads the same.
    path.write_bytes(pickle.dumps(collections.OrderedDict(weights), protocol=5))
    for a, b in zip(M.load_policy(path, 179, 12).weights, policy.weights):
        np.testing.assert_array_equal(a, b)


def test_policy_loader_rejects_malformed_files(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "dkitty_oracle.pkl"
    weights = random_weights(rng, 108)
    write_policy(path, weights)
    with pytest.raises(MatchoptError, match=r"dkitty_oracle.pkl: layer base_network.network.0"):
        M.load_policy(path, 179, 12)  # an Ant environment: 179 inputs
    bad = dict(weights)
    bad["base_network.network.2.weight"] = bad["base_network.network.2.weight"][:, :5]
    write_policy(path, bad)
    with pytest.raises(MatchoptError, match=r"layer base_network.network.2.weight has shape"):
        M.load_policy(path, 108, 12)
    del bad["base_network.network.4.bias"]
    write_policy(path, bad)
    with pytest.raises(MatchoptError, match=r"missing layer\(s\) base_network.network.4.bias"):
        M.load_policy(path, 108, 12)
    path.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(MatchoptError, match="expected a dict of numpy arrays, got list"):
        M.load_policy(path, 108, 12)
    path.write_bytes(pickle.dumps(collections.Counter(a=1)))
    with pytest.raises(MatchoptError, match="holds a collections.Counter object"):
        M.load_policy(path, 108, 12)
    path.write_bytes(pickle.dumps(weights)[:100])
    with pytest.raises(MatchoptError, match="cannot read policy file"):
        M.load_policy(path, 108, 12)


@pytest.mark.parametrize("name, env_cls, task_cls", ROBOTS, ids=IDS)
def test_design_bench_layout_task_loads_and_scores(tmp_path, name, env_cls, task_cls):
    x, y = write_fixture(tmp_path, task_cls, env_cls)
    task = load_task(name, tmp_path)
    keep = y <= np.percentile(y, 40)
    assert len(task.offline) == keep.sum() == 16
    np.testing.assert_array_equal(task.offline.x, x[keep])
    assert task.offline.y.max() <= np.percentile(y, 40)
    assert (task.y_min, task.y_max) == (float(y.min()), float(y.max()))
    assert task_cls.data_status(tmp_path) == "present"
    designs = np.concatenate([x[:2], x[:1]])
    scores = task.score(designs)
    assert scores.shape == (3,) and np.isfinite(scores).all()
    assert scores[0] == scores[2] and scores[0] != scores[1]
    np.testing.assert_array_equal(task.score(x[:2]), scores[:2])


def test_spawned_workers_give_the_serial_values(tmp_path):
    x, _ = write_fixture(tmp_path, M.AntMorphology, M.AntEnv)
    serial = M.AntMorphology(tmp_path, workers=1, rollout_steps=10).score(x[:3])
    pooled = M.AntMorphology(tmp_path, workers=2, rollout_steps=10).score(x[:3])
    np.testing.assert_array_equal(serial, pooled)


def test_missing_files_and_bad_files_are_named(tmp_path):
    with pytest.raises(MatchoptError, match="ant_morphology/ant_oracle.pkl"):
        load_task("ant", tmp_path)
    write_fixture(tmp_path, M.DKittyMorphology, M.DKittyEnv)
    folder = tmp_path / "dkitty_morphology"
    np.save(folder / "dkitty_morphology-x-0.npy", np.zeros((40, 60), np.float32))
    with pytest.raises(MatchoptError, match=r"dkitty_morphology-x-0.npy: expected rows of shape"):
        load_task("dkitty", tmp_path)
    with pytest.raises(MatchoptError, match="workers must be an integer >= 1"):
        M.score_designs("ant", np.zeros((2, 60)), None, workers=0)


def test_missing_mujoco_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)  # makes `import mujoco` fail
    with pytest.raises(MatchoptError, match=r"pip install 'matchopt\[mujoco\]'"):
        M.require_mujoco()


@pytest.mark.parametrize(
    "module, name",
    [("numpy.dtypes", "__builtins__"), ("builtins", "print"), ("os", "system"), ("numpy", "load")],
)
def test_policy_loader_allows_only_its_exact_names(tmp_path, module, name):
    """A crafted policy file naming anything outside the allow-list is refused before it runs."""
    marker = tmp_path / "pwned"
    # GLOBAL opcode by hand: protocol 0 text, then a call that would write the marker.
    payload = f"c{module}\n{name}\n(V{marker}\ntR.".encode()
    path = tmp_path / "ant_oracle.pkl"
    path.write_bytes(payload)
    with pytest.raises(MatchoptError, match=f"holds a {module}.{name} object"):
        M.load_policy(path, 179, 12)
    assert not marker.exists()
