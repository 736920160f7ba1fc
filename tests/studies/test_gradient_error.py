import numpy as np
import pytest
import torch

from matchopt.data import DesignSpace
from matchopt.encodings import DesignEncoder
from matchopt.errors import MatchoptError
from matchopt.models.mlp import mlp_layers
from matchopt.studies.gradient_error import (
    ERRORS_FILE,
    FIGURE_FILE,
    SUMMARY_FILE,
    fit_regression,
    run_gradient_error_study,
    shekel,
    shekel_gradient,
    surrogate_gradient,
)

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

TINY = {
    "n_train": 256,
    "alphas": (0.1, 1.0),
    "n_test": 40,
    "epochs": 2,
    "batch_size": 32,
    "hidden": (16, 8),
}


def _torch_shekel(x: torch.Tensor) -> torch.Tensor:
    """Independent torch form of the negated Shekel function, written out term by term."""
    centers = [
        (4, 4, 4, 4),
        (1, 1, 1, 1),
        (8, 8, 8, 8),
        (6, 6, 6, 6),
        (3, 7, 3, 7),
        (2, 9, 2, 9),
        (5, 3, 5, 3),
        (8, 1, 8, 1),
        (6, 2, 6, 2),
        (7, 3.6, 7, 3.6),
    ]
    betas = [0.1, 0.2, 0.2, 0.4, 0.4, 0.6, 0.3, 0.7, 0.5, 0.5]
    total = torch.zeros(x.shape[0], dtype=x.dtype)
    for c, b in zip(centers, betas):
        total = total + 1.0 / (((x - torch.tensor(c, dtype=x.dtype)) ** 2).sum(-1) + b)
    return total


CENTERS = np.array(
    [(4, 4, 4, 4), (1, 1, 1, 1), (8, 8, 8, 8), (6, 6, 6, 6), (3, 7, 3, 7), (2, 9, 2, 9),
     (5, 3, 5, 3), (8, 1, 8, 1), (6, 2, 6, 2), (7, 3.6, 7, 3.6)]
)  # fmt: skip
BETAS = np.array([0.1, 0.2, 0.2, 0.4, 0.4, 0.6, 0.3, 0.7, 0.5, 0.5])


def float32_constant_bound(x: np.ndarray, power: int) -> np.ndarray:
    """Bound on |BoTorch - exact| from BoTorch's float32 centers and widths (per row).

    First order in the constants' rounding: d/dbeta of 1/(s + beta)^k is k/(s + beta)^(k+1) and
    d/dc_j moves s by 2|x_j - c_j| |dc_j|; power k = 1 for values, 2 for gradients (the
    gradient's factor 2|x - c| is bounded with the same rounding). Plus float64 round-off.
    """
    d_beta = np.abs(BETAS.astype(np.float32).astype(np.float64) - BETAS)
    d_c = np.abs(CENTERS.astype(np.float32).astype(np.float64) - CENTERS)
    diff = np.abs(x[:, None, :] - CENTERS[None])
    s = (diff**2).sum(-1) + BETAS
    moved = d_beta + 2 * (diff * d_c[None]).sum(-1)
    scale = 1.0 if power == 1 else 2 * (diff.sum(-1) + 1.0)
    return (power * moved * scale / s ** (power + 1) + d_c.sum(-1) * 2 / s**power).sum(-1) + 1e-12


def test_shekel_values_and_optimum():
    x = np.random.default_rng(0).normal(2.0, 3.0, size=(50, 4))
    expected = _torch_shekel(torch.from_numpy(x)).numpy()
    assert np.all(np.abs(shekel(x) - expected) <= float32_constant_bound(x, 1))
    # The standard Shekel-10 minimum is about -10.5364 near (4, 4, 4, 4); we maximize -f.
    assert shekel(np.full((1, 4), 4.0))[0] == pytest.approx(10.5363, abs=1e-3)


def test_shekel_gradient_matches_the_analytic_form_and_finite_differences():
    x = np.random.default_rng(1).normal(2.0, 3.0, size=(64, 4))
    xt = torch.from_numpy(x).requires_grad_(True)
    (exact,) = torch.autograd.grad(_torch_shekel(xt).sum(), xt)
    error = np.abs(shekel_gradient(x) - exact.numpy()).max(axis=1)
    assert np.all(error <= float32_constant_bound(x, 2))

    h = 1e-6
    fd = np.stack([(shekel(x + h * e) - shekel(x - h * e)) / (2 * h) for e in np.eye(4)], axis=1)
    np.testing.assert_allclose(shekel_gradient(x), fd, rtol=1e-5, atol=1e-8)


def test_shekel_rejects_wrong_shape():
    with pytest.raises(MatchoptError, match=r"\(n, 4\)"):
        shekel(np.zeros((3, 5)))


def _encoder(rng: np.random.Generator) -> tuple[DesignEncoder, np.ndarray, np.ndarray]:
    # Features with very different scales, and y far from unit scale, so a missing or
    # inverted factor in the conversion shows.
    x = rng.standard_normal((500, 3)) * np.array([2.0, 0.5, 10.0]) + np.array([1.0, -3.0, 0.0])
    y = 7.0 * rng.standard_normal(500) + 100.0
    return DesignEncoder(DesignSpace.continuous(3)).fit(x, y), x, y


def test_surrogate_gradient_of_a_linear_model_by_hand():
    encoder, x, y = _encoder(np.random.default_rng(2))
    w = torch.tensor([[0.5, -1.5, 2.0]], dtype=torch.float64)

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(w.clone())

        def forward(self, u):
            return (u @ self.w.T).squeeze(-1) + 0.3

    grads = surrogate_gradient(Linear(), encoder, x[:10])
    # y_raw = mean_y + std_y * (w . (x - mean_x) / std_x + 0.3)  =>  grad = std_y * w / std_x.
    expected = y.std() * w.numpy()[0] / x.std(axis=0)
    np.testing.assert_allclose(grads, np.broadcast_to(expected, (10, 3)), rtol=1e-10)


def test_surrogate_gradient_matches_finite_differences_in_raw_units():
    encoder, x, _ = _encoder(np.random.default_rng(3))
    torch.manual_seed(0)
    net = mlp_layers(3, (16, 16), 1, activation="tanh").double()  # smooth, so FD is exact

    def raw_prediction(points):
        u = torch.from_numpy(encoder.x_scaler_.transform(points))
        with torch.no_grad():
            return encoder.decode_y(net(u).squeeze(-1).numpy())

    points = x[:20]
    h = 1e-5
    fd = np.stack(
        [
            (raw_prediction(points + h * e) - raw_prediction(points - h * e)) / (2 * h)
            for e in np.eye(3)
        ],
        axis=1,
    )
    # encode_x rounds the features to float32, hence the looser tolerance.
    np.testing.assert_allclose(surrogate_gradient(net, encoder, points), fd, rtol=1e-4)


def test_fit_regression_reduces_the_training_loss():
    rng = np.random.default_rng(4)
    x = torch.from_numpy(rng.standard_normal((200, 4)).astype(np.float32))
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0]) + 0.1
    _, losses = fit_regression(
        x, y, hidden=(32, 16), negative_slope=0.3, epochs=30, lr=1e-2, batch_size=32, seed=0
    )
    assert losses[-1] < 0.1 * losses[0]


def test_tiny_study_writes_sorted_errors_summary_and_figure(tmp_path):
    summary = run_gradient_error_study(tmp_path / "a", seed=0, **TINY)
    errors = pd.read_csv(tmp_path / "a" / ERRORS_FILE)
    assert list(errors.columns) == ["alpha", "model", "rank", "error"]
    assert len(errors) == 2 * 2 * TINY["n_test"]
    for (alpha, model), group in errors.groupby(["alpha", "model"]):
        assert alpha in TINY["alphas"] and model in ("match-opt", "regression")
        assert list(group["rank"]) == list(range(TINY["n_test"]))
        assert np.all(np.diff(group["error"].to_numpy()) >= 0)
        assert np.all(np.isfinite(group["error"])) and (group["error"] >= 0).all()
        row = summary[(summary["alpha"] == alpha) & (summary["model"] == model)].iloc[0]
        assert row["median"] == pytest.approx(group["error"].median())
        assert row["mean"] == pytest.approx(group["error"].mean())
    assert len(summary) == 4
    written = pd.read_csv(tmp_path / "a" / SUMMARY_FILE)
    np.testing.assert_allclose(written["mean"], summary["mean"])
    assert (tmp_path / "a" / FIGURE_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Atomic writes leave no temporary files behind.
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(
        [ERRORS_FILE, SUMMARY_FILE, FIGURE_FILE]
    )

    run_gradient_error_study(tmp_path / "b", seed=0, **TINY)
    run_gradient_error_study(tmp_path / "c", seed=1, **TINY)
    first = (tmp_path / "a" / ERRORS_FILE).read_bytes()
    assert (tmp_path / "b" / ERRORS_FILE).read_bytes() == first
    assert (tmp_path / "c" / ERRORS_FILE).read_bytes() != first


@pytest.mark.parametrize(
    "override, message",
    [
        ({"alphas": (0.1, -1.0)}, "alphas must be in"),
        ({"alphas": ()}, "at least one"),
        ({"n_train": 16}, "n_train=16"),
        ({"n_test": 0}, "n_test"),
        ({"epochs": 0}, "epochs"),
    ],
)
def test_study_rejects_bad_arguments(tmp_path, override, message):
    with pytest.raises(MatchoptError, match=message):
        run_gradient_error_study(tmp_path, **{**TINY, **override})
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("folder", ["a_file", "a_file/sub"])
def test_an_output_folder_that_cannot_be_made_fails_before_training(tmp_path, monkeypatch, folder):
    import matchopt.studies.gradient_error as study

    (tmp_path / "a_file").write_text("x")

    def no_training(*args, **kwargs):
        raise AssertionError("training ran before the output folder was checked")

    monkeypatch.setattr(study.MatchOpt, "fit", no_training)
    monkeypatch.setattr(study, "fit_regression", no_training)
    with pytest.raises(MatchoptError, match="study folder .*a_file"):
        run_gradient_error_study(tmp_path / folder, **TINY)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"alphas": [1e308]}, "alphas must be in"),
        ({"n_train": 100_000_000_000}, "at most 10,000,000"),
        ({"n_test": 100_000_000_000}, "at most 10,000,000"),
    ],
)
def test_study_sizes_and_scales_beyond_what_it_can_compute_are_refused(tmp_path, kwargs, words):
    from matchopt.studies.gradient_error import run_gradient_error_study

    with pytest.raises(MatchoptError, match=words):
        run_gradient_error_study(tmp_path, **kwargs)
