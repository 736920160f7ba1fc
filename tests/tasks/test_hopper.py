"""Hopper tasks: policy decoding, real Hopper-v5 rollouts (short episodes), both datasets."""

import importlib.util
import json

import numpy as np
import pytest

pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

import gymnasium  # noqa: E402
from task_fixtures import HOPPER_STEPS, random_policies, write_hopper  # noqa: E402

from matchopt.errors import MatchoptError  # noqa: E402
from matchopt.runner import run  # noqa: E402
from matchopt.tasks import TASKS, load_task  # noqa: E402
from matchopt.tasks import hopper as hopper_module  # noqa: E402
from matchopt.tasks.hopper import (  # noqa: E402
    N_PARAMS,
    HopperController,
    HopperLocal,
    HopperLocalConfig,
    PolicyEvaluator,
    decode_policy,
    policy_action,
)

STEPS = HOPPER_STEPS  # short episodes keep the rollouts fast


def _policies(n: int, seed: int = 0) -> np.ndarray:
    return random_policies(n, seed)


def _reference_return(x: np.ndarray, reset_seed: int, steps: int) -> float:
    """The protocol's oracle written out directly: one Hopper-v5 episode of ``steps`` steps."""
    w0 = x[:704].reshape(11, 64)
    b0 = x[704:768]
    w1 = x[768:4864].reshape(64, 64)
    b1 = x[4864:4928]
    w2 = x[4928:5120].reshape(64, 3)
    b2 = x[5120:5123]
    env = gymnasium.make("Hopper-v5", max_episode_steps=steps)
    obs, _ = env.reset(seed=reset_seed)
    total, done = 0.0, False
    while not done:
        action = np.tanh(np.tanh(obs @ w0 + b0) @ w1 + b1) @ w2 + b2
        obs, reward, terminated, truncated, _ = env.step(action)
        total += reward
        done = terminated or truncated
    env.close()
    return total


def test_decoding_layout():
    x = np.arange(N_PARAMS, dtype=np.float64)
    blocks = decode_policy(x)
    assert N_PARAMS == 5126
    assert [b.shape for b in blocks] == [(11, 64), (64,), (64, 64), (64,), (64, 3), (3,)]
    np.testing.assert_array_equal(blocks[0][1], np.arange(64, 128))  # row-major W0
    assert blocks[1][0] == 704 and blocks[2][0, 0] == 768 and blocks[3][0] == 4864
    assert blocks[4][0, 0] == 4928 and blocks[5].tolist() == [5120, 5121, 5122]
    # The 3 trailing values (a log-std in design-bench's files) do not change the action.
    obs = np.random.default_rng(0).standard_normal(11)
    policy = _policies(1)[0].astype(np.float64)
    other = policy.copy()
    other[-3:] = 7.0
    np.testing.assert_array_equal(
        policy_action(decode_policy(policy), obs), policy_action(decode_policy(other), obs)
    )
    with pytest.raises(MatchoptError, match="5126"):
        decode_policy(np.zeros(5125))


def test_oracle_runs_hopper_in_process_and_in_a_pool():
    designs = _policies(3, seed=1)
    serial = PolicyEvaluator(max_episode_steps=STEPS, workers=1)(designs)
    expected = [_reference_return(x.astype(np.float64), 0, STEPS) for x in designs]
    np.testing.assert_allclose(serial, expected, rtol=1e-12)
    assert len(set(serial.round(6))) == 3  # different policies, different returns
    pooled = PolicyEvaluator(max_episode_steps=STEPS, workers=2)(designs)
    np.testing.assert_array_equal(pooled, serial)
    # Episode i resets with seed + i; the oracle is their mean.
    two = PolicyEvaluator(episodes=2, seed=5, max_episode_steps=STEPS, workers=1)(designs[:1])
    mean = np.mean([_reference_return(designs[0].astype(np.float64), s, STEPS) for s in (5, 6)])
    assert two[0] == pytest.approx(mean, rel=1e-12)
    with pytest.raises(MatchoptError, match="shape"):
        PolicyEvaluator(workers=1)(np.zeros((2, 10)))


def _write_fixture(root, x, y):
    write_hopper(root, x, y)


def test_hopper_controller_on_design_bench_files(tmp_path):
    assert HopperController.data_status(tmp_path) == "missing"
    with pytest.raises(MatchoptError, match="hopper_controller-x-0.npy"):
        HopperController(tmp_path)
    x = _policies(6, seed=2)
    y = np.array([120.0, 88.5, 640.0, 1300.25, 15.0, 401.0])
    _write_fixture(tmp_path, x, y)
    assert HopperController.data_status(tmp_path) == "present"
    task = HopperController(tmp_path, max_episode_steps=STEPS, workers=1)
    assert len(task.offline) == 6  # max_percentile 100: every row is offline
    assert (task.y_min, task.y_max) == (15.0, 1300.25)
    np.testing.assert_array_equal(task.offline.x, x)
    scores = task.score(x[:2])
    expected = [_reference_return(row.astype(np.float64), 0, STEPS) for row in x[:2]]
    np.testing.assert_allclose(scores, expected, rtol=1e-12)
    assert type(load_task("hopper", tmp_path)) is HopperController


def test_hopper_controller_on_the_real_file():
    """Where design-bench's file is present: all 3,200 rows offline, the table's min and max."""
    folder = hopper_module.resolve_data_dir(None)
    if not (folder / "hopper_controller" / "hopper_controller-x-0.npy").is_file():
        pytest.skip(f"no hopper_controller files under {folder}")
    task = HopperController(folder, max_episode_steps=STEPS, workers=1)
    assert len(task.offline) == HopperController.offline_size == 3_200
    assert task.y_min == pytest.approx(87.93491, abs=1e-4)
    assert task.y_max == pytest.approx(1361.6106, abs=1e-3)
    assert np.isfinite(task.score(task.offline.x[:2])).all()


def test_hopper_controller_rejects_wrong_width(tmp_path):
    _write_fixture(tmp_path, np.zeros((4, 100), dtype=np.float32), np.arange(4.0))
    with pytest.raises(MatchoptError, match="5126"):
        HopperController(tmp_path)


def test_missing_gymnasium_names_the_install_command(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        hopper_module.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gymnasium" else real(name, *a),
    )
    with pytest.raises(MatchoptError, match=r"matchopt\[mujoco\]"):
        HopperLocal(tmp_path)


def test_hopper_local_has_nothing_to_fetch(tmp_path, monkeypatch):
    assert HopperLocal.missing_files(tmp_path) == []
    monkeypatch.setenv("MATCHOPT_DATA_DIR", str(tmp_path))
    assert HopperLocal.data_status() == "generate"  # the folder comes from the environment


def test_hopper_local_generates_caches_and_runs_end_to_end(tmp_path, monkeypatch):
    # 160 rows: a method proposes 128 designs from the best offline rows.
    config = HopperLocalConfig(runs=2, population=8, generations=10, max_episode_steps=STEPS)
    assert HopperLocal.data_status(tmp_path, config) == "generate"
    task = HopperLocal(tmp_path, generation=config, workers=1, generation_workers=1)
    folder = tmp_path / "hopper_local"
    info = json.loads((folder / "generation.json").read_text())
    assert info["settings"]["population"] == 8 and info["environment"] == "Hopper-v5"
    assert len(task.offline) == config.n_rows == 160
    assert HopperLocal.data_status(tmp_path, config) == "present"
    y = task.offline.y
    assert (task.y_min, task.y_max) == (y.min(), y.max()) and y.max() > y.min()
    # Stored returns are the oracle's own values (float32 files).
    rows = [0, 77, 159]
    np.testing.assert_allclose(task.score(task.offline.x[rows]), y[rows], rtol=1e-6)
    # Same seed, same data; a second load reads the cache instead of generating again.
    monkeypatch.setattr(
        hopper_module, "generate_hopper_local", lambda *a, **k: pytest.fail("regenerated")
    )
    again = HopperLocal(tmp_path, generation=config, workers=1, generation_workers=1)
    np.testing.assert_array_equal(again.offline.x, task.offline.x)
    # Other settings are not served from this cache.
    assert HopperLocal.data_status(tmp_path, HopperLocalConfig(runs=2, population=8)) == "generate"

    record, designs = run(task, "matchopt", seed=0, preset="quick")
    assert designs.shape == (128, N_PARAMS) and designs.dtype == np.float32
    assert record.task == "hopper-local" and len(record.scores) == 128
    assert np.isfinite(record.scores).all() and record.p100 >= record.p50

    # New settings replace the cache (and its generation.json) in the same folder.
    monkeypatch.undo()
    shorter = HopperLocalConfig(runs=2, population=8, generations=10, max_episode_steps=10)
    HopperLocal(tmp_path, generation=shorter, workers=1, generation_workers=1)
    assert HopperLocal.data_status(tmp_path, shorter) == "present"
    assert HopperLocal.data_status(tmp_path, config) == "generate"
    stored = json.loads((folder / "generation.json").read_text())
    assert stored["settings"]["max_episode_steps"] == 10


def test_generation_is_seeded_and_antithetic():
    config = HopperLocalConfig(runs=1, population=8, generations=3, max_episode_steps=15)
    x1, y1 = hopper_module.generate_hopper_local(config, workers=1, progress=False)
    x2, y2 = hopper_module.generate_hopper_local(config, workers=2, progress=False)  # a pool
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert x1.shape == (24, N_PARAMS) and x1.dtype == np.float32
    assert (x1[:, -3:] == 0).all()  # the unused tail is never perturbed
    # Antithetic pairs: members i and i + 4 mirror each other around the run's mean.
    mean = (x1[0].astype(np.float64) + x1[4]) / 2
    np.testing.assert_allclose((x1[1].astype(np.float64) + x1[5]) / 2, mean, atol=1e-6)
    with pytest.raises(MatchoptError, match="even"):
        HopperLocalConfig(population=7).validate()


def test_registered():
    assert TASKS["hopper"] is HopperController and TASKS["hopper-local"] is HopperLocal
    assert not HopperController.embedded and not HopperLocal.embedded
