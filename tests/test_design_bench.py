"""matchopt.design_bench: a design-baselines style script runs with one import changed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from matchopt import design_bench
from matchopt.errors import MatchoptError
from matchopt.tasks import load_task


def gradient_ascent_script(task, steps: int = 30, seed: int = 0) -> np.ndarray:
    """design-baselines' gradient ascent, condensed (their order of calls and conversions)."""
    torch.manual_seed(seed)
    if task.is_discrete:
        task.map_to_logits()
    task.map_normalize_x()
    task.map_normalize_y()
    x, y = torch.tensor(task.x), torch.tensor(task.y)
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(task.input_size, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 1),
    )  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for xb, yb in zip(x.split(128), y.split(128)):
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    solution = x[torch.topk(y[:, 0], k=128).indices].clone().requires_grad_(True)
    for _ in range(steps):
        (grad,) = torch.autograd.grad(model(solution).sum(), solution)
        solution = (solution + 0.01 * np.sqrt(task.input_size) * grad).detach()
        solution.requires_grad_(True)
    score = task.predict(solution.detach().numpy())
    return task.denormalize_y(score)


def test_tfbind8_script_end_to_end(data_dir):
    task = design_bench.make("TFBind8-Exact-v0", data_dir)
    reference = load_task("tfbind8", data_dir)
    assert task.is_discrete and task.num_classes == 4 and task.dataset_size == 32_898
    assert task.x.dtype == np.int32 and task.x.shape == (32_898, 8)
    assert task.y.shape == (32_898, 1) and task.y.dtype == np.float32
    # The exact oracle scores the offline designs with their own labels.
    np.testing.assert_allclose(task.predict(task.x), task.y, rtol=1e-6)
    scores = gradient_ascent_script(task)
    assert scores.shape == (128, 1) and scores.dtype == np.float32
    # The script's designs, rounded back to tokens, score as matchopt's oracle says.
    assert task.is_logits and task.is_normalized_x and task.x.shape == (32_898, 8, 3)
    normalized = reference.normalize(scores[:, 0])
    assert 0 <= normalized.min() and normalized.max() <= 1
    assert np.median(normalized) >= reference.normalize(reference.offline.y).min()


def test_conversions_and_normalization_round_trip():
    task = design_bench.make("potts")
    tokens = task.x
    logits = task.to_logits(tokens)
    assert logits.dtype == np.float32 and logits.shape == tokens.shape + (task.num_classes - 1,)
    np.testing.assert_array_equal(task.to_integers(logits), tokens)
    task.map_to_logits()
    task.map_normalize_x()
    normalized = task.x
    np.testing.assert_allclose(normalized.reshape(len(normalized), -1).mean(0), 0, atol=1e-5)
    np.testing.assert_array_equal(task.to_integers(task.denormalize_x(normalized)), tokens)
    task.map_normalize_y()
    np.testing.assert_allclose(task.denormalize_y(task.y), design_bench.make("potts").y, 1e-5)
    # predict takes the current format and answers in the current y format.
    np.testing.assert_allclose(
        task.denormalize_y(task.predict(normalized[:5])),
        load_task("potts").score(tokens[:5]).reshape(-1, 1).astype(np.float32),
        rtol=1e-5,
    )
    task.map_to_integers()
    assert not task.is_logits and not task.is_normalized_x and task.x.dtype == np.int32
    with pytest.raises(ValueError, match="cannot normalize discrete design values"):
        task.map_normalize_x()
    batches = list(task.iterate_batches(1000, drop_remainder=True))
    assert all(len(xb) == 1000 for xb, _ in batches)


def test_continuous_tasks_and_names():
    task = design_bench.make("styblinski-tang")
    assert not task.is_discrete and task.x.dtype == np.float32
    with pytest.raises(ValueError, match="only supported on discrete"):
        task.num_classes  # noqa: B018
    task.map_normalize_x()
    np.testing.assert_allclose(task.predict(task.x[:3]), task.y[:3], rtol=1e-4, atol=1e-4)
    with pytest.raises(MatchoptError, match="TFBind8-Exact-v0"):
        design_bench.make("Nope-v0")
    assert set(design_bench.TASK_NAMES.values()) == {
        "tfbind8", "tfbind10", "superconductor", "ant", "dkitty", "hopper", "utr"
    }  # fmt: skip


def test_editing_task_x_leaves_the_task_alone():
    """design-bench scripts may write into ``task.x`` (e.g. noise added in place)."""
    for name in ("potts", "styblinski-tang"):
        task = design_bench.make(name)
        before = task.x.copy()
        edited = task.x
        edited[:] = 0
        np.testing.assert_array_equal(task.x, before)


def test_a_name_that_is_not_a_string_is_one_error():
    with pytest.raises(MatchoptError, match="a task name is a string, got list"):
        design_bench.make(["TFBind8-Exact-v0"])


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_predict_refuses_logits_that_are_not_finite(value):
    """NaN or infinite logits round to some token all the same: predict names them instead of
    scoring designs nobody asked for."""
    task = design_bench.make("potts")
    task.map_to_logits()
    logits = task.x[:4].copy()
    logits[:] = value
    with pytest.raises(MatchoptError, match=r"predict: logits hold \d+ NaN or infinite value"):
        task.predict(logits)
    logits = task.x[:4].copy()
    logits[2, 5, 1] = value  # one value is enough
    with pytest.raises(MatchoptError, match="the first at row 2, position 5"):
        task.predict(logits)
    task.map_normalize_x()
    huge = task.x[:4].copy()
    huge[1, 0, 0] = 3e38  # finite, but beyond float32 once denormalized
    with pytest.raises(MatchoptError, match="denormalized logits hold 1 NaN or infinite"):
        task.predict(huge)
    assert np.isfinite(task.predict(task.x[:4])).all()


@pytest.mark.parametrize("data_dir", [123, b"/data"], ids=["int", "bytes"])
def test_a_data_dir_that_is_not_a_path_is_a_type_error(data_dir):
    with pytest.raises(TypeError, match=f"data_dir must be a path .*not {type(data_dir).__name__}"):
        design_bench.make("tfbind8", data_dir=data_dir)
    with pytest.raises(TypeError, match="data_dir must be a path"):
        design_bench.make("styblinski-tang", data_dir=data_dir)  # embedded: no files read


def test_design_benchs_name_makes_the_task(data_dir, monkeypatch):
    from matchopt import design_bench

    monkeypatch.setenv("MATCHOPT_DATA_DIR", str(data_dir))
    task = design_bench.make("UTR-ResNet-v0")
    assert task.x.shape == (10_000, 50) and task.num_classes == 4
    assert float(task.y.max()) <= 7.2  # the lower half of loads up to 12
